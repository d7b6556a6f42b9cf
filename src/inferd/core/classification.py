"""The classification extension: replace an output by its top-N ``"value:index[:label]"``."""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError


def _format(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6f}"  # like C++ std::to_string
    return str(int(value))


def classify(
    array: np.ndarray[Any, Any], count: int, *, batched: bool, labels: list[str] | None
) -> np.ndarray[Any, Any]:
    if array.dtype == object:
        raise InvalidArgumentError("class result not available for output of datatype BYTES")
    rows = array.reshape(array.shape[0], -1) if batched else array.reshape(1, -1)
    k = min(count, rows.shape[1])
    result = np.empty((rows.shape[0], k), dtype=object)
    # one conversion and negation for every row (a stable sort, highest first); Python scalars
    # (``tolist``) format faster than numpy's
    keys = -rows.astype(np.float64)
    names = labels if labels is not None else ()
    known = len(names)
    for r in range(rows.shape[0]):
        order = np.argsort(keys[r], kind="stable")[:k]
        values = rows[r][order].tolist()
        for j, idx in enumerate(order.tolist()):
            text = f"{_format(values[j])}:{idx}"
            if idx < known:
                text += f":{names[idx]}"
            result[r, j] = text.encode()
    return result if batched else result.reshape(k)
