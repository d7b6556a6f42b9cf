"""Calibration and evaluation data for ``inferd optimize``: .npz, .parquet and folders of v2 JSON
requests, checked against the model's inputs, with one clear error line per problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.core.datatypes import BY_NAME
from inferd.core.model_spec import TensorSpec
from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.data import Dataset, load_dataset


def spec(name: str, datatype: str, dims: tuple[int, ...], optional: bool = False) -> TensorSpec:
    return TensorSpec(name, BY_NAME[datatype], dims, optional=optional)


IMAGE = spec("image", "FP32", (2, 3))
IDS = spec("ids", "INT64", (-1,))


def refused(path: Path, specs: list[TensorSpec], *fragments: str, **kw: Any) -> str:
    """The one-line message of the error loading ``path``, which names the file."""
    with pytest.raises(InvalidArgumentError) as info:
        load_dataset(path, specs, **kw)
    message = str(info.value)
    assert "\n" not in message
    assert path.name in message
    for fragment in fragments:
        assert fragment in message, message
    return message


# --- .npz -------------------------------------------------------------------------------------


def npz(tmp_path: Path, **arrays: Any) -> Path:
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return path


def test_npz_rows_labels_and_batches(tmp_path: Path) -> None:
    images = np.arange(5 * 6, dtype=np.float64).reshape(5, 2, 3) / 7  # float64 narrowed to FP32
    ids = np.arange(5 * 4).reshape(5, 4)
    data = load_dataset(npz(tmp_path, image=images, ids=ids, labels=np.arange(5)), [IMAGE, IDS])
    assert data.rows == 5
    assert data.inputs["image"].dtype == np.float32
    np.testing.assert_allclose(data.inputs["image"], images, rtol=1e-6)
    assert data.inputs["ids"].dtype == np.int64
    assert data.labels is not None
    assert data.labels.tolist() == [0, 1, 2, 3, 4]
    assert data.source.endswith("data.npz")
    sizes = [len(b["image"]) for b in data.batches(2)]
    assert sizes == [2, 2, 1]
    head = data.head(3)
    assert head.rows == 3
    assert head.labels is not None
    assert head.labels.tolist() == [0, 1, 2]


def test_npz_label_names(tmp_path: Path) -> None:
    images = np.zeros((3, 2, 3), np.float32)
    for name in ("label", "labels"):
        found = load_dataset(npz(tmp_path, image=images, **{name: np.ones(3)}), [IMAGE])
        assert found.labels is not None
        assert found.labels.tolist() == [1, 1, 1]
    both = npz(tmp_path, image=images, label=np.ones(3), labels=np.zeros(3))
    refused(both, [IMAGE], "both 'label' and 'labels'")
    refused(both, [IMAGE], "'label' is neither an input", label="labels")
    named = load_dataset(npz(tmp_path, image=images, target=np.full(3, 7)), [IMAGE], label="target")
    assert named.labels is not None
    assert named.labels.tolist() == [7, 7, 7]
    unlabelled = load_dataset(npz(tmp_path, image=images), [IMAGE])
    assert unlabelled.labels is None
    refused(npz(tmp_path, image=images), [IMAGE], "no labels named 'y'", label="y")


def test_npz_names_and_shapes_are_checked(tmp_path: Path) -> None:
    images = np.zeros((3, 2, 3), np.float32)
    refused(npz(tmp_path, ids=np.zeros((3, 4))), [IMAGE, IDS], "no data for input 'image'")
    refused(npz(tmp_path, image=images, other=images), [IMAGE], "'other'", "neither an input")
    refused(npz(tmp_path, image=np.zeros((3, 3, 2))), [IMAGE], "shape [3, 3, 2]", "[2, 3]")
    refused(npz(tmp_path, image=np.zeros(3)), [IMAGE], "each of shape [2, 3]")
    refused(
        npz(tmp_path, image=images, ids=np.zeros((4, 4), np.int64)),
        [IMAGE, IDS],
        "different numbers of rows",
    )
    refused(npz(tmp_path, image=np.zeros((0, 2, 3))), [IMAGE], "no rows")
    optional = spec("mask", "BOOL", (4,), optional=True)
    data = load_dataset(npz(tmp_path, image=images), [IMAGE, optional])
    assert set(data.inputs) == {"image"}


@pytest.mark.parametrize(
    ("datatype", "values", "fragment"),
    [
        ("INT64", np.array([[1.5]]), "whole numbers"),
        ("INT32", np.array([[np.nan]]), "NaN"),
        ("INT8", np.array([[300]]), "do not fit INT8"),
        ("UINT8", np.array([[-1]]), "do not fit UINT8"),
        ("FP16", np.array([[1e6]]), "beyond the range of FP16"),
        ("FP32", np.array([[2**53 + 1]], np.int64), "held exactly by FP32"),
        ("FP64", np.array([[2**63 - 1]], np.int64), "held exactly by FP64"),
        ("FP16", np.array([[2049]], np.uint16), "held exactly by FP16"),
        ("BOOL", np.array([[2]]), "0 or 1"),
        ("FP32", np.array([["a"]]), "cannot take text"),
        ("BYTES", np.array([[1.0]]), "needs text"),
    ],
)
def test_lossy_conversions_are_refused(
    tmp_path: Path, datatype: str, values: np.ndarray, fragment: str
) -> None:
    refused(npz(tmp_path, x=values), [spec("x", datatype, (1,))], "array 'x'", fragment)


@pytest.mark.parametrize(
    ("datatype", "values", "expected"),
    [
        ("INT64", np.array([[3.0]]), np.int64(3)),
        ("INT8", np.array([[-128]], np.int64), np.int8(-128)),
        ("FP32", np.array([[7]], np.int64), np.float32(7)),
        ("FP32", np.array([[2**40]], np.uint64), np.float32(2**40)),
        ("BOOL", np.array([[1]]), np.True_),
        ("BF16", np.array([[0.5]]), 0.5),
        ("BYTES", np.array([["é"]]), "é".encode()),
    ],
)
def test_exact_conversions_are_made(
    tmp_path: Path, datatype: str, values: np.ndarray, expected: object
) -> None:
    data = load_dataset(npz(tmp_path, x=values), [spec("x", datatype, (1,))])
    array = data.inputs["x"]
    assert array.dtype == BY_NAME[datatype].dtype
    assert array[0, 0] == expected


def test_npz_refuses_pickled_objects_and_other_files(tmp_path: Path) -> None:
    objects = np.empty((2, 1), dtype=object)
    objects[:] = [[b"a"], [b"b"]]
    refused(npz(tmp_path, x=objects), [spec("x", "BYTES", (1,))], "store text as str arrays")
    text = tmp_path / "data.csv"
    text.write_text("1,2\n")
    refused(text, [IMAGE], "unsupported data format '.csv'", ".npz", ".parquet")
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"not a zip")
    refused(broken, [IMAGE], "cannot read the archive")
    with pytest.raises(InvalidArgumentError, match="no such file or folder"):
        load_dataset(tmp_path / "missing.npz", [IMAGE])


# --- .parquet ---------------------------------------------------------------------------------


def parquet(tmp_path: Path, **columns: Any) -> Path:
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table(columns), path)
    return path


def test_parquet_columns_are_reshaped_to_the_dims(tmp_path: Path) -> None:
    flat = [list(range(i, i + 6)) for i in range(4)]  # one flat list per row -> (2, 3)
    nested = [[[1.0, 2.0], [3.0, 4.0]]] * 4  # nested lists keep their shape
    path = parquet(
        tmp_path,
        image=flat,
        grid=nested,
        ids=[[1, 2, 3]] * 4,  # variable dim taken from the cells
        scale=[0.5, 1.0, 1.5, 2.0],  # a scalar per row
        label=[0, 1, 0, 1],
    )
    specs = [
        IMAGE,
        spec("grid", "FP32", (2, -1)),
        IDS,
        spec("scale", "FP32", (1,)),
    ]
    data = load_dataset(path, specs)
    assert data.rows == 4
    assert data.inputs["image"].shape == (4, 2, 3)
    assert data.inputs["image"][1].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert data.inputs["grid"].shape == (4, 2, 2)
    assert data.inputs["ids"].shape == (4, 3)
    assert data.inputs["scale"].tolist() == [[0.5], [1.0], [1.5], [2.0]]
    assert data.labels is not None
    assert data.labels.tolist() == [0, 1, 0, 1]


def test_parquet_problems(tmp_path: Path) -> None:
    refused(parquet(tmp_path, ids=[[1, 2], [1, 2, 3]]), [IDS], "different lengths")
    refused(parquet(tmp_path, ids=[[1, 2], None]), [IDS], "null")
    refused(parquet(tmp_path, image=[[1.0] * 5] * 2), [IMAGE], "5 values", "[2, 3]")
    refused(parquet(tmp_path, image=[[0.5] * 6] * 2, extra=[1, 2]), [IMAGE], "'extra'")
    refused(parquet(tmp_path, ids=[[0.5, 1.0]] * 2), [IDS], "column 'ids'", "whole numbers")
    two_variable = spec("grid", "FP32", (-1, -1))
    refused(parquet(tmp_path, grid=[[1.0] * 4] * 2), [two_variable], "do not fit")
    refused(parquet(tmp_path, image=[[0.5] * 6] * 2), [IMAGE], "no labels named", label="y")


# --- a folder of v2 JSON requests ------------------------------------------------------------


def request(folder: Path, name: str, *tensors: tuple[str, str, list[int], list[Any]]) -> None:
    folder.mkdir(exist_ok=True)
    body = {
        "inputs": [
            {"name": n, "datatype": d, "shape": shape, "data": data}
            for n, d, shape, data in tensors
        ]
    }
    (folder / name).write_text(json.dumps(body))


def test_requests_are_joined_along_the_batch(tmp_path: Path) -> None:
    folder = tmp_path / "requests"
    request(folder, "b.json", ("ids", "INT32", [1, 3], [7, 8, 9]), ("label", "INT64", [1], [1]))
    request(
        folder,
        "a.json",
        ("ids", "INT64", [2, 3], [1, 2, 3, 4, 5, 6]),
        ("label", "INT64", [2], [0, 0]),
    )
    (folder / "notes.txt").write_text("ignored")
    data = load_dataset(folder, [IDS])
    assert data.inputs["ids"].dtype == np.int64  # INT32 widened exactly
    assert data.inputs["ids"].tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]  # file-name order
    assert data.labels is not None
    assert data.labels.tolist() == [0, 0, 1]
    assert data.source == str(folder)


def test_request_problems_name_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    request(folder, "a.json", ("ids", "INT64", [1, 3], [1, 2]))
    refused(folder / "a.json", [IDS], "unsupported data format")
    message = refused(folder, [IDS], "unexpected number of elements")
    assert "a.json" in message
    folder = tmp_path / "half"
    request(folder, "a.json", ("ids", "FP16", [1, 1], [1.0]))
    assert "a.json" in refused(folder, [IDS], "FP16", "binary data format")
    folder = tmp_path / "ragged"
    request(folder, "a.json", ("ids", "INT64", [1, 3], [1, 2, 3]))
    request(folder, "b.json", ("ids", "INT64", [1, 2], [1, 2]))
    assert "b.json" in refused(folder, [IDS], "rows of shape [2]", "a.json")
    folder = tmp_path / "unlabelled"
    request(folder, "a.json", ("ids", "INT64", [1, 1], [1]), ("label", "INT64", [1], [1]))
    request(folder, "b.json", ("ids", "INT64", [1, 1], [1]))
    assert "b.json" in refused(folder, [IDS], "lacks labels")
    folder = tmp_path / "wrong"
    request(folder, "a.json", ("tokens", "INT64", [1, 1], [1]))
    assert "a.json" in refused(folder, [IDS], "no data for input 'ids'", "tokens")
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "a.json").write_text("{")
    assert "a.json" in refused(folder, [IDS])
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(empty, [IDS], "no .json inference requests")


# --- Dataset ----------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(rows=st.integers(1, 40), size=st.integers(1, 50))
def test_batches_cover_every_row_once_in_order(rows: int, size: int) -> None:
    data = Dataset({"x": np.arange(rows)}, None, "memory")
    batches = [b["x"] for b in data.batches(size)]
    assert all(1 <= len(b) <= size for b in batches)
    assert np.concatenate(batches).tolist() == list(range(rows))


def test_dataset_checks_its_rows() -> None:
    with pytest.raises(InvalidArgumentError, match="different numbers of rows"):
        Dataset({"x": np.zeros(3)}, np.zeros(2), "memory")
    with pytest.raises(InvalidArgumentError, match="no input data"):
        Dataset({}, None, "memory")
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        next(Dataset({"x": np.zeros(3)}, None, "memory").batches(0))
