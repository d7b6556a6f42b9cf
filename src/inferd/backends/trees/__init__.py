"""Tree ensembles served like Triton's FIL backend (``backend: "fil"``).

The libraries (XGBoost, LightGBM, Treelite, onnxmltools) are imported only when a model needs
them; a missing one fails that model with the ``pip install 'inferd[trees]'`` to run.
"""

from inferd.backends.trees.backend import TreeBackend, TreeModel
from inferd.backends.trees.settings import DEFAULT_FILES, DEFAULT_RUNTIME, TreeSettings

__all__ = ["DEFAULT_FILES", "DEFAULT_RUNTIME", "TreeBackend", "TreeModel", "TreeSettings"]
