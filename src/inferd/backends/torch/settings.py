"""Per-model settings of the PyTorch backend, read once from the config ``parameters``.

The keys are the ones Triton's PyTorch backend reads (matched case-insensitively, so both
``INTRA_OP_THREAD_COUNT`` and ``intra_op_thread_count`` work). Keys that would flip a
process-wide TorchScript switch for every model at once are refused rather than half-honoured.

Thread policy
-------------
torch has one intra-op thread setting per process (``torch.set_num_threads``); with the OpenMP
build each calling thread also keeps the value it last set. inferd runs every instance on its
own worker thread and sets the model's intra-op count in that thread before its first run, so
an instance always computes with its model's count, whatever other models chose.

The default is ONE intra-op thread per instance; scale with ``instance_group { count }`` (one
instance per core serves concurrent requests best), or raise ``INTRA_OP_THREAD_COUNT`` for a
large model whose single requests must use several cores (0 keeps torch's own default, all
cores). Why not the cores divided among the instances, as for ONNX Runtime: an OpenMP team
busy-waits after each run, and in a server the next request arrives from another thread, so the
spinning team competes with the front end and the other instances. Measured on the digits CNN
example (2 cores, 8 concurrent callers): two intra-op threads served 745 requests/s, one
thread 6,440. The inter-op pool can be sized only once per process, before first use:
``INTER_OP_THREAD_COUNT`` is applied if it still can be, and refused loudly if the pool already
runs with another size.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferd.backends.parameters import bool_param, int_param
from inferd.core.model_spec import ModelSpec
from inferd.errors import ConfigError

# Triton parameters that toggle TorchScript's JIT for the whole process, not for one model.
_PROCESS_WIDE = (
    "enable_jit_executor",
    "enable_jit_profiling",
    "enable_nvfuser",
    "enable_tensor_fuser",
)


@dataclass(frozen=True, slots=True)
class TorchSettings:
    intra_op_threads: int  # 0 = leave torch's own default
    inter_op_threads: int = 0  # 0 = leave torch's own default
    inference_mode: bool = True  # torch.inference_mode(); False = torch.no_grad()
    optimized_execution: bool = True  # TorchScript graph executor optimisations
    weight_sharing: bool = False  # instances on one device share one module
    cache_cleaning: bool = False  # release cached CUDA memory after every run


#: Intra-op threads per instance when the configuration does not say (see the thread policy).
DEFAULT_INTRA_OP_THREADS = 1


def _int(params: dict[str, str], key: str, default: int) -> int:
    value = int_param(params, key, default, label=key.upper())
    assert value is not None
    return value


def _bool(params: dict[str, str], key: str, default: bool) -> bool:
    return bool(bool_param(params, key, default, label=key.upper()))


def parse_settings(spec: ModelSpec) -> TorchSettings:
    """Read the backend settings from ``spec.parameters``; raise :class:`ConfigError` if bad."""
    params = {key.lower(): value for key, value in spec.parameters.items()}
    for key in _PROCESS_WIDE:
        if key in params:
            raise ConfigError(
                f"parameter '{key.upper()}' switches TorchScript's JIT for the whole process, "
                "which one model's configuration must not do; remove it from config.pbtxt"
            )
    return TorchSettings(
        intra_op_threads=_int(params, "intra_op_thread_count", DEFAULT_INTRA_OP_THREADS),
        inter_op_threads=_int(params, "inter_op_thread_count", 0),
        inference_mode=_bool(params, "inference_mode", True),
        optimized_execution=not _bool(params, "disable_optimized_execution", False),
        weight_sharing=_bool(params, "enable_weight_sharing", False),
        cache_cleaning=_bool(params, "enable_cache_cleaning", False),
    )
