"""The JSONL lines of a batch of records, built a column at a time.

Records of one layout (the same model and version, the same tensors with the same datatypes
and shapes, the same redacted inputs: the usual case, a batch holding many requests to one
model) share one line template. Each numeric tensor of the group is stacked into one array and
written by one orjson call, whose text is cut into one piece per record; the timestamps are
formatted by numpy at once. What is left per record is an orjson call for its id and
parameters and one ``bytes %`` to fill the template. A batch whose records are all alike is
checked and stacked column-wise (:mod:`~inferd.monitoring.payload_log.columns`); any other is
first sorted by layout. A record that does not fit (BYTES or BF16 tensors, a NaN or infinite
value, a byte order other than the machine's) is written alone by
:func:`~inferd.monitoring.payload_log.records.record_dict`; every line is the same bytes
either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import orjson

from inferd.core import datatypes
from inferd.monitoring.payload_log.columns import record_layout, timestamp_texts, uniform
from inferd.monitoring.payload_log.records import Captured, record_dict

__all__ = ["json_lines"]

Array = np.ndarray[Any, Any]

_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_LINE = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE

#: numpy dtypes orjson writes as the codec does (native byte order), with their v2 names
_NAMES: dict[np.dtype[Any], str] = {
    datatypes.from_name(name).dtype: name
    for name in (
        *("BOOL", "INT8", "INT16", "INT32", "INT64"),
        *("UINT8", "UINT16", "UINT32", "UINT64", "FP16", "FP32", "FP64"),
    )
}


def _text(value: Any) -> bytes:
    """JSON of a constant part of a template, with ``%`` doubled for ``bytes %``."""
    return orjson.dumps(value).replace(b"%", b"%%")


def _tensor_head(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    head = b'{"name":' + _text(name) + b',"datatype":' + _text(datatype)
    return head + b',"shape":' + _text(list(shape)) + b',"data":[%b]}'


def _template(first: Captured) -> bytes | None:
    """The line of records laid out like ``first``, with ``%b`` for the id, timestamp,
    parameters and each tensor's values; None when a tensor's datatype needs the general
    form."""
    tensors: list[list[bytes]] = [[], []]
    for side, named in enumerate((first.inputs, first.outputs)):
        for name, array in named.items():
            datatype = _NAMES.get(array.dtype)
            if datatype is None:
                return None
            tensors[side].append(_tensor_head(name, datatype, array.shape))
    tensors[0] += [b'{"name":' + _text(n) + b',"redacted":true}' for n in first.redacted]
    return (
        b'{"id":%b,"model":' + _text(first.model) + b',"version":' + _text(first.version)
        + b',"timestamp":"%b","parameters":%b,"inputs":['
        + b",".join(tensors[0]) + b'],"outputs":[' + b",".join(tensors[1]) + b"]}\n"
    )  # fmt: skip


def _text_rows(stacked: Array) -> tuple[list[bytes], Array | None]:
    """Each row's values as JSON text without brackets, and which rows are finite (None:
    all, or not floats)."""
    finite = None
    if stacked.dtype.kind == "f":
        rows: Array = np.isfinite(stacked).all(axis=1)  # type: ignore[assignment]
        if not rows.all():
            finite = rows
    return orjson.dumps(stacked, option=_NUMPY)[2:-2].split(b"],["), finite


def _texts(values: list[Any]) -> list[bytes]:
    """Each value's JSON; one call when they are all the same (a client that sends no
    request id, the usual case)."""
    if values.count(values[0]) == len(values):
        return [orjson.dumps(values[0])] * len(values)
    return list(map(orjson.dumps, values))


def _parameter_texts(parameters: list[Any]) -> list[bytes]:
    """Each record's parameters as JSON (a mapping that is not a dictionary raises
    TypeError); no call per record when none has any."""
    if list(map(len, parameters)).count(0) == len(parameters):
        return [b"{}"] * len(parameters)
    return list(map(orjson.dumps, parameters))


def _fill(
    template: bytes,
    stacked: list[Array],
    ids: list[str],
    times_ns: list[int],
    parameters: list[Any],
    lines: list[bytes | None],
    where: Sequence[int],
) -> None:
    """Fill ``lines`` at ``where`` from one layout's columns (one stacked array per tensor, in
    the template's order); rows holding a NaN or infinity are left to the general form."""
    keep = np.ones(len(ids), dtype=bool)
    columns: list[list[bytes]] = []
    for values in stacked:
        texts, finite = _text_rows(values)
        if finite is not None:
            keep &= finite
        columns.append(texts)
    stamps = timestamp_texts(times_ns)
    rows = zip(_texts(ids), stamps, _parameter_texts(parameters), *columns, strict=True)
    if keep.all():
        for k, row in zip(where, rows, strict=True):
            lines[k] = template % row
        return
    for k, row, kept in zip(where, rows, keep.tolist(), strict=True):
        if kept:
            lines[k] = template % row


def _group_lines(records: list[Captured], lines: list[bytes | None], where: list[int]) -> None:
    """Fill ``lines`` at ``where`` for ``records``, all of one layout."""
    template = _template(records[0])
    if template is None:
        return  # left to the general form
    stacked = []
    for side in ("inputs", "outputs"):
        for name in getattr(records[0], side):
            arrays = [getattr(r, side)[name] for r in records]
            joined = np.concatenate(arrays, axis=None)
            stacked.append(joined.reshape(len(records), arrays[0].size))
    _fill(
        template,
        stacked,
        [r.id for r in records],
        [r.time_ns for r in records],
        [r.parameters for r in records],
        lines,
        where,
    )


def _uniform_lines(records: Sequence[Captured]) -> list[bytes | None] | None:
    """The lines of a batch whose records are all alike (None in a line left to the general
    form); None when they are not alike."""
    alike = uniform(records)
    if alike is None:
        return None
    lines: list[bytes | None] = [None] * len(records)
    template = _template(alike.first)
    if template is None:
        return lines
    stacked = [column.values for column in (*alike.inputs, *alike.outputs)]
    with contextlib.suppress(TypeError):  # parameters that are not a plain dictionary
        _fill(
            template,
            stacked,
            alike.ids,
            alike.times_ns,
            alike.parameters,
            lines,
            range(len(records)),
        )
    return lines


def json_lines(records: Sequence[Captured]) -> list[bytes]:
    """The JSONL lines of ``records`` (newlines included), in order."""
    found = _uniform_lines(records) if records else None
    if found is None:
        groups: dict[Hashable, list[int]] = {}
        for index, captured in enumerate(records):
            groups.setdefault(record_layout(captured), []).append(index)
        found = [None] * len(records)
        for where in groups.values():
            # parameters that are not a plain dictionary leave their group to the general form
            with contextlib.suppress(TypeError):
                _group_lines([records[i] for i in where], found, where)
    return [
        line if line is not None else orjson.dumps(record_dict(records[i]), option=_LINE)
        for i, line in enumerate(found)
    ]
