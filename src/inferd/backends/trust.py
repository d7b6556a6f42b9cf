"""Model parameters that widen what a backend's loader trusts: the one list.

Such a parameter makes a loader accept more than its safe default (types a skops file may
build, a shared library to load, a directory of compiled blobs to read and write). It may come
only from the operator's model repository on disk, never from a client's load request (the
repository refuses a ``config`` override that sets one, see ``repository/trust.py``).

Each backend declares its own entry here, by backend name, and reads its names from it, so the
list and the backends cannot drift apart; a new parameter of this kind is added here first. The
entries are plain data: checking a request needs no runtime imported. Keys are compared
case-insensitively (some backends read their keys that way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: backend name -> the parameters of that backend that widen what its loader trusts
TRUSTING_PARAMETERS: Mapping[str, tuple[str, ...]] = {
    # types a skops file may build beyond skops' own safe set (a function type is code)
    "sklearn": ("skops_trusted_types",),
    # a custom-layer shared library; a directory OpenVINO reads compiled blobs from and writes to
    "openvino": ("CPU_EXTENSION_PATH", "CACHE_DIR"),
}

#: Parts of a parameter name that read as a trust switch of a backend not listed above (a
#: plugin's library path, a pickle switch): refused from clients too, as they cannot be told
#: apart from one.
TRUSTING_NAME_PARTS = ("trusted", "pickle", "librar", "plugin", "custom_op", "extension_path")

_LISTED = frozenset(name.lower() for names in TRUSTING_PARAMETERS.values() for name in names)


def trusting_parameters(keys: Iterable[str]) -> list[str]:
    """The keys of ``keys`` that widen what some loader trusts, sorted."""
    found = []
    for key in keys:
        lowered = key.lower()
        if lowered in _LISTED or any(part in lowered for part in TRUSTING_NAME_PARTS):
            found.append(key)
    return sorted(found)


__all__ = ["TRUSTING_NAME_PARTS", "TRUSTING_PARAMETERS", "trusting_parameters"]
