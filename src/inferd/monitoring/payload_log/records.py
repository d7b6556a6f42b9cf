"""One logged request: what the observer captures on the event loop, and its JSON lines.

Pure functions. Tensors are written in the v2 JSON form the HTTP codec gives response outputs
(:func:`inferd.codecs.v2_http.tensor_entry`): name, datatype, shape and flat ``data``; a tensor
JSON cannot hold (BYTES that are not UTF-8, NaN or infinite floats) carries its binary form,
base64-encoded, in ``binary_data_base64`` instead of ``data``. A redacted input is written as
``{"name": ..., "redacted": true}``: neither its values nor its shape are kept.

:func:`json_lines` encodes a batch at once: numeric tensors go to orjson as flat numpy views
(serialised in C), and whether a float tensor is finite is checked once per tensor name for the
whole batch rather than once per record.
"""

from __future__ import annotations

import base64
import functools
import mmap
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

import numpy as np
import orjson

from inferd.codecs.v2_http import tensor_entry
from inferd.core import datatypes
from inferd.core.inference import ParamValue

__all__ = ["Captured", "capture_inputs", "json_line", "json_lines", "timestamp_text"]

Array = np.ndarray[Any, Any]


class Captured(NamedTuple):
    """A sampled request as handed to the writer: references, not copies (except inputs read
    from a client's shared memory, which the client may overwrite once answered)."""

    model: str
    version: int
    id: str
    time_ns: int  # wall clock, when the answer was observed
    inputs: Mapping[str, Array]  # redacted inputs left out
    redacted: tuple[str, ...]  # names of the inputs left out, in request order
    outputs: Mapping[str, Array]
    parameters: Mapping[str, ParamValue]


def _client_memory(array: Array) -> bool:
    """True when ``array`` views memory a client may still write (a shared-memory region)."""
    base: Any = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def capture_inputs(
    inputs: Mapping[str, Array], redact: frozenset[str]
) -> tuple[Mapping[str, Array], tuple[str, ...], int]:
    """The inputs to keep, the names of the ones redacted, and the bytes the kept ones hold.

    ``inputs`` itself is returned when nothing is redacted or copied (the usual case: no new
    dictionary); an input viewing a client's shared memory is copied."""
    nbytes = 0
    changed = False
    for name, array in inputs.items():
        if name in redact or (array.base is not None and _client_memory(array)):
            changed = True
        else:
            nbytes += array.nbytes
    if not changed:
        return inputs, (), nbytes
    kept: dict[str, Array] = {}
    redacted: list[str] = []
    nbytes = 0
    for name, array in inputs.items():
        if name in redact:
            redacted.append(name)
            continue
        if array.base is not None and _client_memory(array):
            array = array.copy()
        kept[name] = array
        nbytes += array.nbytes
    return kept, tuple(redacted), nbytes


# the last whole second formatted and its text, swapped as one tuple (safe across threads)
_last_second: list[tuple[int, str]] = [(-1, "")]


def timestamp_text(time_ns: int) -> str:
    """ISO 8601 in UTC with microseconds, e.g. ``2026-01-02T03:04:05.678901Z`` (the seconds'
    text is formatted once per second: a writer stamps thousands of records in each)."""
    seconds, rest = divmod(time_ns, 1_000_000_000)
    cached_second, text = _last_second[0]
    if cached_second != seconds:
        text = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        _last_second[0] = (seconds, text)
    return f"{text}.{rest // 1000:06d}Z"


#: numpy dtypes orjson writes as JSON numbers exactly as the codec would (native byte order);
#: floats among them need a finite check first
_PLAIN: dict[np.dtype[Any], str] = {}
_FLOATS: dict[np.dtype[Any], str] = {}
for _name in ("BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"):
    _PLAIN[datatypes.from_name(_name).dtype] = _name
for _name in ("FP16", "FP32", "FP64"):
    _FLOATS[datatypes.from_name(_name).dtype] = _name

_dumps = functools.partial(
    orjson.dumps, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
)


def _tensor(name: str, array: Array) -> dict[str, Any]:
    """The codec's general form: any datatype, binary when JSON cannot hold the values."""
    entry, blob = tensor_entry(name, array)
    if blob is not None:
        entry["binary_data_base64"] = base64.b64encode(bytes(blob)).decode("ascii")
    return entry


def _entry(name: str, array: Array, finite: bool) -> dict[str, Any]:
    """One tensor; ``finite`` says the batch check found every value of this name finite."""
    dtype = array.dtype
    datatype = _PLAIN.get(dtype)
    if datatype is None:
        datatype = _FLOATS.get(dtype)
        if datatype is None or not (finite or np.isfinite(array).all()):
            return _tensor(name, array)
    return {"name": name, "datatype": datatype, "shape": array.shape, "data": array.ravel()}


def _finite_names(records: Sequence[Captured]) -> tuple[frozenset[str], frozenset[str]]:
    """The input and output names whose float tensors are finite in every record of the batch
    (one check per name over the batch's values joined)."""
    found: list[frozenset[str]] = []
    for side in (0, 1):
        groups: dict[str, list[Array]] = {}
        for record in records:
            for name, array in (record.inputs if side == 0 else record.outputs).items():
                if array.dtype in _FLOATS:
                    groups.setdefault(name, []).append(array.reshape(-1))
        found.append(
            frozenset(
                name for name, arrays in groups.items() if np.isfinite(np.concatenate(arrays)).all()
            )
        )
    return found[0], found[1]


def _record(captured: Captured, finite_in: frozenset[str], finite_out: frozenset[str]) -> Any:
    inputs = [_entry(n, a, n in finite_in) for n, a in captured.inputs.items()]
    if captured.redacted:
        inputs += [{"name": name, "redacted": True} for name in captured.redacted]
    parameters = captured.parameters
    return {
        "id": captured.id,
        "model": captured.model,
        "version": captured.version,
        "timestamp": timestamp_text(captured.time_ns),
        "parameters": parameters if type(parameters) is dict else dict(parameters),
        "inputs": inputs,
        "outputs": [_entry(n, a, n in finite_out) for n, a in captured.outputs.items()],
    }


def record_dict(captured: Captured) -> dict[str, Any]:
    """The JSON object of one logged request (tensors in the codec's general form)."""
    inputs: list[dict[str, Any]] = [_tensor(n, a) for n, a in captured.inputs.items()]
    inputs += [{"name": name, "redacted": True} for name in captured.redacted]
    return {
        "id": captured.id,
        "model": captured.model,
        "version": captured.version,
        "timestamp": timestamp_text(captured.time_ns),
        "parameters": dict(captured.parameters),
        "inputs": inputs,
        "outputs": [_tensor(n, a) for n, a in captured.outputs.items()],
    }


def json_line(captured: Captured) -> bytes:
    """One line of a JSONL payload log, newline included."""
    return json_lines([captured])[0]


def json_lines(records: Sequence[Captured]) -> list[bytes]:
    """The JSONL lines of a batch of records (newlines included), in order."""
    finite_in, finite_out = _finite_names(records)
    return list(map(_dumps, [_record(r, finite_in, finite_out) for r in records]))
