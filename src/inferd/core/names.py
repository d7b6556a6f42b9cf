"""The rule for model names that arrive from the network.

A model name selects a directory of the model repository, so a name must never be able to
address anything else: no path separators, no ``.`` or ``..``, no control characters, no
surrounding whitespace, and a bound on its length. The check runs on every request that names
a model, so common names take one precompiled match; only unusual names pay for the detailed
checks that produce a precise message.
"""

from __future__ import annotations

import re

from inferd.errors import InvalidArgumentError

MAX_MODEL_NAME_BYTES = 255

# Names made only of these characters, starting with a letter, digit or underscore, and at most
# MAX_MODEL_NAME_BYTES long (ASCII, so characters are bytes) satisfy every rule below.
_PLAIN_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.\-]{{0,{MAX_MODEL_NAME_BYTES - 1}}}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _invalid(name: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"invalid model name {name!r}: {why}")


def check_model_name(name: str) -> str:
    """Return ``name`` if it is a valid model name; raise :class:`InvalidArgumentError` if not."""
    if _PLAIN_NAME.fullmatch(name) is not None:
        return name
    if not name:
        raise _invalid(name, "must not be empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise _invalid(name, "is not valid UTF-8 text") from None
    if size > MAX_MODEL_NAME_BYTES:
        raise _invalid(name, f"is {size} bytes long in UTF-8, at most {MAX_MODEL_NAME_BYTES}")
    if "/" in name or "\\" in name:
        raise _invalid(name, "must not contain '/' or '\\'")
    if name in (".", ".."):
        raise _invalid(name, "must not be '.' or '..'")
    control = _CONTROL.search(name)
    if control is not None:
        raise _invalid(
            name, f"must not contain control characters (found U+{ord(control.group()):04X})"
        )
    if name[0].isspace() or name[-1].isspace():
        raise _invalid(name, "must not begin or end with whitespace")
    return name


__all__ = ["MAX_MODEL_NAME_BYTES", "check_model_name"]
