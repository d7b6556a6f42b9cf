"""FP16 for ONNX models measured on a GPU: ONNX Runtime's converter, checked with the CUDA
execution provider.

The CPU candidate (:func:`inferd.tools.optimize.precision.build_fp16`) keeps in FP32 every
operator the CPU provider has no FP16 kernel for; the CUDA provider has FP16 kernels for
MatMul, Gemm, Conv and attention, so here every operator but the converter's default block list
is converted. The inputs and outputs keep their types (``keep_io_types``), so the served
configuration is unchanged: FP32 inputs are cast to FP16 inside the graph and the results back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.openvino import check_candidate
from inferd.tools.optimize.precision import fp16_converter, write_fp16
from inferd.tools.optimize.verify import HALF, load_onnx, onnxruntime, run_onnx

__all__ = ["build_fp16_cuda", "cuda_session"]

Array = np.ndarray[Any, Any]


def cuda_session(path: Path, gpu: int) -> Any:
    """An ONNX Runtime session on GPU ``gpu`` with the CUDA provider only (no silent CPU
    fallback for the whole model: nodes CUDA lacks still run on the host, as when served)."""
    ort = onnxruntime()
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise CandidateSkipped(
            "this ONNX Runtime has no CUDA execution provider (install onnxruntime-gpu)"
        )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(
        str(path),
        sess_options=options,
        providers=[("CUDAExecutionProvider", {"device_id": gpu}), "CPUExecutionProvider"],
    )


def build_fp16_cuda(
    source: Path,
    out_dir: Path,
    *,
    sample: Mapping[str, Array],
    gpu: int,
    parent: str | None = None,
) -> Candidate:
    """The model with FP16 weights and arithmetic for the CUDA provider, I/O types kept."""
    float16 = fp16_converter()
    model = load_onnx(source)
    converted = float16.convert_float_to_float16(model, keep_io_types=True)
    name = "fp16"
    path = write_fp16(converted, out_dir)

    def run(feeds: dict[str, Array], outputs: list[str]) -> dict[str, Array]:
        return run_onnx(cuda_session(path, gpu), feeds, outputs)

    error = check_candidate(source, sample, run, HALF, "the FP16 model", f"CUDA (GPU {gpu})")
    return Candidate(
        name=name,
        kind="fp16",
        path=path,
        recipe={
            "method": "onnxruntime.transformers.float16",
            "keep_io_types": True,
            "op_block_list": sorted(float16.DEFAULT_OP_BLOCK_LIST),
            "execution_provider": "CUDAExecutionProvider",
            "device": f"cuda:{gpu}",
            "max_abs_error": error,
        },
        notes=(
            "FP16 weights and arithmetic for ONNX Runtime's CUDA provider (FP16 kernels for "
            "MatMul, Gemm, Conv and attention); inputs and outputs keep their served types.",
        ),
        parent=parent,
    )
