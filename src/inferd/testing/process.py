"""Start ``inferd serve`` as a child process on ports it picks and reports (no port races).

The process handling lives in :mod:`inferd.tools.serve_process` (the tools that start a server
of their own use it too); this module adds :func:`running_server` for tests.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from inferd.tools.serve_process import READY_MARKER, ServerProcess, ServerStartError, start_server

__all__ = ["READY_MARKER", "ServerProcess", "ServerStartError", "running_server", "start_server"]


@contextmanager
def running_server(
    repositories: Sequence[str | Path], args: Sequence[str] = (), **kwargs: object
) -> Iterator[ServerProcess]:
    """:func:`start_server` as a context manager. Its working folder (the server's log) is
    removed after a clean exit and kept, for reading, when the body raised."""
    kwargs.setdefault("log_prefix", "inferd-test-")
    server = start_server(repositories, args, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
    shutil.rmtree(server.log_path.parent, ignore_errors=True)
