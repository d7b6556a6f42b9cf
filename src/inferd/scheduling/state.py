"""What the sequence batcher adds to each request: control tensors and implicit state.

:class:`ControlFiller` builds the START / END / READY / CORRID tensors of one request from its
sequence flags and id, with the values and datatypes the configuration gives.
:class:`StateStore` keeps each live sequence's state tensors between its requests: a sequence's
first request gets the initial state (``initial_state`` zeros or file, else zeros with every
variable dimension as 1), every later request gets what the model returned as the state output
of the request before.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

from inferd.core.sequence_spec import (
    ControlKind,
    InitialStateSpec,
    SequenceBatchingSpec,
    StateSpec,
)
from inferd.errors import ConfigError, InternalError, InvalidArgumentError

Array = np.ndarray[Any, Any]
SequenceId = int | str

#: the folder of a model directory that holds initial-state files (Triton's name)
INITIAL_STATE_FOLDER = "initial_state"

_INT_CORRID = frozenset({"UINT64", "INT64", "UINT32", "INT32"})


def describe_id(sequence_id: SequenceId) -> str:
    return str(sequence_id)


class ControlFiller:
    """Builds a request's control tensors (one row when the model batches)."""

    def __init__(self, seq: SequenceBatchingSpec, model: str, batched: bool) -> None:
        self._seq = seq
        self._model = model
        self._shape = (1, 1) if batched else (1,)
        corrid = seq.control(ControlKind.CORRID)
        self._corrid = corrid
        self._flags: list[tuple[str, ControlKind, Array, Array]] = []
        for control in seq.controls:
            if control.kind is ControlKind.CORRID:
                continue
            dtype = control.datatype.dtype
            false = np.full(self._shape, control.false_value, dtype=dtype)
            true = np.full(self._shape, control.true_value, dtype=dtype)
            for array in (false, true):
                array.flags.writeable = False
            self._flags.append((control.name, control.kind, false, true))

    def idle(self) -> dict[str, Array]:
        """The control tensors of a padding row (an idle slot): START, READY and END false, and
        a CORRID of 0 (empty for a string id): with READY false the model may assume nothing of
        the row, its correlation id included (Triton's rule)."""
        tensors = {name: false for name, _kind, false, _true in self._flags}
        corrid = self._corrid
        if corrid is not None:
            if corrid.datatype.is_bytes:
                value = np.empty(self._shape, dtype=object)
                value.fill(b"")
            else:
                value = np.zeros(self._shape, dtype=corrid.datatype.dtype)
            tensors[corrid.name] = value
        return tensors

    def check_id(self, sequence_id: SequenceId) -> None:
        """Refuse an id whose type the CORRID control cannot carry (Triton's message)."""
        corrid = self._corrid
        if corrid is None:
            return
        is_text = isinstance(sequence_id, str)
        wants_text = corrid.datatype.is_bytes
        if is_text != wants_text:
            got = "BYTES" if is_text else "UINT64"
            raise InvalidArgumentError(
                f"sequence batching control '{corrid.name}' data-type is '{got}', but model "
                f"'{self._model}' expects '{corrid.datatype.name}'"
            )
        if not is_text:
            assert isinstance(sequence_id, int)
            info = np.iinfo(corrid.datatype.dtype)
            if not info.min <= sequence_id <= info.max:
                raise InvalidArgumentError(
                    f"sequence id {sequence_id} does not fit the {corrid.datatype.name} "
                    f"control '{corrid.name}' of model '{self._model}'"
                )

    def fill(self, sequence_id: SequenceId, start: bool, end: bool) -> dict[str, Array]:
        """The control tensors of one request that is ready to run."""
        tensors: dict[str, Array] = {}
        for name, kind, false, true in self._flags:
            on = kind is ControlKind.READY or (start if kind is ControlKind.START else end)
            tensors[name] = true if on else false
        corrid = self._corrid
        if corrid is not None:
            if corrid.datatype.is_bytes:
                value = np.empty(self._shape, dtype=object)
                value.fill(str(sequence_id).encode("utf-8"))
            else:
                value = np.full(self._shape, sequence_id, dtype=corrid.datatype.dtype)
            tensors[corrid.name] = value
        return tensors


def _confined(model_dir: Path, name: str, what: str) -> Path:
    base = (model_dir / INITIAL_STATE_FOLDER).resolve()
    path = (base / name).resolve()
    if not path.is_relative_to(base) or path == base:
        raise ConfigError(f"{what} '{name}' must name a file inside {base}")
    return path


def _decode_strings(data: bytes, count: int, what: str) -> Array:
    """Triton's BYTES serialisation: each element as a 4-byte little-endian length + bytes."""
    items: list[bytes] = []
    pos = 0
    while pos < len(data) and len(items) < count:
        if pos + 4 > len(data):
            raise ConfigError(f"{what} ends inside an element's length")
        (length,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if pos + length > len(data):
            raise ConfigError(f"{what} ends inside an element")
        items.append(data[pos : pos + length])
        pos += length
    if len(items) != count:
        raise ConfigError(f"{what} holds {len(items)} strings, the state needs {count}")
    out = np.empty(count, dtype=object)
    out[:] = items
    return out


def initial_value(state: StateSpec, model_dir: Path, batched: bool) -> Array:
    """The tensor a sequence's first request gets as ``state.input_name``."""
    initial: InitialStateSpec | None = state.initial
    dims = initial.dims if initial is not None else tuple(1 if d < 0 else d for d in state.dims)
    shape = ((1,) if batched else ()) + dims
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    dtype = state.datatype.dtype
    if initial is None or initial.zero_data:
        if state.datatype.is_bytes:
            value = np.empty(shape, dtype=object)
            value.fill(b"")
        else:
            value = np.zeros(shape, dtype=dtype)
    else:
        what = f"initial_state file of state '{state.input_name}'"
        path = _confined(model_dir, initial.data_file, what)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{what} cannot be read: {exc}") from exc
        if state.datatype.is_bytes:
            value = _decode_strings(data, count, what).reshape(shape)
        else:
            needed = count * dtype.itemsize
            if len(data) < needed:
                raise ConfigError(
                    f"initial_state setting expects {needed} bytes, but the data provided from "
                    f"{initial.data_file} only has {len(data)} bytes."
                )
            value = np.frombuffer(data[:needed], dtype=dtype).reshape(shape).copy()
    value.flags.writeable = False
    return value


def check_initial_states(seq: SequenceBatchingSpec | None, model_dir: Path) -> None:
    """Raise :class:`ConfigError` if an initial state cannot be built (a missing or short file)."""
    if seq is not None:
        for state in seq.states:
            initial_value(state, model_dir, batched=False)


class StateStore:
    """Each live sequence's implicit state. Used on the event loop only."""

    def __init__(
        self, seq: SequenceBatchingSpec, model: str, model_dir: Path, batched: bool
    ) -> None:
        self._states = seq.states
        self._model = model
        self._initial = {s.input_name: initial_value(s, model_dir, batched) for s in seq.states}
        self._values: dict[SequenceId, dict[str, Array]] = {}

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(s.output_name for s in self._states)

    def __len__(self) -> int:
        return len(self._values)

    def inputs_for(self, sequence_id: SequenceId, start: bool) -> dict[str, Array]:
        """The state tensors of a request: the initial ones when it starts its sequence."""
        if not self._states:
            return {}
        if start:
            self._values.pop(sequence_id, None)
        return self._values.get(sequence_id, self._initial)

    def update(self, sequence_id: SequenceId, outputs: dict[str, Array]) -> None:
        """Keep the state outputs of a finished request (copied: runtimes may reuse buffers)."""
        if not self._states:
            return
        kept: dict[str, Array] = {}
        for state in self._states:
            array = outputs.get(state.output_name)
            if array is None:
                raise InternalError(
                    f"model '{self._model}' did not return its state output '{state.output_name}'"
                )
            if array.dtype != state.datatype.dtype:
                raise InternalError(
                    f"model '{self._model}' returned state output '{state.output_name}' as "
                    f"{array.dtype}, the configuration declares {state.datatype.config_name}"
                )
            value = np.array(array, copy=True)
            value.flags.writeable = False
            kept[state.input_name] = value
        self._values[sequence_id] = kept

    def drop(self, sequence_id: SequenceId) -> None:
        self._values.pop(sequence_id, None)
