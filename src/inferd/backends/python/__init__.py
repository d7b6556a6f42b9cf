"""The Python backend: ``model.py`` models, each instance in its own worker process.

Triton-style models (``TritonPythonModel`` + ``triton_python_backend_utils``) run unchanged; new
models can use the typed API in :mod:`inferd.backends.python.api`.
"""

from inferd.backends.python.backend import PythonBackend

__all__ = ["PythonBackend"]
