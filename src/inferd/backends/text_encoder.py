"""Embedding models: a text encoder on any runtime, with its tokenizer run in the server.

A model whose configuration has a ``tokenizer`` parameter is an *embedding model*. Its public
tensors are fixed (``max_batch_size`` > 0)::

    input  "text"        TYPE_STRING  dims [1]     one text per row (UTF-8)
    input  "tokens"      TYPE_INT64   dims [-1]    optional: token ids used as given (one row
                                                   per request; allow_ragged_batch)
    output "embedding"   TYPE_FP32    dims [D]     pooled (and normalised) embedding
    output "token_count" TYPE_INT32 or TYPE_INT64 dims [1]   tokens of each row

and its parameters say how the encoder file (ONNX, OpenVINO, TorchScript…) is driven:

``tokenizer``  a Hugging Face ``tokenizer.json`` in the model's folder (confined by the
               repository: no absolute path, no ``..``, no symlink out);
``pooling``    ``mean`` (over the attention mask, the default) or ``cls``;
``normalize``  L2-normalise the embedding (default true);
``max_length`` tokens one input may have (default 512); a longer input is refused;
``truncate_dimensions``  the model may be asked for its first ``n`` dimensions (re-normalised);
``encoder_inputs``  the encoder's INT64 [batch, seq] inputs, in ``input_ids,attention_mask,
               token_type_ids`` roles (default all three; name the ones the graph has);
``encoder_output``  the encoder's FP32 [batch, seq, D] output (default ``last_hidden_state``).

The runtime loads the encoder under an *inner* configuration built here (the encoder's own
tensors, without these parameters), so this module is runtime-neutral: it wraps whatever
``LoadedModel`` the runtime produced. ``execute(batch)`` runs on the instance's thread, never on
the event loop: it tokenises the batch, pads it to **its own** longest sequence (not a fixed
length: short texts cost what short texts cost), runs the encoder, pools and normalises. A batch
whose lengths differ widely runs as a few groups of similar length (each padded to its own
longest) instead of one run padded to the longest of all, and no run holds more than 512 tokens
unless it is one row (see :func:`length_groups`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import Backend, LoadContext, LoadedModel, ModelInstance, Result
from inferd.backends.execution import each_request
from inferd.backends.parameters import bool_param, int_param
from inferd.core.datatypes import BY_NAME
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec, TensorSpec
from inferd.errors import (
    ConfigError,
    InferdError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
)

__all__ = [
    "COUNT_OUTPUT",
    "EMBEDDING_OUTPUT",
    "PARAMETER_KEYS",
    "TEXT_INPUT",
    "TOKENS_INPUT",
    "InputTooLongError",
    "TextEncoderSettings",
    "encoder_spec",
    "is_text_encoder",
    "load_text_encoder",
    "text_encoder_settings",
]

TEXT_INPUT = "text"
TOKENS_INPUT = "tokens"
EMBEDDING_OUTPUT = "embedding"
COUNT_OUTPUT = "token_count"

#: the parameters this layer reads; the runtime never sees them
PARAMETER_KEYS = (
    "tokenizer",
    "pooling",
    "normalize",
    "max_length",
    "truncate_dimensions",
    "encoder_inputs",
    "encoder_output",
)
_ROLES = ("input_ids", "attention_mask", "token_type_ids")
_POOLINGS = ("mean", "cls")
DEFAULT_MAX_LENGTH = 512


class InputTooLongError(InvalidArgumentError):
    """An input has more tokens than the model's ``max_length``."""


def is_text_encoder(spec: ModelSpec) -> bool:
    """True for an embedding model (its configuration names a ``tokenizer``)."""
    return "tokenizer" in spec.parameters


@dataclass(frozen=True, slots=True)
class TextEncoderSettings:
    tokenizer: str  # the parameter as written (relative to the model's folder)
    pooling: str
    normalize: bool
    max_length: int
    truncate_dimensions: bool
    encoder_inputs: tuple[str, ...]  # in role order: ids, mask[, type ids]
    encoder_output: str
    dimensions: int  # D, the embedding size
    count_dtype: np.dtype[Any]


def _refuse(spec: ModelSpec, why: str) -> ConfigError:
    return ConfigError(f"embedding model '{spec.name}': {why}")


def _check_tensor(
    spec: ModelSpec, tensor: TensorSpec | None, name: str, kind: str, types: tuple[str, ...]
) -> TensorSpec:
    if tensor is None:
        raise _refuse(spec, f"the configuration must declare the {kind} '{name}'")
    if tensor.datatype.name not in types:
        wanted = " or ".join(BY_NAME[t].config_name for t in types)
        raise _refuse(spec, f"{kind} '{name}' must be {wanted}, not {tensor.datatype.config_name}")
    if tensor.reshape is not None:
        raise _refuse(spec, f"{kind} '{name}' cannot have a reshape")
    return tensor


def text_encoder_settings(spec: ModelSpec) -> TextEncoderSettings:
    """The embedding model's settings, its public tensors checked; ConfigError when wrong."""
    params = spec.parameters
    if spec.max_batch_size <= 0:
        raise _refuse(spec, "max_batch_size must be > 0 (texts are batched by the server)")
    text = _check_tensor(spec, spec.input_by_name.get(TEXT_INPUT), TEXT_INPUT, "input", ("BYTES",))
    if text.dims != (1,):
        raise _refuse(spec, f"input '{TEXT_INPUT}' must have dims [1], not {list(text.dims)}")
    tokens = spec.input_by_name.get(TOKENS_INPUT)
    if tokens is not None:
        _check_tensor(spec, tokens, TOKENS_INPUT, "input", ("INT64",))
        if tokens.dims != (-1,) or not tokens.optional or not text.optional:
            raise _refuse(
                spec,
                f"input '{TOKENS_INPUT}' must have dims [-1], and both '{TEXT_INPUT}' and "
                f"'{TOKENS_INPUT}' must be optional (a request sends one of them)",
            )
    elif text.optional:
        raise _refuse(spec, f"input '{TEXT_INPUT}' is optional but there is no other input")
    extra = [t.name for t in spec.inputs if t.name not in (TEXT_INPUT, TOKENS_INPUT)]
    extra += [t.name for t in spec.outputs if t.name not in (EMBEDDING_OUTPUT, COUNT_OUTPUT)]
    if extra:
        raise _refuse(
            spec,
            f"tensor '{extra[0]}' is not one of an embedding model's: inputs '{TEXT_INPUT}', "
            f"'{TOKENS_INPUT}'; outputs '{EMBEDDING_OUTPUT}', '{COUNT_OUTPUT}'",
        )
    embedding = _check_tensor(
        spec, spec.output_by_name.get(EMBEDDING_OUTPUT), EMBEDDING_OUTPUT, "output", ("FP32",)
    )
    if len(embedding.dims) != 1 or embedding.dims[0] <= 0:
        raise _refuse(
            spec, f"output '{EMBEDDING_OUTPUT}' must have dims [D] with D > 0, the embedding size"
        )
    count = _check_tensor(
        spec, spec.output_by_name.get(COUNT_OUTPUT), COUNT_OUTPUT, "output", ("INT32", "INT64")
    )
    if count.dims != (1,):
        raise _refuse(spec, f"output '{COUNT_OUTPUT}' must have dims [1]")
    pooling = params.get("pooling", "mean").strip().lower()
    if pooling not in _POOLINGS:
        raise ConfigError(f"parameter 'pooling' must be mean or cls, got '{params['pooling']}'")
    names = tuple(
        n.strip() for n in params.get("encoder_inputs", ",".join(_ROLES)).split(",") if n.strip()
    )
    if not 2 <= len(names) <= 3 or len(set(names)) != len(names):
        raise ConfigError(
            "parameter 'encoder_inputs' must name 2 or 3 distinct encoder inputs (the token "
            f"ids, the attention mask and optionally the token type ids), got "
            f"'{params.get('encoder_inputs')}'"
        )
    output = params.get("encoder_output", "last_hidden_state").strip()
    if not output:
        raise ConfigError("parameter 'encoder_output' must name the encoder's output")
    if not params["tokenizer"].strip():
        raise ConfigError("parameter 'tokenizer' must name a tokenizer.json in the model folder")
    return TextEncoderSettings(
        tokenizer=params["tokenizer"].strip(),
        pooling=pooling,
        normalize=bool(bool_param(params, "normalize", True)),
        max_length=int(int_param(params, "max_length", DEFAULT_MAX_LENGTH, minimum=1) or 1),
        truncate_dimensions=bool(bool_param(params, "truncate_dimensions", False)),
        encoder_inputs=names,
        encoder_output=output,
        dimensions=embedding.dims[0],
        count_dtype=count.datatype.dtype,
    )


def encoder_spec(spec: ModelSpec, settings: TextEncoderSettings) -> ModelSpec:
    """The configuration the runtime loads the encoder under: its own tensors, none of the
    embedding parameters, no warm-up (the public model warms up through this layer)."""
    int64 = BY_NAME["INT64"]
    return dataclasses.replace(
        spec,
        inputs=tuple(TensorSpec(name, int64, (-1,)) for name in settings.encoder_inputs),
        outputs=(TensorSpec(settings.encoder_output, BY_NAME["FP32"], (-1, settings.dimensions)),),
        parameters={k: v for k, v in spec.parameters.items() if k not in PARAMETER_KEYS},
        warmups=(),
    )


def _load_tokenizer(path: Path, name: str) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise UnavailableError(
            f"embedding model '{name}' needs Hugging Face's tokenizers ({exc}); to use it run: "
            "pip install 'inferd[embeddings]'"
        ) from exc
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ConfigError(f"embedding model '{name}': cannot read tokenizer {path}: {exc}") from exc
    tokenizer.no_truncation()  # max_length is enforced here, by refusing, never by cutting
    tokenizer.no_padding()  # each batch is padded here, to its own longest input
    return tokenizer


def load_text_encoder(backend: Backend, ctx: LoadContext, tokenizer_path: Path) -> LoadedModel:
    """Load the encoder with ``backend`` under its inner configuration and wrap it.

    ``tokenizer_path`` is the ``tokenizer`` parameter already resolved and confined to the
    model's folder by the repository."""
    settings = text_encoder_settings(ctx.spec)
    tokenizer = _load_tokenizer(tokenizer_path, ctx.spec.name)
    inner = backend.load(dataclasses.replace(ctx, spec=encoder_spec(ctx.spec, settings)))
    return TextEncoderModel(ctx.spec, settings, tokenizer, inner)


class TextEncoderModel:
    def __init__(
        self, spec: ModelSpec, settings: TextEncoderSettings, tokenizer: Any, inner: LoadedModel
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.tokenizer = tokenizer
        self.inner = inner

    def create_instance(self, group: InstanceGroupSpec, index: int) -> TextEncoderInstance:
        return TextEncoderInstance(self, self.inner.create_instance(group, index))

    def close(self) -> None:
        self.inner.close()


def _texts(array: np.ndarray[Any, Any]) -> list[str]:
    texts = []
    for item in array.reshape(-1):
        raw = item if isinstance(item, bytes) else str(item).encode()
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(
                f"input '{TEXT_INPUT}' must be UTF-8 text: {exc.reason} at byte {exc.start}"
            ) from exc
    return texts


#: a batch is split into runs of similar lengths when padding every row to the batch's longest
#: would add more than this share of padding tokens (the encoder's cost grows with rows x
#: longest, so padding is work thrown away) ...
PADDING_SLACK = 0.2
#: ... and each run keeps at least this many rows (a run has a fixed cost of its own)
MIN_GROUP_ROWS = 4
#: a run holds at most this many tokens, padding included, unless it is a single row: past it
#: a CPU encoder's activations outgrow the caches and each token costs more (on MiniLM, a run
#: of 16 rows of 200 tokens took longer than 8 runs of 2 rows)
MAX_GROUP_TOKENS = 512


def length_groups(lengths: Sequence[int], max_tokens: int | None = None) -> list[list[int]]:
    """Row indices grouped for the encoder: sorted by length, a new group starts where the
    current one, padded to its longest row, would hold more than ``PADDING_SLACK`` padding
    (and has ``MIN_GROUP_ROWS`` rows already) or more than ``max_tokens`` tokens
    (``MAX_GROUP_TOKENS`` by default). One group, as it came, when neither happens."""
    limit = MAX_GROUP_TOKENS if max_tokens is None else max_tokens
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for index in order:
        length = lengths[index]
        padded = (len(current) + 1) * length  # sorted: this row is the group's longest
        wasteful = padded > (1 + PADDING_SLACK) * (tokens + length)
        if current and (padded > limit or (len(current) >= MIN_GROUP_ROWS and wasteful)):
            groups.append(current)
            current, tokens = [], 0
        current.append(index)
        tokens += length
    groups.append(current)
    if len(groups) == 1:
        return [list(range(len(lengths)))]  # the batch as it came
    return groups


class TextEncoderInstance:
    """Tokenise, pad each group of similar lengths to its longest, encode, pool, normalise
    (instance thread)."""

    def __init__(self, model: TextEncoderModel, inner: ModelInstance) -> None:
        self._model = model
        self._inner = inner
        self._vocab = int(model.tokenizer.get_vocab_size(with_added_tokens=True))

    def _rows(self, request: InferRequest) -> list[list[int]]:
        """The token ids of each row of one request."""
        settings = self._model.settings
        if TOKENS_INPUT in request.inputs:
            if TEXT_INPUT in request.inputs:
                raise InvalidArgumentError(
                    f"send either input '{TEXT_INPUT}' or input '{TOKENS_INPUT}', not both"
                )
            tokens = np.asarray(request.inputs[TOKENS_INPUT])
            if tokens.ndim != 2 or tokens.shape[1] == 0:
                raise InvalidArgumentError(f"input '{TOKENS_INPUT}' must hold at least one token")
            if tokens.min() < 0 or tokens.max() >= self._vocab:
                raise InvalidArgumentError(
                    f"input '{TOKENS_INPUT}' holds a token id outside the vocabulary "
                    f"[0, {self._vocab})"
                )
            rows = [list(map(int, row)) for row in tokens]
        elif TEXT_INPUT in request.inputs:
            encodings = self._model.tokenizer.encode_batch(_texts(request.inputs[TEXT_INPUT]))
            rows = [list(e.ids) for e in encodings]
        else:
            raise InvalidArgumentError(f"expected input '{TEXT_INPUT}' or '{TOKENS_INPUT}'")
        for index, row in enumerate(rows):
            if len(row) > settings.max_length:
                where = "the input" if len(rows) == 1 else f"row {index}"
                raise InputTooLongError(
                    f"{where} has {len(row)} tokens, more than this model's max_length of "
                    f"{settings.max_length}"
                )
        return rows

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        results: list[Result | None] = [None] * len(requests)
        batch: list[tuple[int, list[list[int]]]] = []
        for i, request in enumerate(requests):
            try:
                batch.append((i, self._rows(request)))
            except InferdError as exc:
                results[i] = exc
        if batch:
            rows = [row for _, request_rows in batch for row in request_rows]
            try:
                embeddings = self._encode(rows, requests[batch[0][0]].id)
            except InferdError as exc:
                for (i, _), error in zip(batch, each_request(exc, len(batch)), strict=True):
                    results[i] = error
            else:
                start = 0
                count_dtype = self._model.settings.count_dtype
                for i, request_rows in batch:
                    end = start + len(request_rows)
                    counts = np.array([[len(r)] for r in request_rows], dtype=count_dtype)
                    results[i] = {EMBEDDING_OUTPUT: embeddings[start:end], COUNT_OUTPUT: counts}
                    start = end
        return [r for r in results if r is not None]

    def _encode(self, rows: list[list[int]], request_id: str) -> np.ndarray[Any, Any]:
        """The pooled embeddings of ``rows``, in order: one encoder run per group of
        similar lengths (:func:`length_groups`), each padded to its own longest row."""
        groups = length_groups([len(r) for r in rows])
        if len(groups) == 1:
            return self._encode_padded(rows, request_id)
        out = np.empty((len(rows), self._model.settings.dimensions), dtype=np.float32)
        for group in groups:
            out[group] = self._encode_padded([rows[j] for j in group], request_id)
        return out

    def _encode_padded(self, rows: list[list[int]], request_id: str) -> np.ndarray[Any, Any]:
        settings = self._model.settings
        longest = max(len(r) for r in rows)
        ids = np.zeros((len(rows), longest), dtype=np.int64)
        mask = np.zeros((len(rows), longest), dtype=np.int64)
        for j, row in enumerate(rows):
            ids[j, : len(row)] = row
            mask[j, : len(row)] = 1
        feeds = dict(zip(settings.encoder_inputs, (ids, mask, np.zeros_like(ids)), strict=False))
        inner_request = InferRequest(model_name=self._model.spec.name, inputs=feeds, id=request_id)
        (result,) = self._inner.execute([inner_request])
        if isinstance(result, InferdError):
            raise result
        hidden = np.asarray(result[settings.encoder_output], dtype=np.float32)
        if hidden.ndim != 3 or hidden.shape[:2] != ids.shape:
            raise InternalError(
                f"the encoder's output '{settings.encoder_output}' has shape "
                f"{list(hidden.shape)}, expected [{len(rows)}, {longest}, D]"
            )
        if settings.pooling == "cls":
            pooled = hidden[:, 0, :]
        else:
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        if settings.normalize:
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.maximum(norms, 1e-12)
        return np.ascontiguousarray(pooled, dtype=np.float32)

    def close(self) -> None:
        self._inner.close()
