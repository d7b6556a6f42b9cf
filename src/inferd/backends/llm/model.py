"""Our own Llama forward pass over a paged KV cache, reading Hugging Face ``LlamaForCausalLM``
safetensors.

One :meth:`LlamaModel.step` runs a *batched step*: a mix of prefill chunks and single decode
tokens from many sequences. The step's tokens are flattened into one ``[T, hidden]`` matrix (the
projections and the MLP run once for all of them), each token carries its own position (rotary
embeddings), and each token attends over its own sequence's cached K/V plus the sequence's new
tokens up to itself. Attention runs as a few padded batches, one SDPA call each (every decode
token in one; the prefill chunks in batches of similar size, each row masked to its own
sequence's keys), not one call per sequence. The K/V of the new tokens are written into the
cache first, at the slots the sequence's block table gives
(``block_table[pos // block_tokens] * block_tokens + pos % block_tokens``); each sequence then
reads back all of its positions through the same table. On CPU in float32 the decode tokens'
attention instead runs in a compiled kernel that reads each sequence's blocks where they lie
(:mod:`inferd.backends.llm.paged_attention`; without it, the gather + SDPA path).

The cache (:class:`KVCache`) is one preallocated tensor per layer holding K and V,
``[2 * kv_heads, total_blocks, block_tokens, head_dim]``: one ``index_select`` of whole blocks
gathers a batch's keys and values together, each (head, member) a contiguous ``[keys, d]``
matrix that SDPA reads without a copy. Which blocks a sequence owns is the engine's business
(``blocks.BlockAllocator``), this module only follows the tables it is given.

Only the ``llama`` architecture (``LlamaForCausalLM``) is read; anything else is refused with an
error naming what is supported. Weights come only from safetensors (never a pickle).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from inferd.errors import ConfigError

__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "KVCache",
    "LlamaConfig",
    "LlamaModel",
    "StepSequence",
    "read_llama_config",
]

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM",)
SUPPORTED_MODEL_TYPES = ("llama",)


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """What the forward pass needs of a Hugging Face ``config.json``."""

    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None


def _refuse(folder: Path, why: str) -> ConfigError:
    return ConfigError(f"language model in {folder}: {why}")


def _eos_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)


def read_llama_config(folder: Path) -> LlamaConfig:
    """The Llama settings of ``folder/config.json``; ConfigError for other architectures or
    settings this forward pass does not implement (named)."""
    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise _refuse(folder, "config.json (Hugging Face format) is missing") from exc
    except (OSError, ValueError) as exc:
        raise _refuse(folder, f"config.json cannot be read: {exc}") from exc
    if not isinstance(raw, dict):
        raise _refuse(folder, "config.json must hold a JSON object")
    archs = raw.get("architectures") or []
    model_type = raw.get("model_type")
    supported = ", ".join(SUPPORTED_ARCHITECTURES)
    if (archs and any(a not in SUPPORTED_ARCHITECTURES for a in archs)) or (
        model_type not in SUPPORTED_MODEL_TYPES
    ):
        found = ", ".join(archs) if archs else f"model_type {model_type!r}"
        raise _refuse(
            folder,
            f"architecture {found} is not supported; this runtime serves {supported} "
            f"(model_type 'llama')",
        )
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if rope else "default"
    if rope_type != "default":
        raise _refuse(folder, f"rope scaling {rope_type!r} is not supported (only 'default')")
    theta: Any = rope.get("rope_theta", raw.get("rope_theta")) or 10000.0
    for flag in ("attention_bias", "mlp_bias"):
        if raw.get(flag):
            raise _refuse(folder, f"'{flag}': true is not supported")
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise _refuse(folder, f"hidden_act {act!r} is not supported (only 'silu')")
    try:
        hidden = int(raw["hidden_size"])
        heads = int(raw["num_attention_heads"])
        kv_heads = int(raw.get("num_key_value_heads") or heads)
        head_dim = int(raw.get("head_dim") or hidden // heads)
        config = LlamaConfig(
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            layers=int(raw["num_hidden_layers"]),
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=int(raw["intermediate_size"]),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            eos_token_ids=_eos_ids(raw.get("eos_token_id")),
            bos_token_id=raw.get("bos_token_id"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _refuse(folder, f"config.json lacks or garbles {exc}") from exc
    if heads % kv_heads:
        raise _refuse(folder, "num_attention_heads must be a multiple of num_key_value_heads")
    return config


class KVCache:
    """Preallocated K and V of each layer in one tensor,
    ``[2 * kv_heads, total_blocks, block_tokens, head_dim]``: the K heads, then the V heads.
    Head-major, so that the blocks of a batch gathered in one ``index_select`` are already
    ``[2 * kv_heads, members, keys, head_dim]``, contiguous per head and member: the K and the V
    of every member in one copy, ready for batched matrix products with no transpose."""

    def __init__(
        self,
        config: LlamaConfig,
        total_blocks: int,
        block_tokens: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (2 * config.kv_heads, total_blocks, block_tokens, config.head_dim)
        self.total_blocks = total_blocks
        self.block_tokens = block_tokens
        self.kv = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.layers)]

    @staticmethod
    def block_bytes(config: LlamaConfig, block_tokens: int, dtype: torch.dtype) -> int:
        """Bytes one block takes over all layers, K and V."""
        element = torch.empty((), dtype=dtype).element_size()
        return 2 * config.layers * block_tokens * config.kv_heads * config.head_dim * element


@dataclass(frozen=True, slots=True)
class StepSequence:
    """One sequence's part of a step: ``tokens`` new tokens at positions ``start`` onwards
    (``start`` tokens of it are already cached), its cache blocks in order."""

    tokens: Sequence[int]
    start: int
    block_table: Sequence[int]


_LAYER_KEYS = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
)


def _safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise _refuse(folder, f"model.safetensors.index.json cannot be read: {exc}") from exc
        files = []
        for name in names:
            if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
                raise _refuse(folder, f"weight shard {name!r} must be a file beside the index")
            files.append(folder / name)
        return files
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    raise _refuse(
        folder,
        "no model.safetensors (or model.safetensors.index.json) found; weights are read from "
        "safetensors only",
    )


def _check_inside(path: Path, folder: Path) -> None:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError as exc:
        raise _refuse(folder, f"{path.name} resolves outside the model folder") from exc


class LlamaModel:
    """A Llama decoder with a batched step over a paged KV cache (inference only)."""

    def __init__(
        self,
        config: LlamaConfig,
        weights: dict[str, torch.Tensor],
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        paged_attention: bool = True,
    ) -> None:
        self.config = config
        self.dtype = dtype
        self.device = torch.device(device)

        def take(name: str) -> torch.Tensor:
            tensor = weights.get(name)
            if tensor is None:
                raise ConfigError(f"language model weights lack '{name}'")
            return tensor.to(device=self.device, dtype=dtype).contiguous()

        self.embed = take("model.embed_tokens.weight")
        if tuple(self.embed.shape) != (config.vocab_size, config.hidden_size):
            raise ConfigError(
                f"language model weights: embed_tokens is {tuple(self.embed.shape)}, config.json "
                f"says ({config.vocab_size}, {config.hidden_size})"
            )
        self.layers: list[dict[str, torch.Tensor]] = []
        for i in range(config.layers):
            layer = {key: take(f"model.layers.{i}.{key}") for key in _LAYER_KEYS}
            # q, k, v as one matrix: one matmul per layer for all three
            layer["qkv"] = torch.cat(
                [
                    layer.pop("self_attn.q_proj.weight"),
                    layer.pop("self_attn.k_proj.weight"),
                    layer.pop("self_attn.v_proj.weight"),
                ]
            ).contiguous()
            layer["gate_up"] = torch.cat(
                [layer.pop("mlp.gate_proj.weight"), layer.pop("mlp.up_proj.weight")]
            ).contiguous()
            self.layers.append(layer)
        self.norm = take("model.norm.weight")
        if config.tie_word_embeddings or "lm_head.weight" not in weights:
            self.lm_head = self.embed
        else:
            self.lm_head = take("lm_head.weight")
        half = config.head_dim // 2
        exponent = torch.arange(0, config.head_dim, 2, dtype=torch.int64).float() / config.head_dim
        self._inv_freq = (1.0 / (config.rope_theta**exponent)).to(self.device)
        assert self._inv_freq.shape[0] == half
        # the decode-attention kernel (CPU, float32), built in a thread (loads do not wait):
        # None is the gather + SDPA path, until it is there or for good; steps read it once
        # per attention group, so the switch needs no lock
        self.paged_kernel: Any | None = None
        self._kernel_build: threading.Thread | None = None
        if paged_attention and self.device.type == "cpu" and dtype == torch.float32:
            from inferd.backends.llm import paged_attention as paged

            self._kernel_build = paged.load_soon(self._use_kernel)

    def _use_kernel(self, module: Any) -> None:
        self.paged_kernel = module

    def wait_for_kernel(self, timeout_s: float | None = None) -> Any | None:
        """The compiled decode-attention kernel once its build (started at load) has ended, or
        ``timeout_s`` ran out; None: the gather + SDPA path."""
        if self._kernel_build is not None:
            self._kernel_build.join(timeout_s)
        return self.paged_kernel

    @classmethod
    def load(
        cls,
        folder: Path,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        paged_attention: bool = True,
    ) -> LlamaModel:
        """Read ``folder`` (Hugging Face layout: config.json, model.safetensors[.index.json]);
        every file must lie inside the folder once symlinks are resolved."""
        from safetensors import safe_open

        config = read_llama_config(folder)
        weights: dict[str, torch.Tensor] = {}
        for path in _safetensors_files(folder):
            _check_inside(path, folder)
            if not path.is_file():
                raise _refuse(folder, f"weight file {path.name} is missing")
            try:
                with safe_open(str(path), framework="pt") as handle:
                    for key in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
                        weights[key] = handle.get_tensor(key)
            except Exception as exc:  # safetensors raises its own error types
                raise _refuse(folder, f"{path.name} cannot be read: {exc}") from exc
        return cls(config, weights, dtype=dtype, device=device, paged_attention=paged_attention)

    # -- the forward pass ------------------------------------------------------------------------

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # one fused kernel (in float32 at least, as Hugging Face computes it)
        h = F.rms_norm(x.float(), (x.shape[-1],), eps=self.config.rms_norm_eps)
        return weight * h.to(x.dtype)

    def _rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and the signed sin of each position, ``[T, 1, head_dim]`` each: the sin's
        first half negated, so that :meth:`_rotate` needs only a roll for Hugging Face's
        ``rotate_half``."""
        freqs = positions.float()[:, None] * self._inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        sin = emb.sin()
        sin[:, : freqs.shape[1]].neg_()
        return emb.cos().to(self.dtype)[:, None, :], sin.to(self.dtype)[:, None, :]

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
        # x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1) = roll(x) * sign
        return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), signed_sin)

    @torch.inference_mode()
    def step(self, seqs: Sequence[StepSequence], cache: KVCache) -> torch.Tensor:
        """Run the step; the logits (float32) at each sequence's last new token, ``[n, vocab]``."""
        cfg = self.config
        bt = cache.block_tokens
        dev = self.device
        lengths = [len(s.tokens) for s in seqs]
        starts = [s.start for s in seqs]
        flat_tokens: list[int] = []
        positions: list[int] = []
        write_slots: list[int] = []
        for s, n in zip(seqs, lengths, strict=True):
            if n == 0:
                raise ValueError("a step sequence needs at least one token")
            end = s.start + n
            if -(-end // bt) > len(s.block_table):
                raise ValueError(f"block table too short for {end} tokens")
            flat_tokens.extend(s.tokens)
            table = s.block_table
            for pos in range(s.start, end):
                positions.append(pos)
                write_slots.append(table[pos // bt] * bt + pos % bt)
        # the step's index tensors, built once from plain lists (not per layer, not per
        # sequence, not through chains of small tensor operations)
        kv2 = 2 * cfg.kv_heads
        head_rows = cache.total_blocks * bt  # one head's token rows in a layer's cache
        write = torch.tensor(
            [c * head_rows + slot for c in range(kv2) for slot in write_slots],
            dtype=torch.int64,
            device=dev,
        )
        cos, sin = self._rotary(torch.tensor(positions, dtype=torch.int64, device=dev))
        # attention in padded batches, one SDPA call each: the decode tokens (one query each)
        # and the prefill chunks, grouped by size (each query attends to its sequence's cached
        # keys and its own chunk up to itself: a causal mask per row)
        groups_of = [
            _AttentionGroup.build(
                members,
                seqs,
                lengths,
                bt,
                len(flat_tokens),
                cache.total_blocks,
                cfg,
                self.dtype,
                dev,
                self.paged_kernel,
            )
            for members in _attention_batches(lengths, starts)
        ]
        x = self.embed.index_select(0, torch.tensor(flat_tokens, dtype=torch.int64, device=dev))
        q_size = cfg.heads * cfg.head_dim
        kv_size = cfg.kv_heads * cfg.head_dim
        total = len(flat_tokens)
        for index, layer in enumerate(self.layers):
            h = self._rms(x, layer["input_layernorm.weight"])
            qkv = h @ layer["qkv"].T
            # q and k rotated together (one set of element-wise kernels for both)
            qk = qkv[:, : q_size + kv_size].view(total, cfg.heads + cfg.kv_heads, cfg.head_dim)
            qk = self._rotate(qk, cos, sin)
            q = qk[:, : cfg.heads]
            v = qkv[:, q_size + kv_size :].view(total, cfg.kv_heads, cfg.head_dim)
            # the new K and V, head-major like the cache, written in one copy
            new_kv = torch.cat((qk[:, cfg.heads :].transpose(0, 1), v.transpose(0, 1)))
            layer_kv = cache.kv[index]
            layer_kv.view(-1, cfg.head_dim).index_copy_(0, write, new_kv.view(-1, cfg.head_dim))
            if len(groups_of) == 1 and groups_of[0].rows is None and groups_of[0].valid is None:
                attn = groups_of[0].attend(q, layer_kv)  # the whole step, in order, unpadded
            else:
                attn = torch.empty((total, q_size), dtype=x.dtype, device=dev)
                for g in groups_of:
                    g.scatter(g.attend(q, layer_kv), attn)
            x = torch.addmm(x, attn, layer["self_attn.o_proj.weight"].T)
            h = self._rms(x, layer["post_attention_layernorm.weight"])
            gate_up = h @ layer["gate_up"].T
            gate = gate_up[:, : cfg.intermediate_size]
            up = gate_up[:, cfg.intermediate_size :]
            x = torch.addmm(x, F.silu(gate) * up, layer["mlp.down_proj.weight"].T)
        if total > len(seqs):  # some sequences computed several tokens: their last ones
            lasts = [end - 1 for end in itertools.accumulate(lengths)]
            x = x.index_select(0, torch.tensor(lasts, dtype=torch.int64, device=dev))
        final = self._rms(x, self.norm)
        return (final @ self.lm_head.T).float()


_EMPTY = torch.empty(0)

#: a prefill batch is split when padding would make its attention this many times its need
_PADDING_LIMIT = 2.0


def _attention_batches(lengths: Sequence[int], starts: Sequence[int]) -> list[list[int]]:
    """The step's sequences (indexes) in attention batches: every decode token together; the
    prefill chunks by size, a batch closed when padding its members to its largest chunk and
    context would cost more than ``_PADDING_LIMIT`` times their own query x key area (one long
    chunk is not padded onto many short prompts, many similar prompts share one call)."""
    decode = [i for i, n in enumerate(lengths) if n == 1]
    prefill = sorted(
        (i for i, n in enumerate(lengths) if n > 1),
        key=lambda i: (lengths[i] * (starts[i] + lengths[i]), i),
    )
    batches: list[list[int]] = [decode] if decode else []
    current: list[int] = []
    area = widest = longest = 0
    for i in prefill:
        n, end = lengths[i], starts[i] + lengths[i]
        grown = (len(current) + 1) * max(widest, n) * max(longest, end)
        if current and grown > _PADDING_LIMIT * (area + n * end):
            batches.append(current)
            current, area, widest, longest = [], 0, 0, 0
        current.append(i)
        area += n * end
        widest, longest = max(widest, n), max(longest, end)
    if current:
        batches.append(current)
    return batches


@dataclass(frozen=True, slots=True)
class _AttentionGroup:
    """Some of a step's sequences padded into one attention batch of ``B`` members with ``N``
    queries each: ``queries`` ``[B * N]`` indexes the step's flat tokens (padding repeats a
    sequence's last token; None: the group is the step's tokens in order, one each),
    ``blocks`` ``[2 * kv_heads * B * nb]`` the rows of a layer's cache viewed as
    ``[2 * kv_heads * total_blocks, block_tokens, d]`` that hold each member's keys and values
    (padding blocks point anywhere, masked), ``mask`` ``[B, 1, N, L]`` lets each query see the
    keys at or before its position; ``valid`` picks the real rows of the flattened ``[B * N]``
    output (None: every row is real) and ``rows`` says where they go in the step (None: the
    group is the whole step, in order)."""

    queries: torch.Tensor | None
    blocks: torch.Tensor
    members: int
    mask: torch.Tensor
    valid: torch.Tensor | None
    rows: torch.Tensor | None
    kv_heads: int
    #: the compiled kernel (decode groups only) and its block tables ``[B, nb]`` (int32) and
    #: context lengths ``[B]``: the cache read in place (``blocks`` and ``mask`` left empty)
    kernel: Any | None = None
    tables: torch.Tensor | None = None
    context: torch.Tensor | None = None

    def attend(self, q: torch.Tensor, layer_kv: torch.Tensor) -> torch.Tensor:
        """The group's attention output, ``[B * N, heads * d]`` (padding rows included), for the
        step's queries ``[T, heads, d]`` over one layer's cache."""
        d = q.shape[-1]
        b, kvh, heads = self.members, self.kv_heads, q.shape[1]
        if self.kernel is not None:
            assert self.tables is not None
            assert self.context is not None
            qs = q if self.queries is None else q.index_select(0, self.queries)
            out: torch.Tensor = self.kernel.decode_attention(
                qs, layer_kv, self.tables, self.context, d**-0.5
            )
            return out
        # one copy of whole blocks (contiguous rows) for K and V together:
        # [2, kv_heads, B, L, d], every (head, member) a contiguous [L, d] matrix
        picked = layer_kv.view(-1, *layer_kv.shape[2:]).index_select(0, self.blocks)
        kv = picked.view(2, kvh, b, -1, d)
        qs = q if self.queries is None else q.index_select(0, self.queries)
        qs = qs.view(b, -1, heads, d).transpose(1, 2)  # [B, heads, N, d]
        # SDPA takes the [B, kv_heads, L, d] views as they are (no copy): one parallel kernel
        o = F.scaled_dot_product_attention(
            qs,
            kv[0].transpose(0, 1),
            kv[1].transpose(0, 1),
            attn_mask=self.mask,
            enable_gqa=heads != kvh,
        )
        return o.transpose(1, 2).reshape(-1, heads * d)

    def scatter(self, out: torch.Tensor, attn: torch.Tensor) -> None:
        """Write the real rows of the flattened ``[B * N, q_size]`` output into ``attn``."""
        real = out if self.valid is None else out[self.valid]
        if self.rows is None:
            attn.copy_(real)
        else:
            attn.index_copy_(0, self.rows, real)

    @staticmethod
    def build(
        members: Sequence[int],
        seqs: Sequence[StepSequence],
        lengths: Sequence[int],
        bt: int,
        total: int,
        total_blocks: int,
        cfg: LlamaConfig,
        dtype: torch.dtype,
        dev: torch.device,
        kernel: Any | None = None,
    ) -> _AttentionGroup:
        firsts = list(itertools.accumulate(lengths, initial=0))  # each one's first step row
        longest = max(lengths[m] for m in members)
        nb = -(-max(seqs[m].start + lengths[m] for m in members) // bt)
        if kernel is not None and longest == 1:  # decode, the cache read in place
            queries = [firsts[m] for m in members]
            padded = [list(seqs[m].block_table[:nb]) for m in members]
            in_order = queries == list(range(total))
            return _AttentionGroup(
                queries=None if in_order else torch.tensor(queries, dtype=torch.int64),
                blocks=_EMPTY,
                members=len(members),
                mask=_EMPTY,
                valid=None,
                rows=None if in_order else torch.tensor(queries, dtype=torch.int64),
                kv_heads=cfg.kv_heads,
                kernel=kernel,
                tables=torch.tensor([t + [0] * (nb - len(t)) for t in padded], dtype=torch.int32),
                context=torch.tensor([seqs[m].start + 1 for m in members], dtype=torch.int64),
            )
        keys = nb * bt  # whole blocks: the padding keys are masked
        blocks: list[int] = []
        for m in members:
            table = list(seqs[m].block_table[:nb])
            blocks.extend(table + [0] * (nb - len(table)))  # padding blocks: masked
        # each kv head's (then each value head's) rows of the blocks: one gather for K and V
        heads_first = torch.arange(0, 2 * cfg.kv_heads * total_blocks, total_blocks)
        rows_of = (heads_first[:, None] + torch.tensor(blocks)[None, :]).view(-1)
        valid: list[bool] = []  # empty: every row is real
        if longest == 1:  # decode: one query per member, at its own position
            queries = [firsts[m] for m in members]
            positions = torch.tensor([seqs[m].start for m in members])
            seen = torch.arange(keys)[None, :] <= positions[:, None]
        else:
            queries, query_pos = [], []
            for m in members:
                n, start, first = lengths[m], seqs[m].start, firsts[m]
                # padding queries repeat the last one
                queries.extend(first + min(i, n - 1) for i in range(longest))
                query_pos.append([start + min(i, n - 1) for i in range(longest)])
                valid.extend(i < n for i in range(longest))
            seen = torch.arange(keys)[None, None, :] <= torch.tensor(query_pos)[:, :, None]
        seen = seen.view(len(members), 1, longest, keys)  # [B, 1, N, L]
        # additive (0 / -inf) in the activations' dtype, made once per step: a boolean mask
        # would be converted by every layer's attention call
        mask = torch.zeros(seen.shape, dtype=dtype).masked_fill_(~seen, float("-inf"))
        rows = queries if not valid else [q for q, v in zip(queries, valid, strict=True) if v]
        whole = rows == list(range(total))
        return _AttentionGroup(
            queries=None
            if whole and longest == 1
            else torch.tensor(queries, dtype=torch.int64, device=dev),
            blocks=rows_of.to(dev),
            members=len(members),
            mask=mask.to(dev),
            valid=None if all(valid) else torch.tensor(valid, device=dev),
            rows=None if whole else torch.tensor(rows, dtype=torch.int64, device=dev),
            kv_heads=cfg.kv_heads,
        )
