"""Candidates from ONNX Runtime's graph optimizer: the graph optimized offline at one level, and
the transformer fusions (attention, layer norms, GELU) for BERT-like encoders.

Each builder writes ``<out_dir>/<name>/model.onnx``, checks that the new graph answers like its
source on a few sample rows (:mod:`inferd.tools.optimize.verify`) and returns a
:class:`~inferd.tools.optimize.candidate.Candidate`; it raises
:class:`~inferd.tools.optimize.candidate.CandidateSkipped` when it does not apply.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.encoder import find_encoder
from inferd.tools.optimize.verify import (
    EXACT,
    check_agreement,
    head_rows,
    load_onnx,
    onnx_session,
    onnxruntime,
    run_onnx,
)

__all__ = ["ORT_LEVELS", "build_ort_optimized", "build_transformer_fused"]

log = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]

#: the offline levels, weakest first
ORT_LEVELS = ("basic", "extended", "all")

# The one optimizer whose output is tied to the CPU it ran on: NCHWc blocks convolutions by the
# vector width (8 floats with AVX2, 16 with AVX-512), and ONNX Runtime warns that a model saved
# with it "should only be used in the same environment". Left out, the saved graph stays
# portable; the serving session adds the blocked layout again at load on each machine.
_CPU_SPECIFIC = ("NchwcTransformer",)

_CONTRIB_DOMAINS = ("com.microsoft", "com.microsoft.nchwc")


def _level(name: str) -> Any:
    ort = onnxruntime()
    levels = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if name not in levels:
        raise InvalidArgumentError(
            f"unknown ONNX Runtime graph optimization level '{name}'; use one of "
            f"{', '.join(ORT_LEVELS)}"
        )
    return levels[name]


def _contrib_ops(model: Any) -> list[str]:
    return sorted({n.op_type for n in model.graph.node if n.domain in _CONTRIB_DOMAINS})


def build_ort_optimized(
    source: Path,
    out_dir: Path,
    *,
    sample: Mapping[str, Array],
    level: str = "all",
    parent: str | None = None,
) -> Candidate:
    """The ONNX model as ONNX Runtime's ``level`` optimizations leave it, saved offline.

    At ``all`` the CPU-specific NCHWc layout is left out (see ``_CPU_SPECIFIC``), so the file
    serves on any CPU; the serving session adds it again at load.
    """
    name = f"graph-{level}"
    options = onnxruntime().SessionOptions()
    options.graph_optimization_level = _level(level)
    path = out_dir / name / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    options.optimized_model_filepath = str(path)
    disabled = list(_CPU_SPECIFIC) if level == "all" else []
    onnx_session(source, options=options, disabled_optimizers=disabled)

    feeds = head_rows(sample)
    want = run_onnx(onnx_session(source), feeds)
    got = run_onnx(onnx_session(path), feeds, list(want))
    found = check_agreement(want, got, EXACT, f"the graph optimized at level '{level}'")

    before = len(load_onnx(source).graph.node)
    saved = load_onnx(path)
    notes = [
        f"ONNX Runtime's '{level}' graph optimizations applied offline ({before} nodes before, "
        f"{len(saved.graph.node)} after). inferd's onnxruntime backend applies its graph "
        "optimizations again at load (level 'all' unless optimization.graph.level says "
        "otherwise), so this mostly saves load time, not run time."
    ]
    if disabled:
        notes.append(
            "Saved without the NCHWc layout transform, whose blocked layout is tied to this "
            "CPU's vector width: the file serves on any CPU and the backend re-applies the "
            "layout at load."
        )
    contrib = _contrib_ops(saved)
    if contrib:
        notes.append(
            f"The saved graph uses ONNX Runtime's own operators ({', '.join(contrib)}): it "
            "serves on ONNX Runtime only."
        )
    return Candidate(
        name=name,
        kind="graph",
        path=path,
        recipe={
            "method": "onnxruntime-graph-optimizer",
            "level": level,
            "disabled_optimizers": disabled,
            "max_abs_error": max(a.max_abs_error for a in found),
        },
        notes=tuple(notes),
        parent=parent,
    )


def build_transformer_fused(
    source: Path,
    out_dir: Path,
    *,
    sample: Mapping[str, Array],
    num_heads: int = 0,
    hidden_size: int = 0,
    parent: str | None = None,
) -> Candidate:
    """ONNX Runtime's transformer fusions (``model_type="bert"``) over a BERT-like encoder.

    ``num_heads`` / ``hidden_size`` of 0 are read from the graph (:func:`find_encoder`), and
    left to the optimizer's own detection when the graph does not show them either.
    """
    shape = find_encoder(load_onnx(source))
    if shape is None:
        raise CandidateSkipped(
            "the model is not a transformer encoder (no self-attention block MatMul -> "
            "Softmax -> MatMul found), so the transformer fusions do not apply"
        )
    heads = num_heads or shape.num_heads
    hidden = hidden_size or shape.hidden_size
    if heads and hidden and hidden % heads:
        raise InvalidArgumentError(
            f"a hidden size of {hidden} cannot be split into {heads} attention heads"
        )
    if not (heads and hidden):
        heads = hidden = 0  # the optimizer detects both or neither
    from onnxruntime.transformers.optimizer import optimize_model

    # opt_level=0: the fusions only; ONNX Runtime's own graph optimizer runs at serving time
    optimized = optimize_model(
        str(source),
        model_type="bert",
        num_heads=heads,
        hidden_size=hidden,
        opt_level=0,
        use_gpu=False,
    )
    fused = {k: int(v) for k, v in optimized.get_fused_operator_statistics().items() if v}
    if not fused:
        raise CandidateSkipped(
            f"ONNX Runtime's transformer fusions found nothing to fuse in this encoder "
            f"({shape.attention_blocks} attention blocks, {heads or 'unknown'} heads, hidden "
            f"size {hidden or 'unknown'})"
        )
    name = "transformer-fused"
    path = out_dir / name / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    optimized.save_model_to_file(str(path), use_external_data_format=False)

    feeds = head_rows(sample)
    want = run_onnx(onnx_session(source), feeds)
    got = run_onnx(onnx_session(path), feeds, list(want))
    found = check_agreement(want, got, EXACT, "the fused transformer graph")

    summary = ", ".join(f"{count} {op}" for op, count in sorted(fused.items()))
    notes = [
        f"ONNX Runtime's transformer fusions for a BERT-like encoder ({shape.attention_blocks} "
        f"attention blocks, {heads or 'auto'} heads, hidden size {hidden or 'auto'}): {summary}. "
        "The fused operators are ONNX Runtime's own: the model serves on ONNX Runtime only."
    ]
    attention = fused.get("Attention", 0) + fused.get("MultiHeadAttention", 0)
    if attention < shape.attention_blocks:
        notes.append(
            f"Only {attention} of {shape.attention_blocks} attention blocks were fused (the "
            "optimizer did not recognise the others' pattern); they run unfused."
        )
    return Candidate(
        name=name,
        kind="transformer",
        path=path,
        recipe={
            "method": "onnxruntime-transformer-optimizer",
            "model_type": "bert",
            "num_heads": heads,
            "hidden_size": hidden,
            "fused": fused,
            "max_abs_error": max(a.max_abs_error for a in found),
        },
        notes=tuple(notes),
        parent=parent,
    )
