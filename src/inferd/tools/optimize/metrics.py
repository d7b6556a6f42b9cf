"""Quality figures of a candidate's outputs, and the accuracy budget that judges them.

With labels, a task metric: accuracy, macro F1 and one-vs-rest AUC for classifiers (outputs with
one column per class), RMSE and MAE for regression. Always, the agreement with the baseline's
outputs on the same rows: mean and minimum cosine similarity, top-1 agreement, largest and mean
absolute difference. Every function here is pure: arrays in, floats out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from inferd.errors import InvalidArgumentError

__all__ = [
    "HIGHER_IS_BETTER",
    "METRICS",
    "Budget",
    "Quality",
    "agreement_figures",
    "default_metric",
    "is_classifier",
    "needs_labels",
    "parse_budget",
    "task_figures",
]

#: metric name -> True when a larger value is better
HIGHER_IS_BETTER: Mapping[str, bool] = {
    "accuracy": True,
    "f1": True,
    "auc": True,
    "rmse": False,
    "mae": False,
    "cosine": True,
    "cosine_min": True,
    "top1": True,
    "max_abs_error": False,
    "mean_abs_error": False,
}
METRICS = tuple(HIGHER_IS_BETTER)
_TASK_METRICS = frozenset({"accuracy", "f1", "auc", "rmse", "mae"})


def _rows(outputs: np.ndarray) -> np.ndarray:
    """Outputs as a 2-D float array, one row per sample."""
    array = np.asarray(outputs, dtype=np.float64)
    return array.reshape(array.shape[0], -1) if array.ndim != 2 else array


def is_classifier(outputs: np.ndarray, labels: np.ndarray | None) -> bool:
    """One column per class and whole-number labels (when given)."""
    if _rows(outputs).shape[1] < 2:
        return False
    if labels is None:
        return True
    values = np.asarray(labels)
    return bool(np.issubdtype(values.dtype, np.integer)) or bool(
        np.all(np.mod(values.astype(np.float64), 1.0) == 0.0)
    )


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    probs: np.ndarray = exp / exp.sum(axis=1, keepdims=True)
    return probs


def task_figures(outputs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task metrics of ``outputs`` against ``labels`` (one per row)."""
    scores = _rows(outputs)
    truth = np.asarray(labels).reshape(-1)
    if truth.shape[0] != scores.shape[0]:
        raise InvalidArgumentError(
            f"{truth.shape[0]} labels for {scores.shape[0]} rows of outputs: every row needs one"
        )
    if not is_classifier(outputs, labels):
        error = scores[:, 0] - truth.astype(np.float64)
        return {
            "rmse": float(np.sqrt(np.mean(error**2))),
            "mae": float(np.mean(np.abs(error))),
        }
    from sklearn.metrics import f1_score, roc_auc_score

    classes = truth.astype(np.int64)
    predicted = scores.argmax(axis=1)
    figures = {
        "accuracy": float(np.mean(predicted == classes)),
        "f1": float(f1_score(classes, predicted, average="macro", zero_division=0)),
    }
    probs = scores
    if np.any(scores < 0) or not np.allclose(scores.sum(axis=1), 1.0, atol=1e-3):
        probs = _softmax(scores)  # logits: AUC needs probabilities
    present = np.unique(classes)
    if present.size == scores.shape[1]:
        if present.size == 2:
            figures["auc"] = float(roc_auc_score(classes, probs[:, 1]))
        else:
            figures["auc"] = float(roc_auc_score(classes, probs, multi_class="ovr"))
    return figures


def agreement_figures(outputs: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """How closely ``outputs`` follow the baseline's ``reference`` outputs, row by row."""
    mine, theirs = _rows(outputs), _rows(reference)
    if mine.shape != theirs.shape:
        raise InvalidArgumentError(
            f"the candidate's outputs have shape {mine.shape}, the baseline's {theirs.shape}"
        )
    dot = np.sum(mine * theirs, axis=1)
    mine_norm, their_norm = np.linalg.norm(mine, axis=1), np.linalg.norm(theirs, axis=1)
    norms = mine_norm * their_norm
    # two zero rows agree; a zero row against a non-zero one shares no direction
    either_zero = norms == 0.0
    both_zero = (mine_norm == 0.0) & (their_norm == 0.0)
    cosine = np.where(
        either_zero, np.where(both_zero, 1.0, 0.0), dot / np.where(either_zero, 1.0, norms)
    )
    difference = np.abs(mine - theirs)
    figures = {
        "cosine": float(np.mean(cosine)),
        "cosine_min": float(np.min(cosine)),
        "max_abs_error": float(np.max(difference)) if difference.size else 0.0,
        "mean_abs_error": float(np.mean(difference)) if difference.size else 0.0,
    }
    if mine.shape[1] >= 2:
        figures["top1"] = float(np.mean(mine.argmax(axis=1) == theirs.argmax(axis=1)))
    return figures


def default_metric(outputs: np.ndarray, labels: np.ndarray | None) -> str:
    """Accuracy for a labelled classifier, RMSE for labelled regression, else the mean cosine
    similarity to the baseline (which suits embeddings and scores alike)."""
    if labels is None:
        return "cosine"
    return "accuracy" if is_classifier(outputs, labels) else "rmse"


@dataclass(frozen=True)
class Quality:
    """Every figure measured on the eval data; ``value`` is the one the budget applies to."""

    metric: str
    value: float
    figures: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Budget:
    """How much worse than the baseline a candidate's metric may be.

    For metrics in [0, 1] where higher is better (accuracy, F1, AUC, cosine, top-1) the budget
    is in points: 1% lets accuracy fall from 0.95 to 0.94. For error metrics (RMSE, MAE, absolute
    differences) it is relative to the baseline's value: 1% lets an RMSE of 2.0 grow to 2.02;
    when the baseline's error is 0 (agreement with itself) it is the error allowed outright.
    """

    fraction: float

    def limit(self, metric: str, baseline: float) -> float:
        """The worst value of ``metric`` that still passes."""
        if HIGHER_IS_BETTER[metric]:
            return baseline - self.fraction
        return baseline * (1.0 + self.fraction) if baseline > 0 else self.fraction

    def passes(self, metric: str, baseline: float, value: float) -> bool:
        if not np.isfinite(value):
            return False
        limit = self.limit(metric, baseline)
        # a hair of float tolerance, so the baseline always passes its own budget
        if HIGHER_IS_BETTER[metric]:
            return value >= limit - 1e-9
        return value <= limit + 1e-9


def parse_budget(text: str) -> Budget:
    """``1%`` or ``0.01`` -> Budget(0.01)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise InvalidArgumentError(
            f"--accuracy-budget {text!r}: give a share such as 1% or 0.01"
        ) from None
    if not 0.0 <= value < 1.0 or not np.isfinite(value):
        raise InvalidArgumentError(
            f"--accuracy-budget {text!r}: must be at least 0% and below 100%"
        )
    return Budget(value)


def needs_labels(metric: str) -> bool:
    return metric in _TASK_METRICS
