"""The Python backend: ``model.py`` models, each instance in its own worker process.

Triton-style models (``TritonPythonModel`` + ``triton_python_backend_utils``) run unchanged; new
models can use the typed API in :mod:`inferd.backends.python.api`.

Two processes, two packages: :mod:`~inferd.backends.python.server` runs in the server and
:mod:`~inferd.backends.python.worker` in each worker process; neither imports the other. What
both use lives here: ``protocol`` (the messages), ``shm`` (the shared-memory arenas),
``lifetime`` and the public ``api``. ``PythonBackend`` is loaded on first use, so that a worker,
which imports this package too, does not import the server side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferd.backends.python.server.backend import PythonBackend

__all__ = ["PythonBackend"]


def __getattr__(name: str) -> Any:
    if name == "PythonBackend":
        from inferd.backends.python.server.backend import PythonBackend

        return PythonBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
