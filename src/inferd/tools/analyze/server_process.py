"""The ``inferd serve`` the analyzer starts for itself: a child process in explicit
model-control mode over the repository, with the models analyzed loaded, on ports the system
picks (see :mod:`inferd.tools.serve_process`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from inferd.tools.serve_process import ServerProcess, ServerStartError, start_server

__all__ = ["ServerProcess", "ServerStartError", "start_analyzed_server"]


def start_analyzed_server(
    repository: Path,
    models: Sequence[str],
    extra_args: Sequence[str] = (),
    *,
    startup_timeout_s: float = 120.0,
) -> ServerProcess:
    """Start ``inferd serve`` over ``repository`` in explicit mode with ``models`` loaded."""
    args = ["--model-control-mode", "explicit"]
    for model in models:
        args += ["--load-model", model]
    return start_server(
        [repository],
        [*args, *extra_args],
        startup_timeout_s=startup_timeout_s,
        log_prefix="inferd-analyze-",
    )
