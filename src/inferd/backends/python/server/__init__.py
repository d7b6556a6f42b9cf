"""The server side of the Python backend: what runs in the inference server's process.

The backend (``backend.py``) loads a model and starts its worker processes (``launcher.py``,
``worker_handle.py``); each instance (``instance.py``) sends requests to its worker and collects
the responses (``exchange.py``, ``stream_pump.py``), with tensors in shared memory
(``transfer.py``). It shares only the wire protocol and the shared-memory helpers
(``inferd.backends.python.protocol``, ``shm``) with the worker side, which it starts as a
separate process (``python -m inferd.backends.python.worker``) and never imports.
"""

from inferd.backends.python.server.backend import PythonBackend

__all__ = ["PythonBackend"]
