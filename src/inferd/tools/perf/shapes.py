"""A load test's input shapes: which shape each input's samples have, checked against the model.

Used by the generated data (:mod:`inferd.tools.perf.inputs`) and the data files
(:mod:`inferd.tools.perf.input_files`) alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from inferd.core.datatypes import DataType, from_name
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.transport import TensorInfo

Shapes = Mapping[str, tuple[int, ...]]


def fits(tensor: TensorInfo, shape: Sequence[int]) -> bool:
    """Whether ``shape`` is one of the shapes ``tensor`` allows (same rank, fixed dims equal)."""
    return len(shape) == len(tensor.shape) and all(
        want in (-1, got) for want, got in zip(tensor.shape, shape, strict=True)
    )


def resolve_shape(
    tensor: TensorInfo, shapes: Shapes, given: Sequence[int] | None = None
) -> tuple[int, ...]:
    """One sample's shape: ``given`` (by a data file), else ``--shape``, else the model's.

    A variable dimension left over is an error naming the input and the ``--shape`` flag.
    """
    if given is not None:
        shape, source = tuple(int(d) for d in given), "the input data"
    elif tensor.name in shapes:
        shape, source = tuple(shapes[tensor.name]), "--shape"
    else:
        shape, source = tensor.shape, ""
    if not source:
        if any(d < 0 for d in shape):
            raise InvalidArgumentError(
                f"input '{tensor.name}' has variable dimensions {list(tensor.shape)}: give the "
                f"shape to send with --shape {tensor.name}:"
                + ",".join("D" if d < 0 else str(d) for d in tensor.shape)
            )
        return shape
    if not fits(tensor, shape):
        raise InvalidArgumentError(
            f"{source} gives input '{tensor.name}' the shape {list(shape)}, which does not fit "
            f"the model's {list(tensor.shape)}"
        )
    return shape


def numpy_dtype(tensor: TensorInfo) -> DataType:
    """The datatype entry of a tensor (an unknown datatype is a clear error)."""
    return from_name(tensor.datatype)
