"""One logged request: what the observer captures on the event loop, and its JSON lines.

Pure functions. Tensors are written in the v2 JSON form the HTTP codec gives response outputs
(:func:`inferd.codecs.v2_http.tensor_entry`): name, datatype, shape and flat ``data``; a tensor
JSON cannot hold (BYTES that are not UTF-8, NaN or infinite floats) carries its binary form,
base64-encoded, in ``binary_data_base64`` instead of ``data``. A redacted input is written as
``{"name": ..., "redacted": true}``: neither its values nor its shape are kept.
"""

from __future__ import annotations

import base64
import mmap
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, NamedTuple

import numpy as np
import orjson

from inferd.codecs.v2_http import tensor_entry
from inferd.core.inference import ParamValue

__all__ = ["Captured", "capture_inputs", "json_line", "record_dict", "timestamp_text"]

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
        base: object = array.base
        # the usual bases, at a glance: none (owned) or the request's bytes (a codec's view)
        if name in redact or (
            base is not None and type(base) is not bytes and _client_memory(array)
        ):
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


def _tensor(name: str, array: Array) -> dict[str, Any]:
    """The codec's general form: any datatype, binary when JSON cannot hold the values."""
    entry, blob = tensor_entry(name, array)
    if blob is not None:
        entry["binary_data_base64"] = base64.b64encode(bytes(blob)).decode("ascii")
    return entry


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
    """One line of a JSONL payload log, newline included (the general form, record by
    record; :func:`~inferd.monitoring.payload_log.json_batch.json_lines` writes the same bytes
    a batch at a time)."""
    return orjson.dumps(
        record_dict(captured), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
    )
