"""The worker side of the Python backend: what runs in a model's worker process.

The zygote (``zygote.py``) forks workers; each serves one model instance (``worker.py``), runs
the user's ``model.py`` (``user_model.py``) with Triton's ``triton_python_backend_utils``, sends
decoupled responses (``decoupled.py``, ``streaming.py``) and makes business-logic calls back to
the server. It shares only the wire protocol and the shared-memory helpers
(``inferd.backends.python.protocol``, ``shm``, ``lifetime``) and the typed ``api`` with the
server side; it never imports ``inferd.backends.python.server``.
"""
