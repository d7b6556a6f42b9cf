"""JSON tensor rules of the v2 REST codec, and a fuzz of the request decoder.

Integer datatypes take whole-number floats (``1.0``) exactly, and refuse fractions, booleans
and values out of range with a message naming the input and the value. Whatever JSON header and
binary tail a client sends, the decoder raises only inferd's own errors (never a 500).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferd.codecs import v2_http
from inferd.core import datatypes
from inferd.errors import InferdError, InvalidArgumentError

INTEGER_TYPES = [d for d in datatypes.ALL if not d.is_bytes and d.dtype.kind in "iu"]


def _decode(datatype: str, data: Any, shape: list[int] | None = None) -> np.ndarray[Any, Any]:
    shape = shape if shape is not None else [len(data)]
    body = orjson.dumps(
        {"inputs": [{"name": "X", "datatype": datatype, "shape": shape, "data": data}]}
    )
    return v2_http.decode_infer_request("m", "", body, None).inputs["X"]


@pytest.mark.parametrize("dtype", INTEGER_TYPES, ids=lambda d: d.name)
def test_whole_floats_are_accepted_exactly_at_the_range_ends(dtype: datatypes.DataType) -> None:
    info = np.iinfo(dtype.dtype)
    # the ends of the range as floats, where a double holds them exactly
    lo = float(info.min)
    hi = float(info.max) if info.bits < 64 else float(2 ** (info.bits - 1) - 1024)
    if dtype.dtype.kind == "u" and info.bits == 64:
        hi = float(2**64 - 2048)
    array = _decode(dtype.name, [lo, 1.0, hi, 0.0])
    assert array.dtype == dtype.dtype
    assert array.tolist() == [int(lo), 1, int(hi), 0]
    mixed = _decode(dtype.name, [[int(info.max), 2.0], [int(info.min), -0.0]], [2, 2])
    assert mixed.tolist() == [[int(info.max), 2], [int(info.min), 0]]


@pytest.mark.parametrize("dtype", INTEGER_TYPES, ids=lambda d: d.name)
def test_integers_out_of_range_are_refused_never_wrapped(dtype: datatypes.DataType) -> None:
    info = np.iinfo(dtype.dtype)
    for bad in (int(info.max) + 1, int(info.min) - 1, float(2**info.bits), -(2.0**info.bits)):
        if isinstance(bad, int) and not -(2**63) <= bad < 2**64:
            continue  # the JSON parser turns such literals into doubles: covered by the floats
        for data in ([1, bad], [1.0, bad], [bad]):
            with pytest.raises(InvalidArgumentError) as info_:
                _decode(dtype.name, data)
            message = str(info_.value)
            assert "input 'X'" in message
            assert f"does not fit datatype {dtype.name}" in message
            assert repr(bad) in message


def test_300_into_uint8_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"300 is outside \[0, 255\]"):
        _decode("UINT8", [1, 300])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1.5, 2.0], "must be whole numbers, got 1.5"),
        ([1, 2.25], "must be whole numbers, got 2.25"),
        ([1e-300, 1.0], "must be whole numbers, got 1e-300"),
        ([True, 1], "must be JSON integers, got a boolean"),
        ([1.0, False], "must be JSON integers, got a boolean"),
        ([1, None], "must be JSON integers, got null"),
        ([1, "2"], "must be JSON integers, got a string"),
        ([1, {}], "must be JSON integers, got an object"),
    ],
)
def test_non_integers_are_refused_naming_the_value(data: list[Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        _decode("INT32", data)
    assert "INT32 input 'X'" in str(info.value)
    assert message in str(info.value)


def test_float_inputs_take_integers_and_floats_but_not_booleans() -> None:
    assert _decode("FP32", [1, 2.5]).tolist() == [1.0, 2.5]
    with pytest.raises(InvalidArgumentError, match="must be JSON numbers, got a boolean"):
        _decode("FP64", [1.0, True])
    with pytest.raises(InvalidArgumentError, match="true/false"):
        _decode("BOOL", [1, 0])


def test_non_finite_numbers_are_refused_by_the_parser() -> None:
    header = b'{"inputs":[{"name":"X","datatype":"INT32","shape":[1],"data":[%s]}]}'
    for token in (b"NaN", b"Infinity", b"1e999", b"-1e999"):
        with pytest.raises(InvalidArgumentError, match="failed to parse"):
            v2_http.decode_infer_request("m", "", header % token, None)


# ------------------------------------------------------------------------------------------------
# fuzz: only inferd errors escape
# ------------------------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` seven times in eight: deep enough to reach tensor building, with flaws mixed in."""
    return st.integers(0, 7).flatmap(lambda pick: bad if pick == 0 else good)


_dims = _mostly(
    st.lists(st.integers(min_value=0, max_value=3), max_size=3),
    st.lists(
        st.integers(min_value=-2, max_value=5) | st.sampled_from([0, 2**40, 2**62, 2**64 - 1]),
        max_size=4,
    )
    | _json,
)
_data = _mostly(
    st.lists(_scalars, max_size=8)
    | st.lists(st.integers(-300, 300), max_size=8)
    | st.lists(st.floats(-300, 300), max_size=8)
    | st.lists(st.lists(st.integers(-3, 3) | st.floats(-3, 3), max_size=3), max_size=3),
    _json,
)
_input_params = _mostly(
    st.fixed_dictionaries(
        {}, optional={"binary_data_size": st.integers(min_value=0, max_value=64)}
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "binary_data_size": st.integers(min_value=-1, max_value=2**64 - 1) | _scalars,
            "shared_memory_region": _scalars,
            "x": _json,
        },
    )
    | _json,
)


@st.composite
def _well_formed_input(draw: st.DrawFn) -> dict[str, Any]:
    """An input whose data matches its shape in count (so the datatype rules are reached)."""
    count = draw(st.integers(0, 6))
    item: dict[str, Any] = {
        "name": draw(st.sampled_from(["X", "Y"])),
        "datatype": draw(st.sampled_from([d.name for d in datatypes.ALL])),
        "shape": draw(st.sampled_from([[count], [1, count], [count, 1]])),
    }
    if draw(st.booleans()):
        element = draw(
            st.sampled_from(
                [
                    _scalars,
                    st.integers(-(2**63), 2**64 - 1),
                    st.floats(-(2.0**65), 2.0**65),
                    st.text(max_size=3),
                    st.booleans(),
                ]
            )
        )
        data = draw(st.lists(element, min_size=count, max_size=count))
        item["data"] = [data] if draw(st.booleans()) else data
    else:
        item["parameters"] = {"binary_data_size": draw(st.integers(0, 40))}
    return item


_input = _mostly(
    _well_formed_input(),
    st.fixed_dictionaries(
        {},
        optional={
            "name": _mostly(st.sampled_from(["X", "Y"]), _scalars),
            "datatype": _mostly(
                st.sampled_from([d.name for d in datatypes.ALL]),
                st.sampled_from(["INT33", "", "bytes"]) | _scalars,
            ),
            "shape": _dims,
            "data": _data,
            "parameters": _input_params,
        },
    ),
)
_outputs = _mostly(
    st.lists(
        st.fixed_dictionaries(
            {"name": _mostly(st.sampled_from(["Y", "Z"]), _scalars)},
            optional={
                "parameters": st.dictionaries(
                    st.sampled_from(["binary_data", "classification", "shared_memory_region", "k"]),
                    _json,
                    max_size=3,
                )
                | _json,
            },
        ),
        max_size=3,
    ),
    _json,
)
_request_params = _mostly(
    st.fixed_dictionaries(
        {},
        optional={
            "binary_data_output": st.booleans(),
            "priority": st.integers(0, 2**64 - 1),
            "sequence_id": st.integers(0, 9) | st.text(max_size=3),
            "custom": _scalars,
        },
    ),
    st.dictionaries(
        st.sampled_from(
            ["binary_data_output", "priority", "timeout", "sequence_start", "triton_x"]
        ),
        _json,
        max_size=3,
    )
    | _json,
)
_header = st.fixed_dictionaries(
    {"inputs": _mostly(st.lists(_input, max_size=3), _json)},
    optional={
        "id": _mostly(st.text(max_size=4), _json),
        "parameters": _request_params,
        "outputs": _outputs,
    },
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    header=_header | _json,
    tail=st.binary(max_size=64),
    mode=st.sampled_from(["json", "exact", "random"]),
    shift=st.integers(-3, 80),
)
def test_decoder_raises_only_inferd_errors(header: Any, tail: bytes, mode: str, shift: int) -> None:
    text = orjson.dumps(header)
    if mode == "json":
        body, length = text, None
    elif mode == "exact":
        body, length = text + tail, len(text)
    else:
        body, length = text + tail, shift
    try:
        request = v2_http.decode_infer_request("m", "1", body, length)
    except InferdError:
        return
    for array in request.inputs.values():
        assert isinstance(array, np.ndarray)
