"""ONNX operators without weights of their own, run as torch functions with ONNX's semantics
(Reshape's 0 and -1, Flatten's axis, pooling pads, Softmax before opset 13...). Used by
:mod:`inferd.tools.optimize.torch_graph`; imports torch when imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.nn import functional

from inferd.errors import UnsupportedError

__all__ = ["FUNCTIONS", "run_op"]

#: the ONNX operators run as torch functions (no parameters of their own)
FUNCTIONS = {
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Softmax", "LogSoftmax", "Identity",
    "Dropout", "Flatten", "Reshape", "Add", "Sub", "Mul", "Div", "Pow", "MatMul", "Gemm",
    "Transpose", "Unsqueeze", "Squeeze", "Concat", "MaxPool", "AveragePool",
    "GlobalAveragePool", "GlobalMaxPool", "Clip", "Sqrt", "Neg", "Exp",
}  # fmt: skip


def _onnx_reshape(x: torch.Tensor, shape: list[int], allowzero: int) -> torch.Tensor:
    if not allowzero:
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def _flatten(x: torch.Tensor, axis: int) -> torch.Tensor:
    if axis == 1:
        return torch.flatten(x, 1)
    axis = axis % x.dim() if axis else 0
    if axis == 0:
        return x.reshape(1, -1)
    return x.reshape(int(np.prod(x.shape[:axis])), -1)


def _pool(op: str, x: torch.Tensor, attrs: dict[str, Any]) -> torch.Tensor:
    dims = x.dim() - 2
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * dims)
    pads = attrs.get("pads", [0] * (2 * dims))
    if op == "MaxPool":
        pool = {1: functional.max_pool1d, 2: functional.max_pool2d, 3: functional.max_pool3d}
        return pool[dims](
            x,
            kernel,
            strides,
            pads[:dims],
            dilation=attrs.get("dilations", [1] * dims),
            ceil_mode=bool(attrs.get("ceil_mode", 0)),
        )
    avg = {1: functional.avg_pool1d, 2: functional.avg_pool2d, 3: functional.avg_pool3d}
    return avg[dims](
        x,
        kernel,
        strides,
        pads[:dims],
        ceil_mode=bool(attrs.get("ceil_mode", 0)),
        count_include_pad=bool(attrs.get("count_include_pad", 0)),
    )


def _softmax(fn: Callable[..., Any], x: torch.Tensor, attrs: dict[str, Any]) -> Any:
    axis = int(attrs.get("axis", -1))
    if attrs.get("legacy") and axis % x.dim() != x.dim() - 1:
        raise UnsupportedError("Softmax before opset 13 is converted only along the last axis")
    return fn(x, dim=axis)


def _gemm(args: list[Any], attrs: dict[str, Any]) -> Any:
    a, b = args[0], args[1]
    if attrs.get("transA"):
        a = a.transpose(0, 1)
    if attrs.get("transB"):
        b = b.transpose(0, 1)
    out = (a @ b) * float(attrs.get("alpha", 1.0))
    if len(args) > 2 and args[2] is not None:
        out = out + args[2] * float(attrs.get("beta", 1.0))
    return out


def run_op(op: str, args: list[Any], attrs: dict[str, Any]) -> list[Any]:
    x: Any = args[0] if args else None
    simple: dict[str, Callable[[], Any]] = {
        "Relu": lambda: functional.relu(x),
        "LeakyRelu": lambda: functional.leaky_relu(x, float(attrs.get("alpha", 0.01))),
        "Sigmoid": lambda: torch.sigmoid(x),
        "Tanh": lambda: torch.tanh(x),
        "Erf": lambda: torch.erf(x),
        "Sqrt": lambda: torch.sqrt(x),
        "Exp": lambda: torch.exp(x),
        "Neg": lambda: -x,
        "Identity": lambda: x,
        "Dropout": lambda: x,
        "Softmax": lambda: _softmax(torch.softmax, x, attrs),
        "LogSoftmax": lambda: _softmax(torch.log_softmax, x, attrs),
        "Flatten": lambda: _flatten(x, int(attrs.get("axis", 1))),
        "Reshape": lambda: _onnx_reshape(x, attrs["shape"], int(attrs.get("allowzero", 0))),
        "Add": lambda: x + args[1],
        "Sub": lambda: x - args[1],
        "Mul": lambda: x * args[1],
        "Div": lambda: x / args[1],
        "Pow": lambda: torch.pow(x, args[1]),
        "MatMul": lambda: torch.matmul(x, args[1]),
        "Gemm": lambda: _gemm(args, attrs),
        "Transpose": lambda: x.permute(attrs.get("perm") or list(range(x.dim()))[::-1]),
        "Unsqueeze": lambda: _unsqueeze(x, attrs["axes"]),
        "Squeeze": lambda: _squeeze(x, attrs.get("axes")),
        "Concat": lambda: torch.cat(list(args), dim=int(attrs["axis"])),
        "MaxPool": lambda: _pool(op, x, attrs),
        "AveragePool": lambda: _pool(op, x, attrs),
        "GlobalAveragePool": lambda: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
        "GlobalMaxPool": lambda: x.amax(dim=tuple(range(2, x.dim())), keepdim=True),
        "Clip": lambda: torch.clamp(x, attrs.get("min"), attrs.get("max")),
    }
    return [simple[op]()]


def _unsqueeze(x: torch.Tensor, axes: list[int]) -> torch.Tensor:
    rank = x.dim() + len(axes)
    for axis in sorted(a % rank for a in axes):
        x = x.unsqueeze(axis)
    return x


def _squeeze(x: torch.Tensor, axes: list[int] | None) -> torch.Tensor:
    if axes is None:
        return x.squeeze()
    for axis in sorted((a % x.dim() for a in axes), reverse=True):
        x = x.squeeze(axis)
    return x
