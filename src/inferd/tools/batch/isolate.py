"""Row-level isolation: when a request of many rows fails, find the rows to blame.

A failed request whose error can be a row's fault (INVALID_ARGUMENT, INTERNAL: a runtime that
chokes on one row's values fails the whole batch) is split in halves and each half sent again,
down to single rows; a single row that still fails is a bad row, with the model's message. The
other errors (the model unloaded, the server shutting down) end the job: no row is to blame.
A batch without bad rows is sent once; one with b bad rows costs about 2·b·log2(size) more
requests, and its good rows are sent again until they are in a half that succeeds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from inferd.errors import ErrorCode, InferdError
from inferd.tools.batch.batches import batch_inputs
from inferd.tools.batch.rows import CheckedRows

__all__ = ["ROW_ERRORS", "Answered", "Infer", "infer_isolating"]

ROW_ERRORS = frozenset({ErrorCode.INVALID_ARGUMENT, ErrorCode.INTERNAL})

Tensors = dict[str, np.ndarray[Any, Any]]
Infer = Callable[[Tensors], Awaitable[Tensors]]
# (row indices, the outputs for those rows, rows first)
Answered = tuple[np.ndarray[Any, Any], Tensors]


def _rows_first(outputs: Tensors, rows: int, batching: bool) -> Tensors:
    if not batching:
        return {name: a[np.newaxis] for name, a in outputs.items()}
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != rows:
            raise InferdError(
                f"output '{name}' has {array.shape[0] if array.ndim else 0} rows for a request "
                f"of {rows}"
            )
    return outputs


async def infer_isolating(
    infer: Infer, checked: CheckedRows, start: int, stop: int, *, batching: bool
) -> tuple[list[Answered], list[tuple[int, str]]]:
    """Answer good rows ``start .. stop - 1`` of ``checked``; return the answered pieces and the
    bad rows ``(row index, reason)``."""
    try:
        outputs = await infer(batch_inputs(checked, start, stop, batching=batching))
    except InferdError as exc:
        if exc.code not in ROW_ERRORS:
            raise
        if stop - start == 1:
            return [], [(int(checked.rows[start]), f"the model failed on it: {exc.message}")]
        middle = (start + stop) // 2
        first, first_bad = await infer_isolating(infer, checked, start, middle, batching=batching)
        second, second_bad = await infer_isolating(infer, checked, middle, stop, batching=batching)
        return first + second, first_bad + second_bad
    return [(checked.rows[start:stop], _rows_first(outputs, stop - start, batching))], []
