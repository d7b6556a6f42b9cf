"""The compiled paged decode-attention kernel against the gather + SDPA path it replaces on CPU
(float32): the same outputs on shuffled block tables, ragged context lengths and every GQA
grouping, int32 and int64 tables, and the same logits and greedy tokens from whole model steps;
and the fallback: no compiler (a build that fails) or ``INFERD_LLM_PAGED_ATTENTION=0`` leave the
model on the gather + SDPA path, with one warning naming why.

The kernel is compiled once (cached on disk by torch, ``TORCH_EXTENSIONS_DIR``); on a machine
without a C++ compiler the tests comparing it to SDPA are skipped and the fallback tests run."""

from __future__ import annotations

import logging
import random
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from inferd.backends.llm import paged_attention as paged  # noqa: E402
from inferd.backends.llm.model import (  # noqa: E402
    KVCache,
    LlamaConfig,
    LlamaModel,
    StepSequence,
    _AttentionGroup,
)
from tests.helpers.tiny_llama import write_tiny_llama  # noqa: E402


def _kernel() -> Any:
    module = paged.load()
    if module is None:
        pytest.skip(f"the paged attention kernel is not built here: {paged.load_error()}")
    return module


def _config(heads: int, kv_heads: int, d: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=32,
        hidden_size=heads * d,
        layers=1,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=d,
        intermediate_size=8,
        rms_norm_eps=1e-6,
        rope_theta=1e4,
        tie_word_embeddings=False,
        max_position_embeddings=4096,
        eos_token_ids=(),
        bos_token_id=None,
    )


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 1), (4, 2), (4, 4), (8, 2)])
@pytest.mark.parametrize("table_dtype", [torch.int32, torch.int64])
def test_kernel_equals_gather_and_sdpa(heads: int, kv_heads: int, table_dtype: Any) -> None:
    module = _kernel()
    d, bt, total_blocks = 64, 16, 96
    cfg = _config(heads, kv_heads, d)
    rng = random.Random(heads * 10 + kv_heads)
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    layer_kv = torch.randn(2 * kv_heads, total_blocks, bt, d, generator=gen)
    # ragged contexts: one key, a whole block, a block and one, long ones; blocks shuffled
    contexts = [1, 16, 17, 5, 221, 64, 130, 33]
    free = list(range(total_blocks))
    rng.shuffle(free)
    tables = [[free.pop() for _ in range(-(-n // bt))] for n in contexts]
    seqs = [StepSequence([0], n - 1, t) for n, t in zip(contexts, tables, strict=True)]
    b = len(seqs)
    # the queries as the model has them: a strided view of q and k rotated together
    qk = torch.randn(b, heads + kv_heads, d, generator=gen)
    q = qk[:, :heads]
    cpu = torch.device("cpu")
    want = _AttentionGroup.build(
        range(b), seqs, [1] * b, bt, b, total_blocks, cfg, torch.float32, cpu
    )
    got = _AttentionGroup.build(
        range(b), seqs, [1] * b, bt, b, total_blocks, cfg, torch.float32, cpu, module
    )
    assert want.kernel is None
    assert got.kernel is module
    expected = want.attend(q, layer_kv)
    torch.testing.assert_close(got.attend(q, layer_kv), expected, rtol=1e-5, atol=2e-6)
    # the kernel itself with tables of either index type, padded with garbage past the context
    nb = max(len(t) for t in tables)
    padded = torch.tensor([t + [total_blocks - 1] * (nb - len(t)) for t in tables])
    out = paged.decode_attention(
        module, q, layer_kv, padded.to(table_dtype), torch.tensor(contexts), d**-0.5
    )
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=2e-6)


def test_kernel_refuses_what_it_cannot_read() -> None:
    module = _kernel()
    layer_kv = torch.zeros(4, 8, 16, 64)
    q = torch.zeros(2, 4, 64)
    tables = torch.zeros(2, 2, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="context beyond the block table"):
        paged.decode_attention(module, q, layer_kv, tables, torch.tensor([3, 33]), 0.125)
    past = torch.tensor([[0, 1], [2, 8]], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="block 8 is not in the cache"):
        paged.decode_attention(module, q, layer_kv, past, torch.tensor([3, 17]), 0.125)
    negative = torch.tensor([[-1, 1], [2, 3]])
    with pytest.raises(RuntimeError, match="block -1 is not in the cache"):
        paged.decode_attention(module, q, layer_kv, negative, torch.tensor([3, 17]), 0.125)
    # blocks past a sequence's context are not read, so not checked: padding may be anything
    padded = torch.tensor([[0, 99], [2, 3]])
    paged.decode_attention(module, q, layer_kv, padded, torch.tensor([3, 17]), 0.125)
    with pytest.raises(RuntimeError, match="float32"):
        paged.decode_attention(module, q.double(), layer_kv, tables, torch.tensor([3, 3]), 0.125)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_model_steps_equal_with_and_without_kernel(tmp_path: Path, kv_heads: int) -> None:
    """Decode steps of ragged sequences on shuffled blocks, some with a prompt's chunk among
    them (the decode tokens then not in the step's order): the same logits within float noise
    and the same greedy tokens, step after step, as the gather + SDPA path."""
    _kernel()
    folder = write_tiny_llama(tmp_path / "m", kv_heads=kv_heads)
    fast = LlamaModel.load(folder)
    slow = LlamaModel.load(folder, paged_attention=False)
    assert fast.paged_kernel is not None  # built in this process already: at once
    assert slow.paged_kernel is None
    caches = [KVCache(m.config, 64, 4, torch.float32, m.device) for m in (fast, slow)]
    rng = random.Random(kv_heads)
    free = list(range(64))
    rng.shuffle(free)
    prompts = [[rng.randrange(300) for _ in range(n)] for n in (3, 9, 17, 21)]
    tables = [[free.pop() for _ in range(9)] for _ in prompts]
    for model, cache in zip((fast, slow), caches, strict=True):
        model.step([StepSequence(p, 0, t) for p, t in zip(prompts, tables, strict=True)], cache)
    tokens = [[p[-1]] for p in prompts]
    for k in range(8):
        step = [
            StepSequence(tok[-1:], len(p) + len(tok) - 1, t)
            for p, tok, t in zip(prompts, tokens, tables, strict=True)
        ]
        if k % 3 == 1:  # a prompt's chunk first, as the engine orders a step
            step.insert(0, StepSequence([5, 6, 7], 0, [free.pop()]))
        got, want = (m.step(step, c) for m, c in zip((fast, slow), caches, strict=True))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        got, want = got[-len(prompts) :], want[-len(prompts) :]
        assert got.argmax(-1).tolist() == want.argmax(-1).tolist()
        for row, tok in enumerate(tokens):
            tok.append(int(want[row].argmax()))


@pytest.mark.parametrize(("compiler", "why"), [("missing", "not found"), ("false", "Error")])
def test_no_compiler_falls_back_to_sdpa(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    compiler: str,
    why: str,
) -> None:
    """No compiler (CXX names none) or a build that fails (CXX is ``false``, in a fresh
    extensions folder): one warning naming why, the model on the gather + SDPA path, and its
    steps still right."""
    if compiler == "false" and shutil.which("false") is None:
        pytest.skip("no 'false' command to fail a build with")
    monkeypatch.setattr(paged, "_state", {})
    monkeypatch.setenv(
        "CXX", str(tmp_path / "no-such-compiler") if compiler == "missing" else "false"
    )
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    monkeypatch.delenv(paged.ENV, raising=False)
    folder = write_tiny_llama(tmp_path / "m")
    with caplog.at_level(logging.WARNING, logger=paged.__name__):
        model = LlamaModel.load(folder)
        again = LlamaModel.load(folder)  # once per process: no second build, no second warning
        for m in (model, again):  # built in a thread: the loads did not wait for it
            assert m.wait_for_kernel(120) is None
    assert model.paged_kernel is None
    assert again.paged_kernel is None
    warnings = [r for r in caplog.records if r.name == paged.__name__]
    assert len(warnings) == 1
    assert "not compiled" in warnings[0].getMessage()
    assert paged.load_error()
    assert paged.load_error() in warnings[0].getMessage()
    assert why in str(paged.load_error())
    reference = LlamaModel.load(folder, dtype=torch.float64, paged_attention=False)
    cache = KVCache(model.config, 16, 4, torch.float32, model.device)
    wide = KVCache(model.config, 16, 4, torch.float64, model.device)
    for m, c in ((model, cache), (reference, wide)):
        m.step([StepSequence([4, 8, 15, 16, 23], 0, [3, 9])], c)
    got = model.step([StepSequence([42], 5, [3, 9])], cache)
    want = reference.step([StepSequence([42], 5, [3, 9])], wide)
    torch.testing.assert_close(got.double(), want.double(), rtol=1e-4, atol=1e-4)


def test_environment_turns_the_kernel_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(paged, "_state", {})
    monkeypatch.setenv(paged.ENV, "0")
    with caplog.at_level(logging.WARNING, logger=paged.__name__):
        model = LlamaModel.load(write_tiny_llama(tmp_path / "m"))
        assert model.wait_for_kernel(120) is None
    assert paged.load_error() == f"{paged.ENV} turns it off"
    assert not [r for r in caplog.records if r.name == paged.__name__]


def test_other_dtypes_keep_the_sdpa_path(tmp_path: Path) -> None:
    folder = write_tiny_llama(tmp_path / "m")
    for dtype in (torch.float64, torch.bfloat16):
        assert LlamaModel.load(folder, dtype=dtype).paged_kernel is None


def test_a_model_load_does_not_wait_for_the_kernels_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that has not built the kernel yet: the load returns with the gather + SDPA
    path while a thread builds it (here held until the test lets it go), then the model
    switches to it; steps before and after agree."""
    module = _kernel()
    gate = threading.Event()

    def slow_load() -> object:
        gate.wait(60)
        return module

    folder = write_tiny_llama(tmp_path / "m")  # (before the patch: it warms the kernel)
    monkeypatch.setattr(paged, "_state", {})
    monkeypatch.setattr(paged, "load", slow_load)
    model = LlamaModel.load(folder)
    assert model.paged_kernel is None  # loaded without waiting for the build
    cache = KVCache(model.config, 16, 4, torch.float32, model.device)
    model.step([StepSequence([4, 8, 15, 16, 23], 0, [3, 9])], cache)
    before = model.step([StepSequence([42], 5, [3, 9])], cache)
    gate.set()
    assert model.wait_for_kernel(60) is module
    after = model.step([StepSequence([42], 5, [3, 9])], cache)  # the same position again
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
