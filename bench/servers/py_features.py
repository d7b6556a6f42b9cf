"""The pure-Python model that bench/python_throughput.py serves with inferd, MLServer and LitServe.

Every server imports this one module and calls :func:`score` on a batch of rows; only the thin
adapter around it differs per server (Triton ``model.py``, MLServer ``MLModel``, LitServe
``LitAPI``). A row is 256 FP32 values (1 KiB). For each row, plain Python computes 22 summary
features (moments, extremes, sign changes, a 16-bin histogram), the kind of per-row feature code a
tabular or signal model carries in front of its estimator; it holds the GIL for about 50-60 us per
row. Then a small numpy scorer (278 -> 64 tanh -> 8 softmax, seeded weights) runs over the batch.
The output is 8 FP32 class probabilities per row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

WIDTH = 256  # FP32 values per row: 1 KiB
CLASSES = 8
_BINS = 16
_FEATURES = WIDTH + 6 + _BINS

_rng = np.random.default_rng(20261122)
W1 = (_rng.standard_normal((_FEATURES, 64)) / np.sqrt(_FEATURES)).astype(np.float32)
W2 = (_rng.standard_normal((64, CLASSES)) / 8.0).astype(np.float32)


def row_features(row: list[float]) -> list[float]:
    """Summary features of one row, in plain Python (holds the GIL)."""
    n = len(row)
    total = squares = 0.0
    lo = hi = prev = row[0]
    positive = crossings = 0
    hist = [0] * _BINS
    for v in row:
        total += v
        squares += v * v
        if v < lo:
            lo = v
        elif v > hi:
            hi = v
        if v > 0.0:
            positive += 1
        if (v > 0.0) != (prev > 0.0):
            crossings += 1
        prev = v
        b = int((v + 4.0) * 2.0)
        hist[0 if b < 0 else (_BINS - 1 if b >= _BINS else b)] += 1
    mean = total / n
    return [
        mean,
        squares / n - mean * mean,
        lo,
        hi,
        positive / n,
        crossings / n,
        *(h / n for h in hist),
    ]


def score(x: Any) -> np.ndarray:
    """Class probabilities [rows, 8] FP32 for a batch of rows [rows, 256] (or one row)."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, WIDTH)
    features = np.array([row_features(r) for r in x.tolist()], dtype=np.float32)
    hidden = np.tanh(np.concatenate([x, features], axis=1) @ W1)
    logits = hidden @ W2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
