"""Rules of an inference request that hold whatever the wire, with one message each.

The HTTP and gRPC codecs decode differently but refuse the same mistakes in the same words.
"""

from __future__ import annotations

from inferd.errors import InvalidArgumentError


def duplicate_input(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"input '{name}' appears more than once in the request")


def duplicate_output(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"output '{name}' is requested more than once")


def classification_count(output: str, value: object) -> int:
    """The ``classification`` parameter of a requested output: how many top classes to return;
    0 returns the tensor itself, as when the parameter is absent."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"'classification' of output '{output}' must be a non-negative integer, got {value!r}"
        )
    return value


__all__ = ["classification_count", "duplicate_input", "duplicate_output"]
