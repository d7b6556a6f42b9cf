"""Run a served model over a data set and judge its outputs.

The rows go through the engine in batches of at most the model's ``max_batch_size``, so a
candidate is checked exactly as it will answer requests; the figures come from
:mod:`inferd.tools.optimize.metrics`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from inferd.core.inference import InferRequest, RequestedOutput
from inferd.engine import Engine
from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.metrics import Quality, agreement_figures, task_figures

if TYPE_CHECKING:
    from inferd.tools.optimize.data import Dataset

__all__ = ["Quality", "judge", "model_outputs"]


async def model_outputs(
    engine: Engine, model: str, data: Dataset, output: str, batch_size: int
) -> np.ndarray:
    """``output`` of ``model`` for every row of ``data``, in order."""
    if batch_size < 1:
        raise InvalidArgumentError(
            f"the evaluation batch size must be at least 1, not {batch_size}"
        )
    parts: list[np.ndarray] = []
    wanted = [RequestedOutput(output)]
    for batch in data.batches(batch_size):
        response = await engine.infer(
            InferRequest(model_name=model, inputs=dict(batch), outputs=list(wanted))
        )
        parts.append(np.asarray(response.outputs[output]))
    if not parts:
        raise InvalidArgumentError(f"the evaluation data {data.source} has no rows")
    return np.concatenate(parts, axis=0)


def judge(
    outputs: np.ndarray, reference: np.ndarray, labels: np.ndarray | None, metric: str
) -> Quality:
    """The candidate's figures: task metrics when there are labels, agreement always."""
    figures: dict[str, float] = {}
    if labels is not None:
        figures.update(task_figures(outputs, labels))
    figures.update(agreement_figures(outputs, reference))
    if metric not in figures:
        raise InvalidArgumentError(
            f"--metric {metric} cannot be computed here (measured: {', '.join(sorted(figures))})"
        )
    return Quality(metric=metric, value=figures[metric], figures=figures)
