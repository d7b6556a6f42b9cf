"""Bounds every codec applies to a tensor's shape, whatever the wire (HTTP JSON, binary, gRPC).

One function, one message: a shape that HTTP refuses is refused the same way over gRPC.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferd.errors import InvalidArgumentError

MAX_DIMS = 32  # numpy's own limit is 64; no served model has more than a handful
# Bound on the product of the non-zero dims of a shape; stops absurd shapes such as
# [0, 2**62] (zero elements, but numpy cannot even describe it) before numpy sees them.
MAX_ELEMENTS = 1 << 40


def check_shape(dims: Sequence[object], what: str) -> tuple[int, ...]:
    """Validate a shape received from a client; return it as a tuple of ints.

    ``what`` names the tensor, e.g. ``"input 'x'"``. Every dim must be a non-negative integer
    (``bool`` is not one), at most :data:`MAX_DIMS` dims, and at most :data:`MAX_ELEMENTS`
    elements counting only non-zero dims.
    """
    if len(dims) > MAX_DIMS:
        raise InvalidArgumentError(
            f"shape of {what} has {len(dims)} dimensions; at most {MAX_DIMS} are allowed"
        )
    nonzero = 1
    for dim in dims:
        if type(dim) is not int or dim < 0:
            raise InvalidArgumentError(
                f"shape of {what} must be a list of non-negative integers, got {list(dims)}"
            )
        if dim:
            nonzero *= dim
            if nonzero > MAX_ELEMENTS:
                raise InvalidArgumentError(
                    f"shape {list(dims)} of {what} is too large (more than {MAX_ELEMENTS} elements)"
                )
    return tuple(dims)  # type: ignore[arg-type]


__all__ = ["MAX_DIMS", "MAX_ELEMENTS", "check_shape"]
