"""Commands whose libraries come with an extra check for them before any work starts, so a
missing one is one line naming the ``pip install`` to run instead of a traceback mid-run."""

from __future__ import annotations

import importlib.util

__all__ = ["missing_extra"]


def missing_extra(extra: str, modules: tuple[str, ...]) -> str | None:
    """None when every module of ``modules`` is importable, else the message to print."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return f"needs {', '.join(missing)}: pip install 'inferd[{extra}]'"
