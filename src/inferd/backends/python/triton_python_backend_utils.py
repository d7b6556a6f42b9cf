"""``inferd.backends.python.triton_python_backend_utils``: the same module object as
:mod:`inferd.backends.python.worker.triton_python_backend_utils` (which user models import as
``triton_python_backend_utils``), kept at this path for code that imports it by its old name."""

import sys

from inferd.backends.python.worker import triton_python_backend_utils as _module

sys.modules[__name__] = _module
