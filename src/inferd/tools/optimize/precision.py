"""Lower-precision float candidates: FP16 for ONNX Runtime and BF16 through OpenVINO.

What the runtimes do with them (checked on ONNX Runtime 1.32 and OpenVINO 2026.4):

- ONNX Runtime's CPU provider registers FP16 kernels for a few operators only (layer norms,
  some attention and quantization ops); MatMul, Gemm and Conv have none on x86. A graph
  converted to FP16 still loads: the session wraps each node without an FP16 kernel in casts
  and computes it in FP32, so FP16 then halves the file and saves no time.
  :func:`fp16_kernels` reads the provider's kernel registry, and :func:`build_fp16` keeps in
  FP32 the operators that have no FP16 kernel, or skips when none of the heavy ones has one.
- ONNX Runtime's CPU provider has no BF16 MatMul at all: a BF16 graph fails to load. BF16 runs
  through OpenVINO's ``INFERENCE_PRECISION_HINT: bf16`` on CPUs with AVX-512 BF16 or AMX-BF16
  (the openvino backend's ``HINT_BF16=YES``); on CPUs without them OpenVINO computes FP32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from inferd.tools.optimize.candidate import OPENVINO_PLATFORM, Candidate, CandidateSkipped
from inferd.tools.optimize.cpu import CpuFeatures, detect_cpu
from inferd.tools.optimize.openvino import check_candidate, check_ir, convert_to_ir
from inferd.tools.optimize.verify import (
    HALF,
    INT8,
    Tolerance,
    load_onnx,
    onnx_session,
    openvino_compiled,
    run_onnx,
)

__all__ = [
    "BF16_PARAMETERS",
    "HEAVY_OPS",
    "bf16_variant",
    "build_bf16",
    "build_fp16",
    "fp16_converter",
    "fp16_kernels",
    "write_fp16",
]

Array = np.ndarray[Any, Any]

#: the openvino backend's parameters for bfloat16 inference precision
BF16_PARAMETERS: Mapping[str, str] = {"HINT_BF16": "YES"}

#: operators that hold nearly all the arithmetic: where FP16 would have to save its time
HEAVY_OPS = frozenset(
    {
        ("", "MatMul"),
        ("", "Gemm"),
        ("", "Conv"),
        ("", "ConvTranspose"),
        ("", "Attention"),
        ("com.microsoft", "Attention"),
        ("com.microsoft", "MultiHeadAttention"),
        ("com.microsoft", "FusedMatMul"),
        ("com.microsoft", "FusedConv"),
        ("com.microsoft", "FusedGemm"),
    }
)

_ONNX_DOMAINS = ("", "ai.onnx")


def _domain(domain: str) -> str:
    return "" if domain in _ONNX_DOMAINS else domain


def fp16_kernels() -> frozenset[tuple[str, str]] | None:
    """``(domain, op)`` of every operator ONNX Runtime's CPU provider has an FP16 kernel for
    (``""`` is the ONNX domain), or ``None`` when this ONNX Runtime does not tell."""
    try:
        from onnxruntime.capi import _pybind_state as capi

        kernels = capi.get_all_opkernel_def()
    except (ImportError, AttributeError):
        return None
    found = set()
    for kernel in kernels:
        if kernel.provider != "CPUExecutionProvider":
            continue
        types = [t for allowed in kernel.type_constraints.values() for t in allowed]
        if "tensor(float16)" in types:
            found.add((_domain(kernel.domain), kernel.op_name))
    return frozenset(found)


def fp16_converter() -> Any:
    """ONNX Runtime's FP16 converter module; skips the candidate when it is missing."""
    try:
        from onnxruntime.transformers import float16
    except ImportError:
        raise CandidateSkipped(
            "ONNX Runtime's FP16 converter (onnxruntime.transformers.float16) is missing"
        ) from None
    return float16


def write_fp16(model: Any, out_dir: Path) -> Path:
    """Write a converted FP16 model where the ``fp16`` candidate lives (``fp16/model.onnx``)."""
    path = out_dir / "fp16" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def build_fp16(
    source: Path,
    out_dir: Path,
    *,
    sample: Mapping[str, Array],
    for_size: bool = False,
    block_ops: Sequence[str] = (),
    parent: str | None = None,
) -> Candidate:
    """The model with FP16 weights and arithmetic, inputs and outputs kept FP32.

    By default only operators with an FP16 kernel in ONNX Runtime's CPU provider are
    converted (the others would be cast back to FP32 at load), and the candidate is skipped
    when none of the heavy operators (:data:`HEAVY_OPS`) has one: it could not be faster.
    ``for_size=True`` converts every operator but the converter's default block list, for a
    file half the size whatever the speed. ``block_ops`` are kept FP32 in both cases.
    """
    model = load_onnx(source)
    float16 = fp16_converter()
    used = {(_domain(n.domain), n.op_type) for n in model.graph.node}
    heavy = sorted(op for _, op in used & HEAVY_OPS)
    kernels = fp16_kernels()
    blocked = set(float16.DEFAULT_OP_BLOCK_LIST) | set(block_ops)
    notes = []
    if not for_size and kernels is not None:
        no_kernel = sorted(op for domain, op in used if (domain, op) not in kernels)
        fast = sorted(op for _, op in (used & HEAVY_OPS) & kernels)
        if heavy and not fast:
            raise CandidateSkipped(
                f"ONNX Runtime's CPU provider has no FP16 kernel for {', '.join(heavy)}: the "
                "session would cast back to FP32 at load, so FP16 halves the file but saves "
                "no time here"
            )
        if not heavy:
            raise CandidateSkipped(
                "the model has no MatMul, Gemm, Conv or attention operators for FP16 to speed up"
            )
        blocked |= set(no_kernel)
        notes.append(
            f"FP16 for {', '.join(fast)} (ONNX Runtime's CPU provider has FP16 kernels for "
            "them); operators without one stay FP32"
            + (f" ({', '.join(no_kernel)})." if no_kernel else ".")
        )
    else:
        notes.append(
            "FP16 weights and arithmetic wherever the converter allows; on this CPU ONNX "
            "Runtime casts the operators without FP16 kernels back to FP32 at load"
            + (f" ({', '.join(heavy)})" if heavy else "")
            + ", so this saves file size, not time."
        )
    converted = float16.convert_float_to_float16(
        model, keep_io_types=True, op_block_list=sorted(blocked)
    )
    name = "fp16"
    path = write_fp16(converted, out_dir)

    def run(feeds: dict[str, Array], outputs: list[str]) -> dict[str, Array]:
        return run_onnx(onnx_session(path), feeds, outputs)

    error = check_candidate(source, sample, run, HALF, "the FP16 model", "ONNX Runtime")
    return Candidate(
        name=name,
        kind="fp16",
        path=path,
        recipe={
            "method": "onnxruntime.transformers.float16",
            "keep_io_types": True,
            "op_block_list": sorted(blocked),
            "for_size": for_size,
            "max_abs_error": error,
        },
        notes=tuple(notes),
        parent=parent,
    )


def _require_bf16(cpu: CpuFeatures) -> None:
    if cpu.known and not cpu.bf16:
        raise CandidateSkipped(
            f"this CPU has no BF16 instructions (AVX-512 BF16 or AMX-BF16; it has "
            f"{cpu.summary()}), so OpenVINO would compute in FP32"
        )


def build_bf16(
    source: Path,
    out_dir: Path,
    *,
    sample: Mapping[str, Array],
    cpu: CpuFeatures | None = None,
    parent: str | None = None,
) -> Candidate:
    """The model served by OpenVINO with bfloat16 inference precision (``HINT_BF16=YES``).

    Skipped on CPUs known to lack BF16 instructions (OpenVINO would compute FP32 there); built
    when the CPU's features are unknown, and then kept only if OpenVINO reports bf16.
    """
    cpu = cpu if cpu is not None else detect_cpu()
    _require_bf16(cpu)
    path = out_dir / "bf16" / "model.xml"
    convert_to_ir(source, path)
    ir = Candidate(
        name="bf16",
        kind="bf16",
        path=path,
        platform=OPENVINO_PLATFORM,
        recipe={"method": "openvino.convert_model", "weights": "fp32 in the IR"},
        parent=parent,
    )
    return _in_bf16(ir, source, sample, cpu, name="bf16", kind="bf16", tolerance=HALF)


def bf16_variant(
    candidate: Candidate,
    source: Path,
    *,
    sample: Mapping[str, Array],
    cpu: CpuFeatures | None = None,
) -> Candidate:
    """An OpenVINO candidate (the NNCF INT8 model, say) served with bfloat16 precision for
    the layers it computes in float: the same files, ``HINT_BF16=YES``, ``<name>-bf16``."""
    if candidate.platform != OPENVINO_PLATFORM:
        raise CandidateSkipped(
            f"candidate '{candidate.name}' is not an OpenVINO model: bfloat16 precision is "
            "OpenVINO's"
        )
    cpu = cpu if cpu is not None else detect_cpu()
    _require_bf16(cpu)
    int8 = candidate.kind.startswith("nncf") or "int8" in candidate.kind
    return _in_bf16(
        candidate,
        source,
        sample,
        cpu,
        name=f"{candidate.name}-bf16",
        kind=candidate.kind,
        tolerance=INT8 if int8 else HALF,
        parent=candidate.name,
    )


def _in_bf16(
    candidate: Candidate,
    source: Path,
    sample: Mapping[str, Array],
    cpu: CpuFeatures,
    *,
    name: str,
    kind: str,
    tolerance: Tolerance,
    parent: str | None = None,
) -> Candidate:
    """``candidate`` compiled in bfloat16: checked that OpenVINO runs bf16, and against the
    ONNX source."""
    hint = {"INFERENCE_PRECISION_HINT": "bf16"}
    compiled = openvino_compiled(candidate.path, hint)
    precision = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    if "bf16" not in precision and "bfloat16" not in precision:
        raise CandidateSkipped(
            f"OpenVINO runs this model in {precision} even when asked for bf16 on this CPU"
        )
    error = check_ir(source, candidate.path, sample, hint, tolerance, f"'{name}' in bfloat16")
    return replace(
        candidate,
        name=name,
        kind=kind,
        parameters={**candidate.parameters, **BF16_PARAMETERS},
        recipe={**candidate.recipe, "inference_precision": "bf16", "max_abs_error": error},
        notes=(
            *candidate.notes,
            "Float layers in bfloat16 through OpenVINO (HINT_BF16=YES); ONNX Runtime's CPU "
            f"provider has no BF16 MatMul. This CPU: {cpu.summary()}.",
        ),
        parent=parent if parent is not None else candidate.parent,
    )
