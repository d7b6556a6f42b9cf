"""OpenVINO compile options read from a model config's ``parameters`` (Triton's names)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from inferd.backends.parameters import bool_param, int_param
from inferd.backends.threads import default_intra_op_threads
from inferd.core.model_spec import ModelSpec
from inferd.errors import ConfigError

log = logging.getLogger("inferd.backends.openvino")

_HINTS = ("LATENCY", "THROUGHPUT")

# Names older Triton OpenVINO backends read, and what replaced them.
_RENAMED = {
    "CPU_THREADS_NUM": "INFERENCE_NUM_THREADS",
    "CPU_THROUGHPUT_STREAMS": "NUM_STREAMS",
    "ENFORCE_BF16": "HINT_BF16",
    "SKIP_DYNAMIC_BATCHSIZE": "SKIP_OV_DYNAMIC_BATCHSIZE",
}
_REFUSED = {
    "CPU_EXTENSION_PATH": "loading custom-layer shared libraries from a model configuration is "
    "not supported",
    "CPU_BIND_THREAD": "thread pinning is left to OpenVINO's defaults",
    "COMPILATION_NUM_THREADS": "the OpenVINO CPU plugin does not accept it at compile time",
}
_KNOWN = (
    "INFERENCE_NUM_THREADS",
    "NUM_STREAMS",
    "PERFORMANCE_HINT",
    "HINT_BF16",
    "CACHE_DIR",
    "SKIP_OV_DYNAMIC_BATCHSIZE",
    "ENABLE_BATCH_PADDING",
    "RESHAPE_IO_LAYERS",
)


@dataclass(frozen=True, slots=True)
class CompileSettings:
    """What the config ``parameters`` ask of OpenVINO, parsed and checked once at load."""

    properties: tuple[tuple[str, str], ...]  # passed to ``compile_model``
    static_batch: bool = False  # SKIP_OV_DYNAMIC_BATCHSIZE: batch dim fixed at max_batch_size
    pad_batch: bool = False  # ENABLE_BATCH_PADDING: pad smaller batches up to the fixed size
    reshape_io: bool = False  # RESHAPE_IO_LAYERS: inputs take the config's dims

    def compile_config(self) -> dict[str, str]:
        return dict(self.properties)


def _yes_no(params: dict[str, str], key: str) -> bool:
    return bool(bool_param(params, key, False, expected="YES or NO"))


def _count(params: dict[str, str], key: str, *, minimum: int) -> int | None:
    return int_param(params, key, minimum=minimum)


def parse_settings(spec: ModelSpec, cores: int | None = None) -> CompileSettings:
    """Read the compile settings; raise :class:`ConfigError` for anything not honoured.

    Without ``PERFORMANCE_HINT`` an instance gets one stream (it owns a single infer request)
    and its share of the cores; with a hint, OpenVINO picks both unless they are set explicitly.
    """
    params = spec.parameters
    for key in params:
        if key in _RENAMED:
            raise ConfigError(
                f"parameter '{key}' is the old name of '{_RENAMED[key]}'; use '{_RENAMED[key]}'"
            )
        if key in _REFUSED:
            raise ConfigError(f"parameter '{key}' is not supported: {_REFUSED[key]}")
        if key not in _KNOWN:
            raise ConfigError(f"unknown OpenVINO parameter '{key}'; supported: {', '.join(_KNOWN)}")
    props: dict[str, str] = {}
    hint = params.get("PERFORMANCE_HINT")
    if hint is not None:
        if hint.strip().upper() not in _HINTS:
            raise ConfigError(
                f"parameter 'PERFORMANCE_HINT' must be one of {', '.join(_HINTS)}, got '{hint}'"
            )
        props["PERFORMANCE_HINT"] = hint.strip().upper()
    threads = _count(params, "INFERENCE_NUM_THREADS", minimum=0)
    if threads is None and hint is None:
        threads = default_intra_op_threads(spec, cores)
    if threads is not None:
        props["INFERENCE_NUM_THREADS"] = str(threads)
    streams_raw = params.get("NUM_STREAMS")
    if streams_raw is not None and streams_raw.strip().upper() in ("AUTO", "NUMA"):
        props["NUM_STREAMS"] = streams_raw.strip().upper()
    else:
        streams = _count(params, "NUM_STREAMS", minimum=1)
        if streams is None and hint is None:
            streams = 1
        if streams is not None:
            props["NUM_STREAMS"] = str(streams)
    if "HINT_BF16" in params:
        # NO pins FP32: on CPUs with native BF16 (AVX-512 BF16, AMX) OpenVINO's own default
        # precision is bf16, so leaving the property unset would not mean FP32 there
        props["INFERENCE_PRECISION_HINT"] = "bf16" if _yes_no(params, "HINT_BF16") else "f32"
    cache_dir = params.get("CACHE_DIR")
    if cache_dir is not None:
        if not cache_dir.strip():
            raise ConfigError("parameter 'CACHE_DIR' must name a directory")
        props["CACHE_DIR"] = cache_dir.strip()
    static_batch = _yes_no(params, "SKIP_OV_DYNAMIC_BATCHSIZE")
    pad_batch = _yes_no(params, "ENABLE_BATCH_PADDING")
    if (static_batch or pad_batch) and spec.max_batch_size == 0:
        raise ConfigError(
            "parameters 'SKIP_OV_DYNAMIC_BATCHSIZE' and 'ENABLE_BATCH_PADDING' need "
            "max_batch_size > 0"
        )
    if pad_batch and not static_batch:
        raise ConfigError(
            "parameter 'ENABLE_BATCH_PADDING' only applies with SKIP_OV_DYNAMIC_BATCHSIZE=YES "
            "(a dynamic batch dimension needs no padding)"
        )
    return CompileSettings(
        properties=tuple(sorted(props.items())),
        static_batch=static_batch,
        pad_batch=pad_batch,
        reshape_io=_yes_no(params, "RESHAPE_IO_LAYERS"),
    )


# -- reading models -----------------------------------------------------------------------------
