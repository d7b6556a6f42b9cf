"""Whether an ONNX graph is a transformer encoder, and its attention heads and hidden size.

Pure functions of the graph (an ``onnx.ModelProto``), so that the transformer fusions are only
tried where they apply and are told the shape ONNX Runtime's own detection often misses in
exported graphs (it reports "Failed to detect num_heads and hidden_size" and then fuses no
attention at all).

A self-attention block is a ``Softmax`` fed, through element-wise ops (scale, mask), by a
``MatMul`` of two activations (Q·Kᵀ) and feeding a ``MatMul`` with another activation (·V);
graphs already fused by ONNX Runtime count their ``Attention`` / ``MultiHeadAttention`` nodes.
The hidden size is the width of the layer norms (or of the Q projection); the head count is
the next-to-last entry of the ``[batch, sequence, heads, head_size]`` reshapes that split it
(or the hidden size over the last entry, where the head count is left to the reshape: ``-1``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EncoderShape", "find_encoder"]

_FUSED_ATTENTION = {"Attention", "MultiHeadAttention"}
# ops that may sit between Q·Kᵀ and the Softmax (scale, mask), or after it (dropout, casts)
_PASS_THROUGH = {"Add", "Mul", "Div", "Sub", "Where", "Cast", "Dropout", "Identity", "Max"}
_LAYER_NORMS = {"LayerNormalization", "SkipLayerNormalization", "EmbedLayerNormalization"}
_SEARCH_DEPTH = 4


@dataclass(frozen=True)
class EncoderShape:
    """What the transformer fusions need to know; 0 means "not found, let the optimizer look"."""

    attention_blocks: int
    num_heads: int = 0
    hidden_size: int = 0


class _Graph:
    def __init__(self, model: Any) -> None:
        graph = model.graph
        self.nodes = list(graph.node)
        self.initializers: dict[str, Any] = {i.name: i for i in graph.initializer}
        self.producer: dict[str, Any] = {}
        self.consumers: dict[str, list[Any]] = {}
        for node in self.nodes:
            for out in node.output:
                self.producer[out] = node
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def is_constant(self, name: str) -> bool:
        if name in self.initializers:
            return True
        node = self.producer.get(name)
        if node is None:
            return False
        if node.op_type == "Constant":
            return True
        # a weight cast or transposed in the graph is still a weight
        return node.op_type in ("Cast", "Transpose", "Identity", "DequantizeLinear") and all(
            self.is_constant(i) for i in node.input if i
        )

    def constant(self, name: str) -> np.ndarray[Any, Any] | None:
        from onnx import numpy_helper

        if name in self.initializers:
            array: np.ndarray[Any, Any] = numpy_helper.to_array(self.initializers[name])
            return array
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    value: np.ndarray[Any, Any] = numpy_helper.to_array(attr.t)
                    return value
                if attr.name == "value_ints":
                    return np.array(list(attr.ints), dtype=np.int64)
                if attr.name == "value_int":
                    return np.array(attr.i, dtype=np.int64)
        return None

    def shape_entries(self, name: str) -> list[int | None] | None:
        """The entries of a 1-D shape tensor, each known (a constant) or ``None``."""
        value = self.constant(name)
        if value is not None:
            return [int(v) for v in value.reshape(-1)]
        node = self.producer.get(name)
        if node is None:
            return None
        if node.op_type == "Unsqueeze":
            inner = self.constant(node.input[0])
            return [int(v) for v in inner.reshape(-1)] if inner is not None else [None]
        if node.op_type == "Concat":
            entries: list[int | None] = []
            for part in node.input:
                found = self.shape_entries(part)
                entries += found if found is not None else [None]
            return entries
        return None


def _activation_matmul(g: _Graph, name: str, depth: int) -> bool:
    """Whether ``name`` comes, through element-wise ops, from a MatMul of two activations."""
    node = g.producer.get(name)
    if node is None or depth < 0:
        return False
    if node.op_type == "MatMul":
        return not any(g.is_constant(i) for i in node.input)
    if node.op_type in _PASS_THROUGH:
        return any(
            _activation_matmul(g, i, depth - 1) for i in node.input if i and not g.is_constant(i)
        )
    return False


def _feeds_value_matmul(g: _Graph, name: str, depth: int) -> bool:
    """Whether ``name`` flows, through element-wise ops, into a MatMul with an activation."""
    if depth < 0:
        return False
    for node in g.consumers.get(name, []):
        if node.op_type == "MatMul" and not any(g.is_constant(i) for i in node.input):
            return True
        if node.op_type in _PASS_THROUGH and any(
            _feeds_value_matmul(g, out, depth - 1) for out in node.output
        ):
            return True
    return False


def _most_common(values: Iterable[int]) -> int:
    counted = Counter(v for v in values if v > 0).most_common(1)
    return counted[0][0] if counted else 0


def _hidden_size(g: _Graph) -> int:
    widths = []
    for node in g.nodes:
        if node.op_type in _LAYER_NORMS:
            # LayerNormalization(x, scale, bias); Skip...(x, skip, gamma); Embed...(.., gamma at 5)
            index = {"LayerNormalization": 1, "SkipLayerNormalization": 2}.get(node.op_type, 5)
            if len(node.input) > index:
                scale = g.constant(node.input[index])
                if scale is not None and scale.ndim == 1:
                    widths.append(int(scale.shape[0]))
    return _most_common(widths)


def _head_split(g: _Graph, hidden: int) -> tuple[int, int]:
    """(heads, hidden) from the ``[batch, sequence, heads, head_size]`` reshapes."""
    splits = []
    for node in g.nodes:
        if node.op_type != "Reshape" or len(node.input) < 2:
            continue
        entries = g.shape_entries(node.input[1])
        if entries is None or len(entries) != 4:
            continue
        heads, size = entries[2], entries[3]
        if heads == -1 and size and size > 0 and hidden and hidden % size == 0:
            heads = hidden // size  # view(batch, sequence, -1, head_size)
        if heads is None or size is None or heads <= 0 or size <= 0:
            continue
        if hidden and heads * size != hidden:
            continue
        splits.append((heads, size))
    if not splits:
        return 0, hidden
    (heads, size), _ = Counter(splits).most_common(1)[0]
    return heads, hidden or heads * size


def _fused_heads(g: _Graph) -> int:
    for node in g.nodes:
        if node.op_type in _FUSED_ATTENTION:
            for attr in node.attribute:
                if attr.name == "num_heads":
                    return int(attr.i)
    return 0


def find_encoder(model: Any) -> EncoderShape | None:
    """The graph's self-attention blocks and their shape, or ``None`` when it has none."""
    g = _Graph(model)
    fused = sum(1 for n in g.nodes if n.op_type in _FUSED_ATTENTION)
    blocks = sum(
        1
        for node in g.nodes
        if node.op_type == "Softmax"
        and _activation_matmul(g, node.input[0], _SEARCH_DEPTH)
        and _feeds_value_matmul(g, node.output[0], _SEARCH_DEPTH)
    )
    if fused + blocks == 0:
        return None
    hidden = _hidden_size(g)
    heads, hidden = _head_split(g, hidden)
    return EncoderShape(fused + blocks, heads or _fused_heads(g), hidden)
