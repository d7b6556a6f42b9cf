"""``inferd perf`` input data: random and zero samples, perf_analyzer JSON files, raw-file
directories, .npz and .parquet, ``--shape`` and the batch stacking."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.inputs import (
    batch_tensors,
    build_requests,
    load_input_data,
    parse_shape_option,
    parse_shape_options,
)
from inferd.tools.perf.transport import ModelInfo, RequestData, TensorInfo


def model(*inputs: TensorInfo, max_batch_size: int = 8) -> ModelInfo:
    return ModelInfo("m", "1", inputs, (), max_batch_size, decoupled=False, sequence=False)


SIMPLE = model(TensorInfo("INPUT0", "INT32", (16,)), TensorInfo("INPUT1", "INT32", (16,)))
STRINGS = model(TensorInfo("TEXT", "BYTES", (2,)))
VARIABLE = model(TensorInfo("IMAGE", "FP32", (3, -1, -1)))


def write_json(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(document))
    return path


# --- --shape --------------------------------------------------------------------------------


def test_shape_option_parses_name_and_dims() -> None:
    assert parse_shape_option("IMAGE:3,224,224") == ("IMAGE", (3, 224, 224))
    assert parse_shape_option("ns:in:4") == ("ns:in", (4,))
    assert parse_shape_options(["A:1", "B:2,3"]) == {"A": (1,), "B": (2, 3)}


@pytest.mark.parametrize("text", ["IMAGE", ":3", "IMAGE:3,x", "IMAGE:-1,2"])
def test_bad_shape_options_are_one_clear_error(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="--shape"):
        parse_shape_option(text)


def test_a_shape_given_twice_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="twice"):
        parse_shape_options(["A:1", "A:2"])


def test_variable_dims_without_shape_name_the_input_and_the_flag() -> None:
    with pytest.raises(InvalidArgumentError, match=r"'IMAGE'.*--shape IMAGE:3,D,D"):
        load_input_data(VARIABLE, "random")


def test_shape_fills_variable_dims_and_must_fit_fixed_ones() -> None:
    (request,) = build_requests(VARIABLE, "zero", shapes={"IMAGE": (3, 8, 4)})
    assert request.tensors["IMAGE"].shape == (3, 8, 4)
    with pytest.raises(InvalidArgumentError, match="does not fit"):
        load_input_data(VARIABLE, "zero", shapes={"IMAGE": (4, 8, 4)})
    with pytest.raises(InvalidArgumentError, match="no such input"):
        load_input_data(VARIABLE, "zero", shapes={"OTHER": (1,)})


# --- random and zero ------------------------------------------------------------------------


def test_random_data_is_seeded_and_in_sensible_ranges() -> None:
    kinds = model(
        TensorInfo("I8", "INT8", (64,)),
        TensorInfo("U64", "UINT64", (64,)),
        TensorInfo("F16", "FP16", (64,)),
        TensorInfo("BF16", "BF16", (4,)),
        TensorInfo("B", "BOOL", (64,)),
    )
    first = load_input_data(kinds, "random", seed=3).requests[0].tensors
    again = load_input_data(kinds, "random", seed=3).requests[0].tensors
    other = load_input_data(kinds, "random", seed=4).requests[0].tensors
    for name, array in first.items():
        np.testing.assert_array_equal(array, again[name])
    assert not np.array_equal(first["U64"], other["U64"])
    assert first["I8"].dtype == np.int8
    assert first["I8"].min() >= 0
    assert first["I8"].max() < 100
    assert first["U64"].dtype == np.uint64
    assert first["U64"].max() < 100
    assert first["F16"].dtype == np.float16
    assert 0 <= first["F16"].min() <= 1
    assert first["B"].dtype == np.bool_
    assert 0 < first["B"].sum() < 64
    assert str(first["BF16"].dtype) == "bfloat16"


def test_random_strings_have_the_string_length_or_the_string_data() -> None:
    (request,) = build_requests(STRINGS, "random")
    texts = request.tensors["TEXT"]
    assert texts.dtype == object
    assert texts.shape == (2,)
    assert all(isinstance(t, bytes) and len(t) == 128 for t in texts)
    assert texts[0] != texts[1]
    (short,) = build_requests(STRINGS, "random", string_length=5)
    assert [len(t) for t in short.tensors["TEXT"]] == [5, 5]
    (fixed,) = build_requests(STRINGS, "random", string_data="7")
    assert fixed.tensors["TEXT"].tolist() == [b"7", b"7"]


def test_zero_data_and_distinct_random_samples() -> None:
    (zero,) = build_requests(SIMPLE, "zero")
    assert zero.tensors["INPUT0"].dtype == np.int32
    assert not zero.tensors["INPUT0"].any()
    samples = build_requests(SIMPLE, "random", count=3)
    assert len(samples) == 3
    assert not np.array_equal(samples[0].tensors["INPUT0"], samples[1].tensors["INPUT0"])


# --- perf_analyzer JSON ---------------------------------------------------------------------


def test_json_entries_lists_b64_and_content_with_shape(tmp_path: Path) -> None:
    raw = np.arange(16, dtype="<i4")
    path = write_json(
        tmp_path,
        {
            "data": [
                {"INPUT0": list(range(16)), "INPUT1": [[1] * 8, [2] * 8]},
                {
                    "INPUT0": {"b64": base64.b64encode(raw.tobytes()).decode()},
                    "INPUT1": {"content": [3] * 16, "shape": [16]},
                },
            ]
        },
    )
    data = load_input_data(SIMPLE, path)
    assert len(data.streams) == 1
    first, second = data.requests
    np.testing.assert_array_equal(first.tensors["INPUT0"], np.arange(16))
    np.testing.assert_array_equal(first.tensors["INPUT1"], [1] * 8 + [2] * 8)
    np.testing.assert_array_equal(second.tensors["INPUT0"], raw)
    assert second.tensors["INPUT0"].dtype == np.int32
    np.testing.assert_array_equal(second.tensors["INPUT1"], [3] * 16)


def test_json_streams_for_sequences_and_bytes(tmp_path: Path) -> None:
    blob = b"".join(struct.pack("<I", len(s)) + s for s in (b"ab", b"c"))
    path = write_json(
        tmp_path,
        {
            "data": [
                [{"TEXT": ["1", "2"]}, {"TEXT": {"b64": base64.b64encode(blob).decode()}}],
                [{"TEXT": ["x", "y"]}],
            ]
        },
    )
    data = load_input_data(STRINGS, path)
    assert [len(s) for s in data.streams] == [2, 1]
    assert data.streams[0][0].tensors["TEXT"].tolist() == [b"1", b"2"]
    assert data.streams[0][1].tensors["TEXT"].tolist() == [b"ab", b"c"]
    assert len(data.requests) == 3


def test_json_content_shape_serves_variable_dims(tmp_path: Path) -> None:
    path = write_json(tmp_path, {"data": [{"IMAGE": {"content": [0.5] * 12, "shape": [3, 2, 2]}}]})
    (request,) = build_requests(VARIABLE, path)
    assert request.tensors["IMAGE"].shape == (3, 2, 2)
    assert request.tensors["IMAGE"].dtype == np.float32


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"data": [{"INPUT0": [1] * 16}]}, "no data for input 'INPUT1'"),
        ({"data": [{"INPUT0": [1] * 16, "INPUT1": [1] * 16, "X": [1]}]}, "no input X"),
        ({"data": [{"INPUT0": [1] * 15, "INPUT1": [1] * 16}]}, "15 values"),
        ({"data": [{"INPUT0": [1.5] * 16, "INPUT1": [1] * 16}]}, "whole numbers"),
        ({"data": [{"INPUT0": {"b64": "AAAA"}, "INPUT1": [1] * 16}]}, "3 bytes"),
        ({"data": [{"INPUT0": {"b64": "@@"}, "INPUT1": [1] * 16}]}, "not valid base64"),
        ({"data": [{"INPUT0": [2**40] * 16, "INPUT1": [1] * 16}]}, "do not fit INT32"),
        ({"rows": []}, '"data" list'),
        ({"data": [], "validation_data": []}, "validation_data not supported"),
        ({"data": [[{"INPUT0": [1] * 16}], {"INPUT0": [1]}]}, "mixes"),
    ],
)
def test_json_mistakes_are_one_clear_error(tmp_path: Path, document: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        load_input_data(SIMPLE, write_json(tmp_path, document))


def test_missing_and_non_json_files_say_what_is_read(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="no such file"):
        load_input_data(SIMPLE, tmp_path / "absent.json")
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(InvalidArgumentError, match=r"not a JSON document.*\.npz"):
        load_input_data(SIMPLE, tmp_path / "data.csv")
    with pytest.raises(InvalidArgumentError, match="cannot be combined"):
        load_input_data(SIMPLE, ["random", tmp_path / "data.csv"])


@given(
    hnp.arrays(
        st.sampled_from([np.int8, np.uint16, np.int64, np.float32, np.float64]),
        st.integers(1, 24),
    )
)
@settings(max_examples=60, deadline=None)
def test_json_lists_and_b64_give_back_the_same_tensor(array: np.ndarray) -> None:
    datatype = {"i1": "INT8", "u2": "UINT16", "i8": "INT64", "f4": "FP32", "f8": "FP64"}[
        array.dtype.str[1:]
    ]
    if array.dtype.kind == "f":
        array = np.nan_to_num(array)
    m = model(TensorInfo("X", datatype, (-1,)))
    from inferd.tools.perf.input_files import parse_json_data

    b64 = base64.b64encode(array.astype(array.dtype.newbyteorder("<")).tobytes()).decode()
    document = {
        "data": [
            {"X": {"content": array.tolist(), "shape": [array.size]}},
            {"X": {"content": {"b64": b64}, "shape": [array.size]}},
        ]
    }
    (stream,) = parse_json_data(m, document, {}, "test")
    for request in stream:
        assert request.tensors["X"].dtype == array.dtype
        np.testing.assert_array_equal(request.tensors["X"], array)


# --- raw files, npz, parquet ----------------------------------------------------------------


def test_directory_of_raw_files(tmp_path: Path) -> None:
    (tmp_path / "INPUT0").write_bytes(np.full(16, 7, "<i4").tobytes())
    (tmp_path / "INPUT1").write_bytes(np.arange(16, dtype="<i4").tobytes())
    (request,) = build_requests(SIMPLE, tmp_path)
    np.testing.assert_array_equal(request.tensors["INPUT0"], [7] * 16)
    (tmp_path / "INPUT1").unlink()
    with pytest.raises(InvalidArgumentError, match="no file for input 'INPUT1'"):
        load_input_data(SIMPLE, tmp_path)


def test_npz_gives_one_request_per_sample(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.savez(path, INPUT0=np.arange(48).reshape(3, 16), INPUT1=np.ones((3, 16), np.int64))
    requests = build_requests(SIMPLE, path)
    assert len(requests) == 3
    np.testing.assert_array_equal(requests[2].tensors["INPUT0"], np.arange(32, 48))
    assert requests[0].tensors["INPUT1"].dtype == np.int32
    np.savez(path, TEXT=np.array([["a", "b"], ["c", "d"]]))
    texts = build_requests(STRINGS, path)
    assert texts[1].tensors["TEXT"].tolist() == [b"c", b"d"]


def test_npz_mistakes(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.savez(path, INPUT0=np.zeros((3, 16)))
    with pytest.raises(InvalidArgumentError, match="no array for input INPUT1"):
        load_input_data(SIMPLE, path)
    np.savez(path, INPUT0=np.zeros((3, 16)), INPUT1=np.zeros((2, 16)))
    with pytest.raises(InvalidArgumentError, match="different numbers of samples"):
        load_input_data(SIMPLE, path)
    np.savez(path, INPUT0=np.zeros((3, 15)), INPUT1=np.zeros((3, 16)))
    with pytest.raises(InvalidArgumentError, match=r"each of shape \[16\]"):
        load_input_data(SIMPLE, path)


def test_parquet_list_and_scalar_columns(tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    m = model(TensorInfo("VEC", "FP32", (-1,)), TensorInfo("ID", "INT64", (1,)))
    pq.write_table(
        pa.table({"VEC": [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], "ID": [10, 11]}), path
    )
    with pytest.raises(InvalidArgumentError, match="--shape VEC:D"):
        load_input_data(m, path)
    requests = build_requests(m, path, shapes={"VEC": (4,)})
    assert len(requests) == 2
    np.testing.assert_array_equal(requests[1].tensors["VEC"], [5, 6, 7, 8])
    assert requests[1].tensors["ID"].tolist() == [11]
    with pytest.raises(InvalidArgumentError, match=r"row 0: 4 values, but the shape \[2\]"):
        load_input_data(m, path, shapes={"VEC": (2,)})


# --- batches --------------------------------------------------------------------------------


def test_batch_tensors_repeat_the_sample() -> None:
    data = RequestData({"X": np.arange(4, dtype=np.int32)})
    stacked = batch_tensors(data, 3, 8)["X"]
    assert stacked.shape == (3, 4)
    np.testing.assert_array_equal(stacked[2], np.arange(4))
    assert batch_tensors(data, 1, 0)["X"].shape == (4,)
    with pytest.raises(InvalidArgumentError, match="does not batch"):
        batch_tensors(data, 2, 0)
    with pytest.raises(InvalidArgumentError, match="above the model's max_batch_size 8"):
        batch_tensors(data, 9, 8)
