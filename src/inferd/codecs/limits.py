"""Bounds every codec applies to what a client names, whatever the wire (HTTP JSON, binary,
gRPC): a tensor's shape, a request id, a sequence id.

One function, one message: a shape or an id that HTTP refuses is refused the same way over gRPC.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferd.errors import InvalidArgumentError

MAX_DIMS = 32  # numpy's own limit is 64; no served model has more than a handful
# Bound on the product of the non-zero dims of a shape; stops absurd shapes such as
# [0, 2**62] (zero elements, but numpy cannot even describe it) before numpy sees them.
MAX_ELEMENTS = 1 << 40
# Bound on a request id or a string sequence (correlation) id, in UTF-8 bytes. Ids are echoed in
# answers and kept by features that remember requests (rollout feedback, ended sequences), so
# each kept id costs at most this much. tritonclient and perf_analyzer send integers as text,
# UUIDs (36) or trace ids (32); 256 leaves room for a prefix and a UUID.
MAX_ID_BYTES = 256


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


def check_id(value: str, what: str) -> str:
    """Return ``value``, an id a client chose, if it has at most :data:`MAX_ID_BYTES` bytes in
    UTF-8; ``what`` names it in the refusal, e.g. ``"inference request 'id'"``."""
    if len(value) * 4 <= MAX_ID_BYTES:  # a character takes at most 4 bytes: nothing to count
        return value
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_ID_BYTES:
        raise InvalidArgumentError(
            f"{what} is {size} bytes long; at most {MAX_ID_BYTES} bytes are allowed"
        )
    return value


__all__ = ["MAX_DIMS", "MAX_ELEMENTS", "MAX_ID_BYTES", "check_id", "check_shape"]
