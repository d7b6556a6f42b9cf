"""The server's side of moving a batch through an instance's arena.

Inputs are copied in once (there is no way around that: they arrive in the server's memory).
Outputs are *not* copied out: the response arrays are views of the arena. Each batch's outputs
are lent out as one span of the arena, tracked by a holder array that every output view is
based on; when the last view of the batch is gone, ``weakref.finalize`` returns the span.
The next batch is placed in the largest span no response still uses, so results a caller keeps
are never overwritten. If no span is big enough (callers hold on to many results), the instance
moves to a fresh arena and the old one lives on, unlinked, until its last view is released.
"""

from __future__ import annotations

import itertools
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from inferd.backends.base import Result
from inferd.backends.python import shm
from inferd.backends.python.protocol import error_from_wire
from inferd.core import datatypes
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import InferdError, InternalError

Array = np.ndarray[Any, Any]


class ArenaSpace:
    """One arena, as the server sees it: which spans response arrays still use.

    Finalizers may run in any thread (whichever drops the last view), so they only append to
    a deque; the instance thread folds those into the table when it next places a batch.
    """

    def __init__(self, arena: shm.Arena) -> None:
        self.arena = arena
        self._lent: dict[int, tuple[int, int]] = {}
        self._returned: deque[int] = deque()
        self._ids = itertools.count()

    @property
    def size(self) -> int:
        return self.arena.size

    def lent_spans(self) -> list[tuple[int, int]]:
        while self._returned:
            self._lent.pop(self._returned.popleft(), None)
        return sorted(self._lent.values())

    def largest_free(self) -> tuple[int, int]:
        """The largest ``[start, end)`` that no response uses (``start`` aligned)."""
        best = (0, 0)
        position = 0
        for lo, hi in [*self.lent_spans(), (self.size, self.size)]:
            start = shm.align(position)
            if lo - start > best[1] - best[0]:
                best = (start, lo)
            position = max(position, hi)
        return best

    def lend(self, start: int, end: int) -> Array:
        """A holder for ``[start, end)``: views of it keep the span taken until they go."""
        holder = np.frombuffer(self.arena.buffer, dtype=np.uint8, count=end - start, offset=start)
        key = next(self._ids)
        self._lent[key] = (start, end)
        weakref.finalize(holder, self._returned.append, key).atexit = False
        return holder

    def close(self) -> None:
        self.arena.close()  # unlinked now; pinned mappings are freed with their last view


def stage_inputs(requests: Sequence[InferRequest]) -> list[tuple[shm.Staged, int]]:
    """Inputs in arena order, each with its request's index: input by input, each request's
    tensor after the previous request's, so a stackable batch is one contiguous block per
    input (the worker then hands ``predict`` one view)."""
    names: list[str] = []
    for request in requests:
        for name in request.inputs:
            if name not in names:
                names.append(name)
    staged: list[tuple[shm.Staged, int]] = []
    for name in names:
        for i, request in enumerate(requests):
            array = request.inputs.get(name)
            if array is not None:
                staged.append((shm.stage(name, array), i))
    return staged


def input_bytes(staged: Iterable[tuple[shm.Staged, int]]) -> int:
    return shm.layout(item for item, _ in staged)[1]


def write_inputs(
    arena: shm.Arena, staged: list[tuple[shm.Staged, int]], count: int, start: int
) -> tuple[list[list[Any]], int]:
    """Copy the inputs in from ``start``: the wire refs of each request's inputs, and the end."""
    offsets, end = shm.layout((item for item, _ in staged), start=start)
    per_request: list[list[Any]] = [[] for _ in range(count)]
    for (item, owner), offset in zip(staged, offsets, strict=True):
        per_request[owner].append(shm.write(arena, item, offset).to_wire())
    return per_request, end


def _checked(ref: shm.TensorRef, spec: ModelSpec) -> InferdError | None:
    tensor = spec.output_by_name.get(ref.name)
    if tensor is not None and tensor.datatype.name != ref.datatype:
        return InternalError(
            f"Python model '{spec.name}' returned output '{ref.name}' as {ref.datatype}, but "
            f"the model configuration declares {tensor.datatype.config_name}"
        )
    return None


def read_outputs(
    space: ArenaSpace, responses: list[dict[str, Any]], spec: ModelSpec
) -> list[Result]:
    """The worker's answers as results; fixed-size outputs are views of one lent span."""
    parsed: list[list[shm.TensorRef] | InferdError] = []
    for response in responses:
        if response["error"] is not None:
            parsed.append(error_from_wire(response["error"]))
            continue
        refs = [shm.TensorRef.from_wire(item) for item in response["outputs"]]
        refs = [r for r in refs if r.name in spec.output_by_name]  # undeclared: dropped
        problem = next((p for r in refs if (p := _checked(r, spec)) is not None), None)
        parsed.append(problem if problem is not None else refs)
    viewed = [
        r
        for entry in parsed
        if isinstance(entry, list)
        for r in entry
        if r.datatype != "BYTES" and r.nbytes
    ]
    holder: Array | None = None
    low = 0
    if viewed:
        low = min(r.offset for r in viewed)
        high = max(r.offset + r.nbytes for r in viewed)
        if low < 0 or high > space.size:
            raise InternalError(
                f"Python model '{spec.name}': an output lies outside its shared-memory arena"
            )
        holder = space.lend(low, high)
    results: list[Result] = []
    for entry in parsed:
        if isinstance(entry, InferdError):
            results.append(entry)
            continue
        outputs: dict[str, Array] = {}
        for ref in entry:
            if holder is None or ref.datatype == "BYTES" or not ref.nbytes:
                outputs[ref.name] = shm.read(space.arena, ref, copy=True)
            else:
                outputs[ref.name] = _view(holder, ref, ref.offset - low)
        results.append(outputs)
    return results


def _view(holder: Array, ref: shm.TensorRef, offset: int) -> Array:
    dtype = datatypes.from_name(ref.datatype).dtype
    count = 1
    for d in ref.shape:
        count *= d
    if count * dtype.itemsize != ref.nbytes:
        raise InternalError(
            f"output '{ref.name}' has {ref.nbytes} bytes but shape {list(ref.shape)} of "
            f"{ref.datatype} needs {count * dtype.itemsize}"
        )
    return holder[offset : offset + ref.nbytes].view(dtype).reshape(ref.shape)
