"""Model load and unload parameters (PROTOCOL.md §1.6), checked once for every front end.

Each front end turns its wire form into plain values first: HTTP's JSON ``parameters`` object as
it is, gRPC's ``ModelRepositoryParameter`` oneofs as ``bool`` / ``int`` / ``str`` / ``bytes``.
File contents arrive as base64 text over HTTP and as bytes over gRPC; that is the only
difference the checks know of.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from inferd.errors import InvalidArgumentError

FILE_PREFIX = "file:"
UNLOAD_DEPENDENTS = "unload_dependents"

FileEncoding = Literal["base64", "bytes"]


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """What a load request asks for: a config override (JSON text) and files by relative path."""

    config_json: str | None = None
    files: dict[str, bytes] | None = None


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bytes):
        return "bytes"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


def decode_load_parameters(params: Mapping[str, object], *, files_as: FileEncoding) -> LoadRequest:
    """The load request's parameters, each checked; unknown names are refused by name."""
    config_json: str | None = None
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if key == "config":
            if not isinstance(value, str):
                raise InvalidArgumentError(
                    "load parameter 'config' must be a string holding the model configuration "
                    f"as JSON, got {_kind(value)}"
                )
            config_json = value
        elif key.startswith(FILE_PREFIX):
            files[key[len(FILE_PREFIX) :]] = _file_contents(key, value, files_as)
        else:
            raise InvalidArgumentError(
                f"unknown load parameter '{key}': expected 'config' or 'file:<version>/<path>'"
            )
    return LoadRequest(config_json, files or None)


def _file_contents(key: str, value: object, files_as: FileEncoding) -> bytes:
    if files_as == "bytes":
        if not isinstance(value, bytes):
            raise InvalidArgumentError(
                f"load parameter '{key}' must hold the file's bytes, got {_kind(value)}"
            )
        return value
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"load parameter '{key}' must be the file's contents as a base64 string, "
            f"got {_kind(value)}"
        )
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidArgumentError(f"load parameter '{key}' is not valid base64: {exc}") from None


def decode_unload_parameters(params: Mapping[str, object]) -> bool:
    """``unload_dependents`` (default false); any other name is refused."""
    unknown = sorted(set(params) - {UNLOAD_DEPENDENTS})
    if unknown:
        raise InvalidArgumentError(
            f"unknown unload parameter '{unknown[0]}': expected '{UNLOAD_DEPENDENTS}'"
        )
    value = params.get(UNLOAD_DEPENDENTS, False)
    if not isinstance(value, bool):
        raise InvalidArgumentError(
            f"unload parameter '{UNLOAD_DEPENDENTS}' must be a boolean, got {_kind(value)}"
        )
    return value


def decode_rollback_body(body: Mapping[str, object]) -> int | None:
    """The version a rollback request names (``{"version": N}``; a number or its digits as a
    string), or None for the highest version below the default one; other keys are refused."""
    unknown = sorted(set(body) - {"version"})
    if unknown:
        raise InvalidArgumentError(f"unknown rollback field '{unknown[0]}': expected 'version'")
    value = body.get("version")
    if value is None:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(
            f"rollback field 'version' must be a version number (1 or more), got {_kind(value)}"
            if not isinstance(value, int) or isinstance(value, bool)
            else f"rollback field 'version' must be 1 or more, got {value}"
        )
    return value


def check_unpin_body(body: Mapping[str, object]) -> None:
    """An unpin request takes no fields."""
    if body:
        raise InvalidArgumentError(
            f"unknown unpin field '{sorted(body)[0]}': an unpin request takes no fields"
        )


__all__ = [
    "FILE_PREFIX",
    "UNLOAD_DEPENDENTS",
    "FileEncoding",
    "LoadRequest",
    "check_unpin_body",
    "decode_load_parameters",
    "decode_rollback_body",
    "decode_unload_parameters",
]
