"""How checked rows become requests: the batch size, the requests in flight, the slices.

Pure functions. A request carries up to the batch size of consecutive good rows; rows whose
tensors differ in shape (inputs with variable dims) go in different requests, since a batch is
one array per input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError
from inferd.tools.batch.rows import CheckedRows

__all__ = ["batch_inputs", "choose_batch_size", "choose_in_flight", "instance_count", "slices"]

IN_FLIGHT_PER_INSTANCE = 2  # one running, one waiting: no instance idles between requests


def choose_batch_size(spec: ModelSpec, wanted: int | None) -> int:
    """Rows per request: ``wanted``, else the largest preferred batch size, else the maximum.

    A model without batching (``max_batch_size: 0``) takes one row per request.
    """
    mbs = spec.max_batch_size
    if wanted is not None:
        if wanted < 1:
            raise InvalidArgumentError(f"--batch-size must be at least 1, not {wanted}")
        if mbs == 0 and wanted != 1:
            raise InvalidArgumentError(
                f"model '{spec.name}' does not batch (max_batch_size 0): use --batch-size 1"
            )
        if mbs and wanted > mbs:
            raise InvalidArgumentError(
                f"--batch-size {wanted} is above model '{spec.name}''s max_batch_size {mbs}"
            )
        return wanted
    if mbs == 0:
        return 1
    preferred = spec.dynamic_batching.preferred_batch_sizes if spec.dynamic_batching else ()
    fitting = [p for p in preferred if p <= mbs]
    return max(fitting) if fitting else mbs


def instance_count(spec: ModelSpec) -> int:
    return max(1, sum(g.count for g in spec.instance_groups))


def choose_in_flight(spec: ModelSpec, wanted: int | None) -> int:
    """Requests sent at once: ``wanted``, else two per instance of the model."""
    if wanted is not None:
        if wanted < 1:
            raise InvalidArgumentError(f"--in-flight must be at least 1, not {wanted}")
        return wanted
    return IN_FLIGHT_PER_INSTANCE * instance_count(spec)


def _shape_key(checked: CheckedRows, position: int) -> tuple[tuple[int, ...], ...]:
    return tuple(
        values[position].shape for values in checked.inputs.values() if isinstance(values, list)
    )


def slices(checked: CheckedRows, batch_size: int) -> list[tuple[int, int]]:
    """``(start, stop)`` positions among the good rows, one pair per request."""
    count = len(checked.rows)
    ragged = any(isinstance(v, list) for v in checked.inputs.values())
    if not ragged:
        return [(s, min(s + batch_size, count)) for s in range(0, count, batch_size)]
    out: list[tuple[int, int]] = []
    start = 0
    while start < count:
        key = _shape_key(checked, start)
        stop = start + 1
        while stop < count and stop - start < batch_size and _shape_key(checked, stop) == key:
            stop += 1
        out.append((start, stop))
        start = stop
    return out


def batch_inputs(
    checked: CheckedRows, start: int, stop: int, *, batching: bool
) -> dict[str, np.ndarray[Any, Any]]:
    """The request's tensors for good rows ``start .. stop - 1``.

    Without batching there is one row and no batch dimension.
    """
    out: dict[str, np.ndarray[Any, Any]] = {}
    for name, values in checked.inputs.items():
        array = np.stack(values[start:stop]) if isinstance(values, list) else values[start:stop]
        out[name] = array if batching else array[0]
    return out
