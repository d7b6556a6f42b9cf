"""Which quantized nodes of a QDQ model hurt its accuracy most, measured on calibration data.

Each quantized node is judged on its own, on the values it really receives: the QDQ model runs
on the rows with the tensors around each quantized node added to its outputs (the same
augmentation ONNX Runtime's ``qdq_loss_debug`` makes, kept in shape); then the node is run
again in float, with its float weights, on the values its inputs had *before* they were
quantized (a Relu or Clip that the quantizer folded into the range is applied to them, as it
was). The node's **local error** is the relative error ``||qdq - float|| / ||float||`` between
its output in the QDQ model (after its own output quantization, when it has one) and that float
output, over all the rows: the error this node's input, weight and output quantization add,
whatever the error it inherits. Errors that are only inherited (a node downstream of a bad one)
do not count, and an error that a node amplifies does (a node that reads an activation with one
outlier channel and all but ignores that channel loses the other channels to the coarse scale).

ONNX Runtime quantizes a tensor, not an edge: a QDQ pair stays on a tensor as long as its
producer or any of its consumers is quantized. So the damage a tensor's quantization does to
its consumers is charged to every quantized node that touches the tensor, and keeping them all
in float (``nodes_to_exclude``) removes it. A node whose inputs cannot be replayed (integer
inputs such as indices) is judged by its output's relative error against the float model.
The ranking also reports each node's output error against the float model (its SQNR is
``-20 log10`` of that), which includes what the node inherits.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from math import log10, sqrt
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from inferd.tools.optimize.calibration import CalibrationReader
from inferd.tools.optimize.data import Dataset

__all__ = ["NodeSensitivity", "node_sensitivity", "rank", "sqnr_db"]

_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
_FOLDED = frozenset({"Relu", "Clip"})  # activations the QDQ quantizer folds into the range
_FLOAT, _FLOAT16, _BFLOAT16 = 1, 10, 16  # onnx.TensorProto's element types
_FLOAT_TYPES = frozenset({_FLOAT, _FLOAT16, _BFLOAT16})

Array = np.ndarray[Any, Any]
Bounds = tuple[float | None, float | None]  # a folded Relu (0, None) or Clip (min, max)


class NodeSensitivity(NamedTuple):
    """One quantized node: ``score`` is the local error charged to it (see the module),
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

    def add(self, reference: Array, value: Array) -> None:
        ref = reference.astype(np.float64).ravel()
        self.signal += float(ref @ ref)
        diff = ref - value.astype(np.float64).ravel()
        self.noise += float(diff @ diff)

    def relative(self) -> float:
        if self.noise == 0:
            return 0.0
        return sqrt(self.noise) / max(sqrt(self.signal), 1e-30)


@dataclass
class _Replay:
    """How to run one quantized node again in float: its one-node model, and for each of its
    activation inputs the QDQ-model tensor that holds the value before quantization and the
    folded activations to apply to it; the QDQ-model tensor to compare its output with."""

    name: str
    op_type: str
    float_output: str  # the node's output in the float model
    qdq_output: str  # its raw output in the QDQ model
    compared: str  # its output in the QDQ model after its own output quantization, if any
    after: list[Bounds]  # folded activations applied to the float output
    inputs: dict[str, tuple[str, list[Bounds]]] = field(default_factory=dict)
    replayable: bool = True
    session: Any = None
    local: _Sums = field(default_factory=_Sums)
    against_float: _Sums = field(default_factory=_Sums)


def node_sensitivity(
    float_model: Path,
    qdq_model: Path,
    data: Dataset,
    work_dir: Path,
    *,
    excluded: Sequence[str] = (),
    batch_size: int = 8,
    max_rows: int = 64,
) -> list[NodeSensitivity]:
    """The quantized nodes of ``qdq_model``, worst first. ``float_model`` must be the model it
    was quantized from (the prepared one: node names must match). A node counts as quantized
    when it reads a dequantized tensor and no float tensor that is not (a node kept in float
    can still read a tensor its quantized neighbours keep quantized); ``excluded`` names more
    nodes to leave out. At most ``max_rows`` rows of ``data`` are run."""
    import onnx

    float_proto = onnx.load(float_model)
    qdq_proto = onnx.load(qdq_model, load_external_data=False)
    float_graph, qdq_graph = float_proto.graph, qdq_proto.graph
    pairs = _quantized_nodes(float_graph.node, qdq_graph, set(excluded))
    if not pairs:
        return []
    replays = _plan(float_graph, qdq_graph, pairs)
    folder = work_dir / "sensitivity"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    try:
        qdq_session = _session_with_outputs(
            qdq_model, folder / "qdq.onnx", _needed(replays.values(), qdq=True)
        )
        float_session = _session_with_outputs(
            float_model, folder / "float.onnx", _needed(replays.values(), qdq=False)
        )
        for batch in CalibrationReader(data.head(max_rows), batch_size):
            got = _run(qdq_session, batch)
            want = _run(float_session, batch)
            for replay in replays.values():
                replayer = partial(_one_node_session, float_proto, pairs[replay.name][0])
                _measure(replay, got, want, replayer)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    local = {
        r.name: (
            r.op_type,
            (r.local if r.replayable else r.against_float).relative(),
            r.against_float.relative(),
        )
        for r in replays.values()
    }
    return rank(local, _tensors(qdq_graph, set(pairs)))


def rank(
    local: Mapping[str, tuple[str, float, float]],
    tensors: Iterable[tuple[Sequence[str], Sequence[str]]],
) -> list[NodeSensitivity]:
    """The ranking (pure): ``local`` maps each quantized node to its op type, local error and
    output error; ``tensors`` gives, for each quantized tensor, the quantized nodes that read it
    and the one that writes it. A tensor's damage is the worst local error of its readers, and
    every node touching it is charged at least that."""
    charged = {name: error for name, (_, error, _) in local.items()}
    for readers, writers in tensors:
        damage = max((local[n][1] for n in readers if n in local), default=0.0)
        for name in (*readers, *writers):
            if name in charged:
                charged[name] = max(charged[name], damage)
    ranking = [
        NodeSensitivity(name, local[name][0], charged[name], local[name][2]) for name in charged
    ]
    ranking.sort(key=lambda s: (-s.score, -local[s.node][1], -s.output_error, s.node))
    return ranking


# --- which nodes are quantized, and how to replay them ----------------------------------------


def _quantized_nodes(
    float_nodes: Iterable[Any], qdq_graph: Any, excluded: set[str]
) -> dict[str, tuple[Any, Any]]:
    """Quantized node name -> (its float node, its QDQ node): the nodes of the QDQ model, other
    than Q/DQ and the ``excluded`` ones, that exist in the float model, read a dequantized
    tensor and no float tensor that is not dequantized, and compute floats (a Shape that reads
    a dequantized tensor is not quantized)."""
    types = _types(qdq_graph)
    floats = {name for name, kind in types.items() if kind in _FLOAT_TYPES}
    dequantized = {t for n in qdq_graph.node if n.op_type == "DequantizeLinear" for t in n.output}
    by_name = {node.name: node for node in float_nodes if node.name}
    found: dict[str, tuple[Any, Any]] = {}
    for node in qdq_graph.node:
        if node.op_type in _QDQ_OPS or node.name in excluded or node.name not in by_name:
            continue
        inputs = set(filter(None, node.input))
        computes = bool(node.output) and types.get(node.output[0], _FLOAT) in _FLOAT_TYPES
        if computes and inputs & dequantized and not (inputs - dequantized) & floats:
            found[node.name] = (by_name[node.name], node)
    return found


def _types(graph: Any) -> dict[str, int]:
    """Tensor name -> ONNX element type, where the graph says."""
    typed = [*graph.input, *graph.value_info, *graph.output]
    types = {v.name: v.type.tensor_type.elem_type for v in typed if v.type.HasField("tensor_type")}
    types.update({t.name: t.data_type for t in graph.initializer})
    return types


def _plan(
    float_graph: Any, qdq_graph: Any, pairs: Mapping[str, tuple[Any, Any]]
) -> dict[str, _Replay]:
    producer = {t: n for n in qdq_graph.node for t in n.output}
    readers: dict[str, list[Any]] = {}
    for node in qdq_graph.node:
        for tensor in node.input:
            readers.setdefault(tensor, []).append(node)
    float_producer = {t: n for n in float_graph.node for t in n.output}
    float_readers: dict[str, list[Any]] = {}
    for node in float_graph.node:
        for tensor in node.input:
            float_readers.setdefault(tensor, []).append(node)
    qdq_names = {n.name for n in qdq_graph.node}
    weights = {t.name: t for t in float_graph.initializer}
    replays: dict[str, _Replay] = {}
    for name, (float_node, qdq_node) in pairs.items():
        raw = qdq_node.output[0]
        quantize = _reader(readers, raw, "QuantizeLinear")
        dequantize = _reader(readers, quantize.output[0], "DequantizeLinear") if quantize else None
        replay = _Replay(
            name,
            float_node.op_type,
            float_node.output[0],
            raw,
            dequantize.output[0] if dequantize is not None else raw,
            [],
        )
        replays[name] = replay
        try:
            if dequantize is not None:
                chain = _folded_after(float_node.output[0], float_readers, qdq_names)
                replay.after = [_bounds(n, weights) for n in chain]
            for float_input, qdq_input in zip(float_node.input, qdq_node.input, strict=False):
                if not float_input or float_input in weights:
                    continue
                source = producer.get(qdq_input)
                if source is None or source.op_type != "DequantizeLinear":
                    replay.inputs[float_input] = (qdq_input, [])
                    continue
                step = producer.get(source.input[0])
                if step is None or step.op_type != "QuantizeLinear":
                    raise LookupError("a dequantized constant where the float model computes")
                chain = _folded_before(float_input, float_producer, qdq_names)
                replay.inputs[float_input] = (step.input[0], [_bounds(n, weights) for n in chain])
        except LookupError:  # judged by its output against the float model instead
            replay.replayable = False
            replay.inputs.clear()
    return replays


def _reader(readers: Mapping[str, list[Any]], tensor: str, op_type: str) -> Any:
    return next((n for n in readers.get(tensor, []) if n.op_type == op_type), None)


def _bounds(node: Any, weights: Mapping[str, Any]) -> Bounds:
    """The range a folded Relu or Clip keeps (Clip's bounds from its attributes, or from
    constant inputs since opset 11); LookupError when they are computed."""
    if node.op_type == "Relu":
        return (0.0, None)
    from onnx import numpy_helper

    bounds: list[float | None] = [None, None]
    for attribute in node.attribute:
        if attribute.name in ("min", "max"):
            bounds[attribute.name == "max"] = attribute.f
    for index, tensor in enumerate(node.input[1:3]):
        if not tensor:
            continue
        if tensor not in weights:
            raise LookupError(f"the bounds of Clip '{node.name}' are computed")
        bounds[index] = float(numpy_helper.to_array(weights[tensor]))
    return bounds[0], bounds[1]


def _folded_after(tensor: str, readers: Mapping[str, list[Any]], kept: set[str]) -> list[Any]:
    """The Relu/Clip nodes the quantizer folded after ``tensor`` (its only reader, in a row)."""
    chain = []
    while len(readers.get(tensor, [])) == 1:
        node = readers[tensor][0]
        if node.op_type not in _FOLDED or node.name in kept:
            break
        chain.append(node)
        tensor = node.output[0]
    return chain


def _folded_before(tensor: str, producer: Mapping[str, Any], kept: set[str]) -> list[Any]:
    """The Relu/Clip nodes the quantizer folded that made ``tensor``, innermost first."""
    chain = []
    node = producer.get(tensor)
    while node is not None and node.op_type in _FOLDED and node.name not in kept:
        chain.append(node)
        node = producer.get(node.input[0])
    return chain[::-1]


def _tensors(qdq_graph: Any, quantized: set[str]) -> list[tuple[list[str], list[str]]]:
    """For each quantized tensor (a QuantizeLinear's input): the quantized nodes that read its
    dequantized values, and the quantized node that writes it, if any."""
    producer = {t: n for n in qdq_graph.node for t in n.output}
    readers: dict[str, list[Any]] = {}
    for node in qdq_graph.node:
        for tensor in node.input:
            readers.setdefault(tensor, []).append(node)
    found = []
    for q in (n for n in qdq_graph.node if n.op_type == "QuantizeLinear"):
        dq_outputs = [
            t
            for d in readers.get(q.output[0], [])
            if d.op_type == "DequantizeLinear"
            for t in d.output
        ]
        reading = sorted(
            {n.name for t in dq_outputs for n in readers.get(t, []) if n.name in quantized}
        )
        writer = producer.get(q.input[0])
        writing = [writer.name] if writer is not None and writer.name in quantized else []
        found.append((reading, writing))
    return found


# --- running ----------------------------------------------------------------------------------


def _needed(replays: Iterable[_Replay], *, qdq: bool) -> set[str]:
    names: set[str] = set()
    for replay in replays:
        if qdq:
            names |= {replay.qdq_output, replay.compared}
            names |= {source for source, _ in replay.inputs.values()}
        else:
            names.add(replay.float_output)
    return names


def _session_with_outputs(model: Path, copy: Path, outputs: set[str]) -> Any:
    """A session of ``model`` that also returns ``outputs`` (kept in shape), optimizations off
    so that every tensor exists as in the file."""
    import onnx
    import onnxruntime as ort

    proto = onnx.load(model)
    present = {o.name for o in proto.graph.output}
    for name in sorted(outputs - present):
        proto.graph.output.append(onnx.ValueInfoProto(name=name))
    external = not _fits(proto)
    onnx.save(proto, copy, save_as_external_data=external, location=f"{copy.name}.data")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(copy), options, providers=["CPUExecutionProvider"])


def _fits(proto: Any) -> bool:
    """Whether the model can be written as one protobuf message (under 2 GB)."""
    try:
        return bool(proto.ByteSize() < 2**31 - 2**20)
    except ValueError:
        return False


def _one_node_session(float_model: Any, node: Any, feed: Mapping[str, Array]) -> Any:
    """A session running ``node`` alone in float, with the float model's weights, for inputs
    of the types in ``feed``."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    weights = {t.name: t for t in float_model.graph.initializer}
    inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), [None] * value.ndim
        )
        for name, value in feed.items()
    ]
    graph = helper.make_graph(
        [node],
        "replay",
        inputs,
        [onnx.ValueInfoProto(name=node.output[0])],
        [weights[t] for t in node.input if t in weights],
    )
    model = helper.make_model(graph, opset_imports=list(float_model.opset_import))
    model.ir_version = float_model.ir_version
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _run(session: Any, batch: Mapping[str, Array]) -> dict[str, Array]:
    wanted = {i.name for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, {k: v for k, v in batch.items() if k in wanted})
    return dict(zip(names, values, strict=True))


def _measure(
    replay: _Replay,
    got: Mapping[str, Array],
    want: Mapping[str, Array],
    session: Callable[[Mapping[str, Array]], Any],
) -> None:
    replay.against_float.add(want[replay.float_output], got[replay.qdq_output])
    if not replay.replayable:
        return
    feed = {name: _apply(chain, got[source]) for name, (source, chain) in replay.inputs.items()}
    if replay.session is None:
        replay.session = session(feed)
    reference = _apply(replay.after, replay.session.run(None, feed)[0])
    replay.local.add(reference, got[replay.compared])


def _apply(chain: Sequence[Bounds], values: Array) -> Array:
    """The folded Relu/Clip ``chain`` applied to ``values``."""
    for low, high in chain:
        values = np.clip(values, low, high)
    return values
