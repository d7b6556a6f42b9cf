"""An ONNX graph of dense-network operators as a torch module, and its weights written back.

Libraries that change a network's structure or weights (Torch-Pruning, ``torch.nn.utils.prune``,
an optimizer for fine-tuning) work on torch modules. :func:`to_torch` turns an ONNX graph of
the operators MLPs and CNNs are made of into one: ``Gemm`` and ``MatMul`` with a constant weight
become ``nn.Linear`` (a following ``Add`` of a constant bias is folded in), ``Conv`` becomes
``nn.Conv1d``/``2d``/``3d`` and ``BatchNormalization`` ``nn.BatchNormNd``, so a dependency graph
sees real layers; activations, pooling, ``Flatten``, ``Reshape`` with a constant shape,
element-wise arithmetic, ``Concat``, ``Transpose``, ``Squeeze``/``Unsqueeze`` and ``Softmax``
run as torch functions. Any other operator is refused by name (:class:`UnsupportedError`).

:meth:`GraphModule.write_back` puts the (fine-tuned) weights into the original ONNX model in
their original layout, so a change of weights keeps the graph exactly as it was.

This module imports torch when it is imported: the builders import it only once they know torch
is installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper
from torch import nn

from inferd.errors import UnsupportedError
from inferd.tools.optimize.torch_ops import FUNCTIONS, run_op

__all__ = ["SUPPORTED_OPS", "GraphModule", "ParamSource", "to_torch"]

#: The ONNX operators :func:`to_torch` converts.
SUPPORTED_OPS = frozenset(FUNCTIONS | {"Conv", "BatchNormalization", "Constant"})


@dataclass(frozen=True)
class ParamSource:
    """Where a module parameter came from: an initializer, transposed or scaled on the way."""

    initializer: str
    transpose: bool = False
    scale: float = 1.0


@dataclass
class _Step:
    op: str
    inputs: list[str]
    outputs: list[str]
    layer: str | None = None  # key in GraphModule.layers
    attrs: dict[str, Any] = field(default_factory=dict)


class GraphModule(nn.Module):
    """Runs the converted graph: ``forward(*inputs)`` takes the graph inputs in order and returns
    its output (a tuple when there are several)."""

    def __init__(
        self,
        steps: list[_Step],
        layers: dict[str, torch.nn.Module],
        constants: dict[str, torch.Tensor],
        inputs: list[str],
        outputs: list[str],
        sources: dict[str, dict[str, ParamSource]],
    ) -> None:
        super().__init__()
        self.steps = steps
        self.layers = nn.ModuleDict(layers)
        self._constant_keys: dict[str, str] = {}
        for index, (name, value) in enumerate(constants.items()):
            key = f"c{index}"
            self.register_buffer(key, value)
            self._constant_keys[name] = key
        self.input_names = list(inputs)
        self.output_names = list(outputs)
        self.sources = sources

    def layer_of(self, tensor: str) -> str | None:
        """The key of the layer that produces ``tensor``, if a layer does."""
        for step in self.steps:
            if tensor in step.outputs:
                return step.layer
        return None

    def producer(self, tensor: str) -> _Step | None:
        return next((s for s in self.steps if tensor in s.outputs), None)

    def run(self, inputs: Sequence[torch.Tensor], wanted: Sequence[str]) -> list[torch.Tensor]:
        """The values of the tensors ``wanted`` (any tensor of the graph) for ``inputs``."""
        values: dict[str, torch.Tensor] = dict(zip(self.input_names, inputs, strict=True))
        for step in self.steps:
            args = [self._value(values, name) for name in step.inputs]
            if step.layer is not None:
                result = [self.layers[step.layer](args[0])]
            else:
                result = run_op(step.op, args, step.attrs)
            for name, value in zip(step.outputs, result, strict=False):
                values[name] = value
        return [self._value(values, name) for name in wanted]

    def forward(self, *inputs: torch.Tensor) -> Any:
        outputs = self.run(inputs, self.output_names)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _value(self, values: dict[str, torch.Tensor], name: str) -> Any:
        if name in values:
            return values[name]
        if name == "":  # an optional input left out
            return None
        return getattr(self, self._constant_keys[name])

    def parameter_sources(self) -> dict[str, ParamSource]:
        """``{module parameter name: its initializer}`` for every parameter of the layers."""
        return {
            f"layers.{key}.{param}": source
            for key, params in self.sources.items()
            for param, source in params.items()
        }

    def write_back(self, model: onnx.ModelProto) -> None:
        """Replace the initializers the layers came from with the layers' current weights
        (in the initializers' own layout). The layers must still have their original shapes."""
        current: dict[str, torch.Tensor] = dict(self.named_parameters())
        current.update(dict(self.named_buffers()))
        by_name = {init.name: init for init in model.graph.initializer}
        for param, source in self.parameter_sources().items():
            value = current[param].detach().cpu().numpy().astype(np.float32)
            if source.scale != 1.0:
                value = value / source.scale
            if source.transpose:
                value = value.T
            init = by_name[source.initializer]
            value = value.reshape(tuple(init.dims))
            init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(value), init.name))


# ---------------------------------------------------------------------------------------------
# conversion


class _Converter:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        unsupported = sorted(
            {n.op_type for n in self.graph.node if n.op_type not in SUPPORTED_OPS or n.domain}
        )
        if unsupported:
            raise UnsupportedError(
                "the graph has operators not converted to torch: " + ", ".join(unsupported)
            )
        opsets = {o.domain: o.version for o in model.opset_import}
        self.opset = opsets.get("", opsets.get("ai.onnx", 13))
        self.initializers = {i.name: numpy_helper.to_array(i) for i in self.graph.initializer}
        for node in self.graph.node:
            if node.op_type == "Constant":
                self.initializers[node.output[0]] = self._constant_value(node)
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.graph_outputs = {o.name for o in self.graph.output}
        self.shapes = _static_shapes(model)
        self.steps: list[_Step] = []
        self.layers: dict[str, Any] = {}
        self.sources: dict[str, dict[str, ParamSource]] = {}
        self.used_as_weight: set[str] = set()
        self.folded: set[int] = set()  # ids of Add nodes folded into a Linear

    @staticmethod
    def _constant_value(node: onnx.NodeProto) -> np.ndarray:
        for attr in node.attribute:
            if attr.name == "value":
                return np.asarray(numpy_helper.to_array(attr.t))
            if attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
                return np.asarray(helper.get_attribute_value(attr))
        raise UnsupportedError(f"Constant node '{node.name}' has a kind of value not converted")

    def attrs(self, node: onnx.NodeProto) -> dict[str, Any]:
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def const(self, name: str) -> np.ndarray | None:
        return self.initializers.get(name)

    def weight(self, name: str) -> np.ndarray:
        if name in self.used_as_weight or len(self.consumers.get(name, [])) > 1:
            raise UnsupportedError(f"weight '{name}' is shared by several nodes")
        self.used_as_weight.add(name)
        value = self.initializers[name]
        if value.dtype != np.float32:
            raise UnsupportedError(f"weight '{name}' is {value.dtype}, not float32")
        return value

    def convert(self) -> GraphModule:
        for index, node in enumerate(self.graph.node):
            if node.op_type == "Constant" or id(node) in self.folded:
                continue
            key = f"n{index}_{node.op_type.lower()}"
            if node.op_type in ("Gemm", "MatMul") and self._linear(node, key):
                continue
            if node.op_type == "Conv":
                self._conv(node, key)
            elif node.op_type == "BatchNormalization":
                self._batchnorm(node, key)
            else:
                self._function(node)
        constants = {
            name: torch.from_numpy(np.array(value, copy=True))
            for name, value in self.initializers.items()
            if name not in self.used_as_weight and value.dtype.kind == "f"
        }
        return GraphModule(
            self.steps,
            self.layers,
            constants,
            [i.name for i in self.graph.input if i.name not in self.initializers],
            [o.name for o in self.graph.output],
            self.sources,
        )

    def _linear(self, node: onnx.NodeProto, key: str) -> bool:
        attrs = self.attrs(node)
        b_name = node.input[1]
        b = self.const(b_name)
        if b is None or b.ndim != 2 or attrs.get("transA") or self.const(node.input[0]) is not None:
            return False
        transposed = node.op_type == "Gemm" and bool(attrs.get("transB"))
        alpha = float(attrs.get("alpha", 1.0))
        weight = self.weight(b_name)
        weight = weight if transposed else weight.T  # nn.Linear keeps [out, in]
        out_features, in_features = weight.shape
        sources = {"weight": ParamSource(b_name, transpose=not transposed, scale=alpha)}
        bias, bias_name, beta = self._bias(node, out_features, attrs)
        layer = nn.Linear(in_features, out_features, bias=bias is not None)
        _set(layer.weight, weight * alpha)
        if bias is not None and bias_name is not None:
            _set(layer.bias, bias * beta)
            sources["bias"] = ParamSource(bias_name, scale=beta)
        output = node.output[0]
        if node.op_type == "MatMul" and bias is not None:
            add = self.consumers[output][0]
            self.folded.add(id(add))
            output = add.output[0]
        self.layers[key] = layer
        self.sources[key] = sources
        self.steps.append(_Step(node.op_type, [node.input[0]], [output], layer=key))
        return True

    def _bias(
        self, node: onnx.NodeProto, size: int, attrs: dict[str, Any]
    ) -> tuple[np.ndarray | None, str | None, float]:
        if node.op_type == "Gemm":
            if len(node.input) < 3 or not node.input[2]:
                return None, None, 1.0
            c = self.const(node.input[2])
            if c is None or c.size != size:
                raise UnsupportedError(f"Gemm '{node.name}' has a bias that is not one per output")
            return (
                self.weight(node.input[2]).reshape(size),
                node.input[2],
                float(attrs.get("beta", 1.0)),
            )
        after = self.consumers.get(node.output[0], [])
        if len(after) != 1 or after[0].op_type != "Add" or node.output[0] in self.graph_outputs:
            return None, None, 1.0
        other = [n for n in after[0].input if n != node.output[0]]
        c = self.const(other[0]) if len(other) == 1 else None
        if c is None or c.size != size or c.ndim > 2 or len(self.consumers[other[0]]) > 1:
            return None, None, 1.0
        return self.weight(other[0]).reshape(size), other[0], 1.0

    def _conv(self, node: onnx.NodeProto, key: str) -> None:
        attrs = self.attrs(node)
        if self.const(node.input[1]) is None:
            raise UnsupportedError(f"Conv '{node.name}' has a weight that is not a constant")
        weight = self.weight(node.input[1])
        dims = weight.ndim - 2
        pads = list(attrs.get("pads", [0] * (2 * dims)))
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
            raise UnsupportedError(f"Conv '{node.name}' uses auto_pad SAME")
        if pads[:dims] != pads[dims:]:
            raise UnsupportedError(f"Conv '{node.name}' pads its sides unevenly")
        groups = int(attrs.get("group", 1))
        has_bias = len(node.input) > 2 and bool(node.input[2])
        conv_type: Any = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
        layer = conv_type(
            weight.shape[1] * groups,
            weight.shape[0],
            tuple(weight.shape[2:]),
            stride=tuple(attrs.get("strides", [1] * dims)),
            padding=tuple(pads[:dims]),
            dilation=tuple(attrs.get("dilations", [1] * dims)),
            groups=groups,
            bias=has_bias,
        )
        _set(layer.weight, weight)
        sources = {"weight": ParamSource(node.input[1])}
        if has_bias:
            _set(layer.bias, self.weight(node.input[2]))
            sources["bias"] = ParamSource(node.input[2])
        self.layers[key] = layer
        self.sources[key] = sources
        self.steps.append(_Step("Conv", [node.input[0]], [node.output[0]], layer=key))

    def _batchnorm(self, node: onnx.NodeProto, key: str) -> None:
        attrs = self.attrs(node)
        names = list(node.input[1:5])
        if any(self.const(n) is None for n in names):
            raise UnsupportedError(f"BatchNormalization '{node.name}' has non-constant statistics")
        scale, bias, mean, var = (self.weight(n) for n in names)
        layer = nn.BatchNorm2d(scale.shape[0], eps=float(attrs.get("epsilon", 1e-5)))
        _set(layer.weight, scale)
        _set(layer.bias, bias)
        _set(layer.running_mean, mean)
        _set(layer.running_var, var)
        layer.eval()
        self.layers[key] = layer
        self.sources[key] = {
            param: ParamSource(name)
            for param, name in zip(
                ("weight", "bias", "running_mean", "running_var"), names, strict=True
            )
        }
        self.steps.append(_Step("BatchNormalization", [node.input[0]], [node.output[0]], key))

    def _function(self, node: onnx.NodeProto) -> None:
        attrs = self.attrs(node)
        inputs = list(node.input)
        op = node.op_type
        if op == "Reshape":
            attrs["shape"] = self._int_input(node, 1)
            inputs = inputs[:1]
            if self._flattens(inputs[0], attrs["shape"]):
                op, attrs = "Flatten", {"axis": 1}
        elif op in ("Unsqueeze", "Squeeze") and len(inputs) > 1:
            attrs["axes"] = self._int_input(node, 1)
            inputs = inputs[:1]
        elif op == "Clip" and len(inputs) > 1:
            for position, bound in ((1, "min"), (2, "max")):
                if len(inputs) > position and inputs[position]:
                    value = self.const(inputs[position])
                    if value is None:
                        raise UnsupportedError(f"Clip '{node.name}' has a non-constant bound")
                    attrs[bound] = float(value)
            inputs = inputs[:1]
        elif op in ("Softmax", "LogSoftmax") and self.opset < 13:
            attrs["legacy"] = True
            attrs.setdefault("axis", 1)
        if op == "Dropout":
            inputs = inputs[:1]
        self.steps.append(_Step(op, inputs, list(node.output)[:1], attrs=attrs))

    def _flattens(self, tensor: str, shape: list[int]) -> bool:
        """Whether a Reshape to ``shape`` flattens ``tensor`` to [batch, features], so a layer
        before it may lose channels and the Reshape still fits (as Flatten does)."""
        dims = self.shapes.get(tensor)
        if len(shape) != 2 or shape[0] not in (0, -1) or not dims or len(dims) < 3:
            return False
        features = dims[1:]
        return all(d > 0 for d in features) and shape[1] in (-1, int(np.prod(features)))

    def _int_input(self, node: onnx.NodeProto, position: int) -> list[int]:
        value = self.const(node.input[position])
        if value is None:
            raise UnsupportedError(
                f"{node.op_type} '{node.name}' takes its {position}th input from the graph, "
                "not a constant"
            )
        return [int(v) for v in np.asarray(value).reshape(-1)]


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Each tensor's dims as shape inference finds them (0 where a dim is not fixed)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a graph shape inference cannot follow: no shapes, no flatten rewrite
        return {}
    shapes: dict[str, list[int]] = {}
    for info in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        tensor_type = info.type.tensor_type
        if tensor_type.HasField("shape"):
            shapes[info.name] = [d.dim_value for d in tensor_type.shape.dim]
    return shapes


def _set(param: Any, value: np.ndarray) -> None:
    with torch.no_grad():
        param.copy_(torch.from_numpy(np.array(value, dtype=np.float32)))


def to_torch(model: onnx.ModelProto) -> GraphModule:
    """The torch module that computes ``model`` (see the module's docstring for the operators).

    Raises :class:`UnsupportedError` naming what is not converted.
    """
    converter = _Converter(model)
    for tensor in model.graph.input:
        if tensor.type.tensor_type.elem_type != 1 and tensor.name not in converter.initializers:
            raise UnsupportedError(f"input '{tensor.name}' is not float32")
    module = converter.convert()
    module.eval()
    return module
