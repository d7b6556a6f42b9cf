"""The typed inferd API for new Python models.

Write a ``model.py`` with one subclass of :class:`Model`::

    import numpy as np
    from inferd.backends.python.api import Model, ModelContext

    class Scale(Model):
        def setup(self, context: ModelContext) -> None:
            self.factor = float(context.parameters.get("factor", "2"))

        def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {"OUTPUT0": inputs["INPUT0"] * self.factor}

``predict`` receives a whole batch: when the model batches (``max_batch_size > 0``) the server
stacks the requests of a batch along the first dimension (zero-copy: the worker sees one view of
shared memory) and cuts the outputs back per request. Batching is the server's job, never the
model's. To refuse a request for its content, raise :class:`inferd.errors.InvalidArgumentError`
(answered 400): if it was raised on a stacked batch, ``predict`` runs again on each request alone,
so only the bad one gets the error. Any other exception fails every request of the batch (500)
and ``predict`` is not called again for them. Each instance runs in its own worker process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


@dataclass(frozen=True, slots=True)
class ModelContext:
    """What a model instance learns about itself at setup."""

    model_name: str
    model_version: int
    instance_name: str
    instance_kind: str  # "CPU", "GPU" or "MODEL"
    device_id: int
    model_dir: Path  # <repository>/<model>
    max_batch_size: int
    config: dict[str, Any] = field(default_factory=dict)  # the normalised config (JSON form)
    parameters: dict[str, str] = field(default_factory=dict)  # config `parameters`

    @property
    def version_dir(self) -> Path:
        return self.model_dir / str(self.model_version)


class Model:
    """Base class of typed Python models: override :meth:`predict`, optionally the others."""

    def setup(self, context: ModelContext) -> None:
        """Called once in the worker process before the first batch (load weights here)."""

    def predict(self, inputs: dict[str, Array]) -> dict[str, Array]:
        """Compute the outputs of a whole batch. Input arrays are read-only views."""
        raise NotImplementedError(f"{type(self).__name__} does not implement predict()")

    def teardown(self) -> None:
        """Called once when the model is unloaded."""


__all__ = ["Model", "ModelContext"]
