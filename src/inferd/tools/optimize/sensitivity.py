"""Which quantized nodes of a QDQ model hurt its accuracy most, measured on calibration data.

ONNX Runtime's quantization debugger (``onnxruntime.quantization.qdq_loss_debug``) adds the
outputs of the quantized nodes to copies of the float model and of the QDQ model
(``modify_model_output_intermediate_tensors``), and runs both on the same rows
(``collect_activations``, chunk by chunk, so memory stays bounded). Each quantized node's output
is compared with the same node's output in the float model, as a relative error
``||float - qdq|| / ||float||`` over all the rows (its SQNR is ``-20 log10`` of that).

A node's own share is the error its output has beyond the largest error of the quantized nodes
upstream of it (``score = max(0, output error - input error)``): the error its input's and
weights' quantization adds, or that it amplifies, as a node that sees an activation with one
outlier channel does. ONNX Runtime quantizes a tensor, not an edge: a QDQ pair stays on a tensor
as long as its producer or any of its consumers is quantized (a Relu or Clip folded into the
quantization counts as part of its producer). So the damage a tensor's quantization does to any
of its consumers is charged to every quantized node that touches the tensor, and keeping them
all in float (``nodes_to_exclude``) removes it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import log10, sqrt
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.calibration import CalibrationReader
from inferd.tools.optimize.data import Dataset

__all__ = ["NodeSensitivity", "node_sensitivity", "rank", "sqnr_db"]

_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
_FOLDED = frozenset({"Relu", "Clip"})  # activations the QDQ quantizer folds into the range


class NodeSensitivity(NamedTuple):
    """One quantized node: ``score`` is the relative error charged to it (see the module),
    ``output_error`` the relative error of its output against the float model's."""

    node: str
    op_type: str
    score: float
    output_error: float


def sqnr_db(relative_error: float) -> float:
    """The signal-to-quantization-noise ratio, in dB, of a relative error."""
    return float("inf") if relative_error <= 0 else -20 * log10(relative_error)


@dataclass
class _Sums:
    signal: float = 0.0
    noise: float = 0.0

    def add(self, reference: np.ndarray[Any, Any], value: np.ndarray[Any, Any]) -> None:
        ref = reference.astype(np.float64).ravel()
        self.signal += float(ref @ ref)
        diff = ref - value.astype(np.float64).ravel()
        self.noise += float(diff @ diff)

    def relative(self) -> float:
        if self.noise == 0:
            return 0.0
        return sqrt(self.noise) / max(sqrt(self.signal), 1e-30)


def node_sensitivity(
    float_model: Path,
    qdq_model: Path,
    data: Dataset,
    work_dir: Path,
    *,
    excluded: Sequence[str] = (),
    batch_size: int = 8,
    max_rows: int = 64,
    chunk_rows: int = 32,
) -> list[NodeSensitivity]:
    """The quantized nodes of ``qdq_model``, worst first. ``float_model`` must be the model it
    was quantized from (the prepared one: node names must match). A node counts as quantized
    when it reads a dequantized tensor and no float tensor that is not (a node kept in float
    can still read a tensor its quantized neighbours keep quantized); ``excluded`` names more
    nodes to leave out. At most ``max_rows`` rows of ``data`` are run, ``chunk_rows`` at a
    time."""
    import onnx
    from onnxruntime.quantization import qdq_loss_debug

    float_graph = onnx.load(float_model, load_external_data=False).graph
    qdq_graph = onnx.load(qdq_model, load_external_data=False).graph
    pairs = _quantized_nodes(float_graph.node, qdq_graph, set(excluded))
    if not pairs:
        return []
    external = _external(float_graph) or _external(qdq_graph)
    folder = work_dir / "sensitivity"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    op_types = sorted({node.op_type for node, _ in pairs.values()})
    augmented = {}
    for label, model in (("float", float_model), ("qdq", qdq_model)):
        augmented[label] = folder / f"{label}.onnx"
        qdq_loss_debug.modify_model_output_intermediate_tensors(
            model, augmented[label], op_types, save_as_external_data=external
        )
    sums = {name: _Sums() for name in pairs}
    rows = data.head(max_rows)
    for start in range(0, rows.rows, chunk_rows):
        chunk = Dataset(
            {name: array[start : start + chunk_rows] for name, array in rows.inputs.items()},
            None,
            rows.source,
        )
        acts = {
            label: qdq_loss_debug.collect_activations(
                str(path), CalibrationReader(chunk, batch_size)
            )
            for label, path in augmented.items()
        }
        for name, (node, qdq_output) in pairs.items():
            reference = acts["float"].get(node.output[0])
            value = acts["qdq"].get(qdq_output)
            if reference is None or value is None:
                continue
            for ref, got in zip(reference, value, strict=True):
                if ref.shape != got.shape:
                    raise InvalidArgumentError(
                        f"node '{name}' gives outputs of {ref.size} values in the float model "
                        f"and {got.size} in the quantized one: not the model it was made from"
                    )
                sums[name].add(ref, got)
    shutil.rmtree(folder)
    errors = {name: s.relative() for name, s in sums.items() if s.signal or s.noise}
    return rank(float_graph.node, {n: node for n, (node, _) in pairs.items()}, errors)


def rank(
    nodes: Sequence[Any], quantized: Mapping[str, Any], errors: Mapping[str, float]
) -> list[NodeSensitivity]:
    """The ranking from each quantized node's output error (pure: the graph's nodes in
    topological order, the quantized ones by name, their relative output errors)."""
    upstream: dict[str, float] = {}  # tensor -> the largest error of the quantized nodes before
    own: dict[str, float] = {}
    for node in nodes:
        before = max((upstream.get(t, 0.0) for t in node.input if t), default=0.0)
        if node.name in errors:
            own[node.name] = max(0.0, errors[node.name] - before)
            after = errors[node.name]
        else:
            after = before
        for tensor in node.output:
            upstream[tensor] = after
    charged = dict(own)
    for consumers, producer in _tensors(nodes, quantized):
        # the damage a tensor's quantization does shows in its consumers' own error
        damage = max(own.get(n, 0.0) for n in consumers)
        for name in (*consumers, *producer):
            if name in charged:
                charged[name] = max(charged[name], damage)
    ranking = [
        NodeSensitivity(name, quantized[name].op_type, charged[name], errors[name])
        for name in charged
    ]
    ranking.sort(key=lambda s: (-s.score, -own[s.node], -s.output_error, s.node))
    return ranking


def _tensors(
    nodes: Sequence[Any], quantized: Mapping[str, Any]
) -> list[tuple[list[str], list[str]]]:
    """For each tensor read by quantized nodes: those nodes, and the quantized node that
    produces it, if any (a folded Relu or Clip makes its input's producer its producer)."""
    producer: dict[str, Any] = {t: node for node in nodes for t in node.output}
    consumers: dict[str, list[str]] = {}
    for node in nodes:
        if node.name in quantized:
            for tensor in filter(None, node.input):
                consumers.setdefault(tensor, []).append(node.name)
    found = []
    for tensor, names in consumers.items():
        source = producer.get(tensor)
        while source is not None and source.op_type in _FOLDED and source.name not in quantized:
            source = producer.get(source.input[0])
        made_by = [source.name] if source is not None and source.name in quantized else []
        found.append((names, made_by))
    return found


def _quantized_nodes(
    float_nodes: Iterable[Any], qdq_graph: Any, excluded: set[str]
) -> dict[str, tuple[Any, str]]:
    """Quantized node name -> (its float node, its output's name in the QDQ model): the nodes of
    the QDQ model, other than Q/DQ and the ``excluded`` ones, that exist in the float model and
    read a dequantized tensor and no float tensor that is not dequantized."""
    import onnx

    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    typed = [*qdq_graph.input, *qdq_graph.value_info, *qdq_graph.output]
    float_tensors = {t.name for t in qdq_graph.initializer if t.data_type in floats} | {
        v.name for v in typed if v.type.tensor_type.elem_type in floats
    }
    dequantized = {t for n in qdq_graph.node if n.op_type == "DequantizeLinear" for t in n.output}
    by_name = {node.name: node for node in float_nodes if node.name}
    found: dict[str, tuple[Any, str]] = {}
    for node in qdq_graph.node:
        if node.op_type in _QDQ_OPS or node.name in excluded or node.name not in by_name:
            continue
        inputs = set(filter(None, node.input))
        if node.output and inputs & dequantized and not (inputs - dequantized) & float_tensors:
            found[node.name] = (by_name[node.name], node.output[0])
    return found


def _external(graph: Any) -> bool:
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in graph.initializer)
