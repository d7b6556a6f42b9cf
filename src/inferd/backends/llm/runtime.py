"""The ``llm`` backend: causal language models served with continuous batching.

A model folder's version directory holds a Hugging Face Llama (``config.json``,
``model.safetensors`` or a sharded ``model.safetensors.index.json``, ``tokenizer.json``,
optionally ``generation_config.json``); every file read must lie inside it once symlinks are
resolved. The model takes Triton's vLLM backend's tensors (auto-completed when
``config.pbtxt`` omits them) and is decoupled:

=========================  ==================  =================================================
``text_input``             BYTES ``[1]``       the prompt
``stream``                 BOOL ``[1]``, opt.  true: one response per text delta, then final
``sampling_parameters``    BYTES ``[1]``, opt. vLLM's sampling parameters as a JSON object
``exclude_input_in_output`` BOOL ``[1]``, opt. true: the whole answer leaves the prompt out
``return_logprobs``        BOOL ``[1]``, opt.  true: answer ``logprobs`` too
``return_num_input_tokens`` BOOL ``[1]``, opt. true: answer ``num_input_tokens`` too
``return_num_output_tokens`` BOOL ``[1]``, opt. true: answer ``num_output_tokens`` too
``text_output``            BYTES ``[-1]``      the text (a delta when streaming)
``logprobs``               BYTES ``[-1]``, opt. the tokens of the response, as vLLM's backend
                                               writes them: a JSON array, one
                                               ``{"<id>": {"logprob", "rank", "decoded_token"}}``
                                               per token (``rank`` is null: not computed)
``num_input_tokens``       UINT32 ``[1]``, opt. the prompt's tokens, in every response
``num_output_tokens``      UINT32 ``[-1]``, opt. the tokens generated since the previous
                                               response (a last response carries the ones that
                                               add no text, e.g. an EOS)
=========================  ==================  =================================================

``sampling_parameters`` may set ``logprobs`` (0 or true: the chosen token only) when the model
declares the ``logprobs`` output; a model without it refuses ``logprobs`` and
``return_logprobs``.

One :class:`~inferd.backends.llm.engine.GenerationEngine` (its own thread, the model and the
KV cache) serves every instance of a loaded model: ``execute`` only checks each request, hands
it to the engine and returns, as decoupled models do (the sink is adopted: the responses go on
after the batch is over). Configuration parameters: see :data:`PARAMETERS` and docs/llm.md.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from inferd.backends.base import LoadContext, Result
from inferd.backends.llm.delivery import StreamSender
from inferd.backends.parameters import bool_param, check_keys, int_param
from inferd.backends.threads import default_intra_op_threads
from inferd.core.inference import InferRequest
from inferd.core.llm_stats import LlmStatistics, ModelLlmStatistics
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.core.streaming import StreamedResponse
from inferd.errors import ConfigError, InferdError, InvalidArgumentError

__all__ = ["PARAMETERS", "LlmBackend", "LlmSettings", "parse_llm_settings"]

TEXT_INPUT = "text_input"
STREAM = "stream"
SAMPLING_PARAMETERS = "sampling_parameters"
EXCLUDE_INPUT = "exclude_input_in_output"
TEXT_OUTPUT = "text_output"
RETURN_LOGPROBS = "return_logprobs"
LOGPROBS = "logprobs"
RETURN_INPUT_COUNT = "return_num_input_tokens"
INPUT_COUNT = "num_input_tokens"
RETURN_OUTPUT_COUNT = "return_num_output_tokens"
OUTPUT_COUNT = "num_output_tokens"
# the optional (request flag, output) pairs of Triton's vLLM backend that this runtime answers
_EXTRAS = (
    (RETURN_LOGPROBS, LOGPROBS),
    (RETURN_INPUT_COUNT, INPUT_COUNT),
    (RETURN_OUTPUT_COUNT, OUTPUT_COUNT),
)

#: parameter -> what it sets (the accepted keys; any other is refused)
PARAMETERS = {
    "max_model_len": "tokens one sequence may reach, prompt and output (default: the model's "
    "max_position_embeddings)",
    "max_running": "sequences decoded together in one batch (default 16)",
    "max_step_tokens": "tokens one forward pass computes, prefill chunks and decodes (default "
    "max(256, max_running))",
    "kv_cache_bytes": "the KV cache's size in bytes (default: room for max_running sequences of "
    "max_model_len tokens, at most 1 GiB)",
    "kv_cache_blocks": "the KV cache's size in blocks (instead of kv_cache_bytes)",
    "block_tokens": "tokens per KV cache block (default 16)",
    "max_waiting": "requests that may wait for a place in the running batch; more are refused "
    "as overloaded (default 1024)",
    "dtype": "float32 (default), bfloat16, float16 or float64",
    "device": "cpu, cuda or cuda:N (default: cuda:N for a KIND_GPU instance group, its first "
    "GPU, else cpu)",
    "threads": "intra-op threads of the generation thread (default: the cores shared among "
    "the model's instances)",
    "enable_prefix_caching": "true (default) or false: keep full KV blocks for reuse by "
    "prompts with the same head",
}
_DTYPES = ("float32", "bfloat16", "float16", "float64")
_DEFAULT_CACHE_CAP = 1 << 30


@dataclass(frozen=True, slots=True)
class LlmSettings:
    max_model_len: int | None  # None: the model's max_position_embeddings
    max_running: int
    max_step_tokens: int
    kv_cache_bytes: int | None
    kv_cache_blocks: int | None
    block_tokens: int
    max_waiting: int
    dtype: str
    device: str
    threads: int
    enable_prefix_caching: bool = True


def _group_device(spec: ModelSpec) -> str:
    """``cuda:N`` (the first GPU listed, else ``cuda``) for a ``KIND_GPU`` instance group;
    ``cpu`` otherwise."""
    for group in spec.instance_groups:
        if group.kind == "KIND_GPU":
            return f"cuda:{group.gpus[0]}" if group.gpus else "cuda"
    return "cpu"


def parse_llm_settings(spec: ModelSpec) -> LlmSettings:
    """The backend's parameters of ``spec``; ConfigError naming a wrong or unknown one."""
    params = dict(spec.parameters)
    check_keys(params, tuple(PARAMETERS), "llm")

    def number(key: str, default: int | None, minimum: int = 1) -> int | None:
        return int_param(params, key, default, minimum=minimum)

    max_running = number("max_running", 16)
    assert max_running is not None
    if "kv_cache_bytes" in params and "kv_cache_blocks" in params:
        raise ConfigError("give parameter 'kv_cache_bytes' or 'kv_cache_blocks', not both")
    dtype = params.get("dtype", "float32").strip().lower()
    if dtype not in _DTYPES:
        raise ConfigError(f"parameter 'dtype' must be one of {', '.join(_DTYPES)}, got '{dtype}'")
    device = params.get("device", _group_device(spec)).strip().lower()
    if not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        raise ConfigError(f"parameter 'device' must be cpu, cuda or cuda:N, got '{device}'")
    threads = number("threads", default_intra_op_threads(spec), minimum=0)
    step = number("max_step_tokens", max(256, max_running))
    block = number("block_tokens", 16)
    waiting = number("max_waiting", 1024)
    assert waiting is not None
    assert step is not None
    assert block is not None
    assert threads is not None
    return LlmSettings(
        max_model_len=number("max_model_len", None, minimum=2),
        max_running=max_running,
        max_step_tokens=step,
        kv_cache_bytes=number("kv_cache_bytes", None),
        kv_cache_blocks=number("kv_cache_blocks", None),
        block_tokens=block,
        max_waiting=waiting,
        dtype=dtype,
        device=device,
        threads=threads,
        enable_prefix_caching=bool(bool_param(params, "enable_prefix_caching", True)),
    )


def _inside(path: Path, folder: Path, what: str) -> Path:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError as exc:
        raise ConfigError(
            f"{what} {path.name} resolves outside the model folder {folder} (a symbolic link "
            "out of it is refused; copy the file in)"
        ) from exc
    return path


def _eos_ids(folder: Path, config_eos: Sequence[int]) -> frozenset[int]:
    ids = set(config_eos)
    path = folder / "generation_config.json"
    if path.is_file():
        _inside(path, folder, "generation config")
        try:
            value = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
        except (OSError, ValueError, AttributeError) as exc:
            raise ConfigError(f"generation_config.json in {folder} cannot be read: {exc}") from exc
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def _one(request: InferRequest, name: str) -> Any | None:
    array = request.inputs.get(name)
    if array is None:
        return None
    if array.size != 1:
        raise InvalidArgumentError(
            f"input '{name}' must hold one element, got {array.size} (shape {list(array.shape)})"
        )
    return array.reshape(-1)[0]


def _flag(request: InferRequest, name: str) -> bool:
    value = _one(request, name)
    if value is None:
        return False
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"input '{name}' must be BOOL")
    return bool(value)


def _text(value: Any, name: str) -> str:
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(f"input '{name}' is not valid UTF-8") from exc
    if isinstance(value, str):
        return value
    raise InvalidArgumentError(f"input '{name}' must be BYTES (text)")


def _timeout_s(request: InferRequest) -> float | None:
    value = request.parameters.get("timeout", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"request parameter 'timeout' must be microseconds >= 0, got {value!r}"
        )
    return value / 1e6 if value else None


class _Extras:
    """One request's optional outputs (engine thread in, sender threads out)."""

    def __init__(self, log: _TokenLog | None, prompt_tokens: int | None, count: bool) -> None:
        self.log = log
        self._prompt_tokens = prompt_tokens
        self._count = count
        self._lock = threading.Lock()
        self._generated = 0  # tokens generated and not reported yet

    def on_token(self, token: int) -> None:
        with self._lock:
            self._generated += 1

    def pending(self) -> bool:
        with self._lock:
            return self._count and self._generated > 0

    def output(self, text: str) -> dict[str, np.ndarray[Any, Any]]:
        outputs = {TEXT_OUTPUT: np.array([text.encode("utf-8")], dtype=object)}
        if self.log is not None:
            outputs[LOGPROBS] = np.array([self.log.take()], dtype=object)
        if self._prompt_tokens is not None:
            outputs[INPUT_COUNT] = np.array([self._prompt_tokens], dtype=np.uint32)
        if self._count:
            with self._lock:
                generated, self._generated = self._generated, 0
            outputs[OUTPUT_COUNT] = np.array([generated], dtype=np.uint32)
        return outputs


class _TokenLog:
    """The generated tokens and log-probabilities not sent yet (engine thread in, sender out).

    Each token's ``decoded_token`` is the text it adds (decoded incrementally, as the text
    output is: a token that ends inside a character adds nothing, the next one the character),
    so the tokens' texts join into the text output."""

    _WINDOW = 6  # tokens decoded before the new one, so that it decodes in context

    def __init__(self, tokenizer: Any, skip_special: bool) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._lock = threading.Lock()
        self._pending: list[tuple[int, float]] = []
        self._ids: list[int] = []
        self._read = 0  # tokens whose text has been given out

    def add(self, token: int, logprob: float) -> None:
        with self._lock:
            self._pending.append((token, logprob))

    def _piece(self, token: int) -> str:
        self._ids.append(token)
        start = max(0, self._read - self._WINDOW)
        decode = self._tokenizer.decode
        before: str = decode(self._ids[start : self._read], skip_special_tokens=self._skip_special)
        after: str = decode(self._ids[start:], skip_special_tokens=self._skip_special)
        if after.endswith("\ufffd"):  # ends inside a character: its text comes later
            return ""
        self._read = len(self._ids)
        return after[len(before) :]

    def take(self) -> bytes:
        """vLLM's backend's JSON for the tokens since the last take."""
        with self._lock:
            pending, self._pending = self._pending, []
            entries = [
                {
                    str(token): {
                        "logprob": logprob,
                        "rank": None,
                        "decoded_token": self._piece(token),
                    }
                }
                for token, logprob in pending
            ]
        return orjson.dumps(entries)


class LlmLoadedModel:
    """A loaded language model: its engine, shared by every instance."""

    def __init__(
        self,
        spec: ModelSpec,
        engine: Any,
        tokenizer: Any,
        version: int = 0,
        on_close: Callable[[LlmLoadedModel], None] | None = None,
    ) -> None:
        self.spec = spec
        self.version = version
        self.engine = engine
        self._tokenizer = tokenizer
        self._on_close = on_close
        self._closed = False
        self.sender = StreamSender(engine.cfg.max_running + 4, spec.name)

    def create_instance(self, group: InstanceGroupSpec, index: int) -> LlmInstance:
        return LlmInstance(self)

    def statistics(self) -> LlmStatistics:
        stats: LlmStatistics = self.engine.statistics()
        return stats

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._on_close is not None:
                self._on_close(self)
            self.engine.close()
            self.sender.close()

    def execute_one(self, request: InferRequest) -> Result:
        from inferd.backends.llm.engine import Generation
        from inferd.backends.llm.params import parse_sampling_parameters

        raw = _one(request, TEXT_INPUT)
        if raw is None:
            raise InvalidArgumentError(f"input '{TEXT_INPUT}' is required")
        prompt = _text(raw, TEXT_INPUT)
        stream = _flag(request, STREAM)
        exclude = _flag(request, EXCLUDE_INPUT)
        sampling = _one(request, SAMPLING_PARAMETERS)
        if sampling is not None and not isinstance(sampling, (bytes, str, np.bytes_)):
            raise InvalidArgumentError(f"input '{SAMPLING_PARAMETERS}' must be BYTES (JSON)")
        timeout = _timeout_s(request)
        gives_logprobs = LOGPROBS in self.spec.output_by_name
        wanted = {flag: _flag(request, flag) for flag, _ in _EXTRAS}
        for flag, output in _EXTRAS:
            if wanted[flag] and output not in self.spec.output_by_name:
                raise InvalidArgumentError(
                    f"input '{flag}' needs the output '{output}', which the model's "
                    "configuration does not declare"
                )
        ids = self._tokenizer.encode(prompt).ids if prompt else []
        limit = self.engine.cfg.max_model_len
        if len(ids) >= limit:
            raise InvalidArgumentError(
                f"the prompt is {len(ids)} tokens; the model's max_model_len is {limit}, so it "
                "leaves no room for any output"
            )
        params = parse_sampling_parameters(
            bytes(sampling) if isinstance(sampling, np.bytes_) else sampling,
            max_tokens_limit=limit - len(ids),
            returns_logprobs=gives_logprobs,
        )
        extras = _Extras(
            _TokenLog(self._tokenizer, params.skip_special_tokens)
            if wanted[RETURN_LOGPROBS]
            else None,
            len(ids) if wanted[RETURN_INPUT_COUNT] else None,
            wanted[RETURN_OUTPUT_COUNT],
        )
        sink = request.sink
        done = threading.Event()
        answer: list[Result] = []

        def to_sink(text: str | None, error: InferdError | None, final: bool) -> None:
            assert sink is not None
            outputs = None
            if text is not None or (final and error is None and extras.pending()):
                outputs = extras.output(text or "")
            sink.send(StreamedResponse(outputs, error, final))

        def respond(text: str | None, error: InferdError | None, final: bool) -> None:
            if error is not None:
                answer.append(error)
            elif text is not None:
                answer.append(extras.output(text))
            if final:
                done.set()

        if sink is not None:
            # a streamed answer goes through the sender threads (a send may wait for the
            # client); a whole one is a single final response, which never waits
            respond = self.sender.outbox(to_sink).post if stream else to_sink

        gen = Generation(
            ids,
            params,
            respond,
            stream=stream and sink is not None,
            prefix="" if exclude else prompt,
            deadline=None if timeout is None else time.monotonic() + timeout,
            on_token=extras.on_token,
            on_logprob=extras.log.add if extras.log is not None else None,
        )
        handle = self.engine.submit(gen)  # raises for a request that can never fit
        if sink is None:  # no stream to answer through: wait for the whole answer
            done.wait()
            return answer[-1] if answer else {}
        sink.adopt()
        sink.watch(handle.cancel)
        return {}


class LlmInstance:
    """Hands requests to the model's engine; responses go through each request's sink."""

    def __init__(self, model: LlmLoadedModel) -> None:
        self._model = model

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        results: list[Result] = []
        for request in requests:
            try:
                results.append(self._model.execute_one(request))
            except InferdError as exc:
                results.append(exc)
        return results

    def close(self) -> None:
        pass


def _auto_io(config: Any) -> None:
    """Triton's vLLM backend's tensors, decoupled, when the configuration omits them."""
    from tritonclient.grpc import model_config_pb2 as mc

    if not config.input:
        for name, dtype, optional in (
            (TEXT_INPUT, "TYPE_STRING", False),
            (STREAM, "TYPE_BOOL", True),
            (SAMPLING_PARAMETERS, "TYPE_STRING", True),
            (EXCLUDE_INPUT, "TYPE_BOOL", True),
            (RETURN_LOGPROBS, "TYPE_BOOL", True),
            (RETURN_INPUT_COUNT, "TYPE_BOOL", True),
            (RETURN_OUTPUT_COUNT, "TYPE_BOOL", True),
        ):
            tensor = config.input.add()
            tensor.name = name
            tensor.data_type = mc.DataType.Value(dtype)
            tensor.dims.append(1)
            tensor.optional = optional
    if not config.output:
        for name, dtype, dims in (
            (TEXT_OUTPUT, "TYPE_STRING", -1),
            (LOGPROBS, "TYPE_STRING", -1),
            (INPUT_COUNT, "TYPE_UINT32", 1),
            (OUTPUT_COUNT, "TYPE_UINT32", -1),
        ):
            tensor = config.output.add()
            tensor.name = name
            tensor.data_type = mc.DataType.Value(dtype)
            tensor.dims.append(dims)
    if not config.HasField("model_transaction_policy"):
        config.model_transaction_policy.decoupled = True


class LlmBackend:
    """``backend: "llm"``: Llama-architecture language models (see the module docstring).

    It keeps the models it loaded until they close, for :meth:`statistics`."""

    name = "llm"
    platforms: tuple[str, ...] = ()
    default_model_filename = "model.safetensors"

    def __init__(self) -> None:
        # the runtime's libraries, imported now so that a missing one is reported (with the
        # extra that installs it) when a model first names this backend
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
        import torch  # noqa: F401

        self._lock = threading.Lock()
        self._live: list[LlmLoadedModel] = []

    def statistics(self) -> list[ModelLlmStatistics]:
        """A snapshot of every loaded language model, by name and version."""
        with self._lock:
            live = list(self._live)
        return [ModelLlmStatistics(m.spec.name, m.version, m.statistics()) for m in live]

    def _forget(self, model: LlmLoadedModel) -> None:
        with self._lock:
            if model in self._live:
                self._live.remove(model)

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        if config.max_batch_size != 0:
            raise ConfigError("the llm backend batches sequences itself: max_batch_size must be 0")
        _auto_io(config)

    def load(self, ctx: LoadContext) -> LlmLoadedModel:
        import tokenizers
        import torch

        from inferd.backends.llm.blocks import blocks_for
        from inferd.backends.llm.engine import GenerationEngine
        from inferd.backends.llm.model import KVCache, LlamaModel
        from inferd.backends.llm.policy import PolicyConfig

        spec = ctx.spec
        if not spec.decoupled:
            raise ConfigError(
                f"model '{spec.name}': the llm backend answers with a stream of responses; set "
                "model_transaction_policy { decoupled: true }"
            )
        if spec.max_batch_size != 0:
            raise ConfigError(
                f"model '{spec.name}': the llm backend batches sequences itself: "
                "max_batch_size must be 0"
            )
        settings = parse_llm_settings(spec)
        if settings.device != "cpu" and not torch.cuda.is_available():
            raise ConfigError(
                f"model '{spec.name}': parameter 'device' is '{settings.device}' but no CUDA "
                "device is available"
            )
        folder = ctx.version_dir
        _inside(folder, ctx.model_dir, "version folder")
        tokenizer_path = _inside(folder / "tokenizer.json", folder, "tokenizer")
        if not tokenizer_path.is_file():
            raise ConfigError(f"model '{spec.name}': {folder} has no tokenizer.json")
        _inside(folder / "config.json", folder, "model configuration")
        dtype = getattr(torch, settings.dtype)
        model = LlamaModel.load(folder, dtype=dtype, device=settings.device)
        tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        max_len = settings.max_model_len or model.config.max_position_embeddings
        if max_len > model.config.max_position_embeddings:
            raise ConfigError(
                f"model '{spec.name}': max_model_len {max_len} is beyond the model's "
                f"max_position_embeddings ({model.config.max_position_embeddings})"
            )
        block_bytes = KVCache.block_bytes(model.config, settings.block_tokens, dtype)
        if settings.kv_cache_blocks is not None:
            blocks = settings.kv_cache_blocks
        elif settings.kv_cache_bytes is not None:
            blocks = settings.kv_cache_bytes // block_bytes
            if blocks < 1:
                raise ConfigError(
                    f"model '{spec.name}': kv_cache_bytes {settings.kv_cache_bytes} holds no "
                    f"block ({block_bytes} bytes each: {settings.block_tokens} tokens)"
                )
        else:
            want = settings.max_running * blocks_for(max_len, settings.block_tokens)
            blocks = max(1, min(want, _DEFAULT_CACHE_CAP // block_bytes))
        cfg = PolicyConfig(
            max_running=settings.max_running,
            max_step_tokens=settings.max_step_tokens,
            block_tokens=settings.block_tokens,
            total_blocks=blocks,
            max_model_len=max_len,
        )
        eos = _eos_ids(folder, model.config.eos_token_ids)
        engine = GenerationEngine(
            model,
            tokenizer,
            cfg,
            eos_ids=eos,
            threads=settings.threads,
            max_waiting=settings.max_waiting,
            name=spec.name,
            prefix_caching=settings.enable_prefix_caching,
        )
        engine.start()
        loaded = LlmLoadedModel(spec, engine, tokenizer, ctx.version, self._forget)
        with self._lock:
            self._live.append(loaded)
        return loaded
