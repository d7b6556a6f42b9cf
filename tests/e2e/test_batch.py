"""``inferd batch`` end to end: the command in a subprocess, its Parquet output compared with what
a real ``inferd serve`` answers tritonclient for the same rows; bad rows; resuming after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from PIL import Image

from inferd.cli.main import main
from inferd.testing import ServerProcess, running_server
from tests.helpers.models import finish, spin_model, write_model

pytestmark = pytest.mark.e2e

PARSE_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "NUMBER" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
FLAT_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 3, 4, 5 ] } ]
output [ { name: "FLAT" data_type: TYPE_FP32 dims: [ 60 ] } ]
"""
SPIN_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def parse_int_model() -> bytes:
    """``NUMBER = Cast(TEXT, INT32)`` over [batch, 1] strings: text that is not a number fails
    the whole batch inside onnxruntime, after every check has passed."""
    x = helper.make_tensor_value_info("TEXT", TensorProto.STRING, ["batch", 1])
    y = helper.make_tensor_value_info("NUMBER", TensorProto.INT32, ["batch", 1])
    node = helper.make_node("Cast", ["TEXT"], ["NUMBER"], to=TensorProto.INT32)
    return finish(helper.make_graph([node], "parse_int", [x], [y]))


def flatten_model() -> bytes:
    """``FLAT = Flatten(IMAGE)``: an RGB image [batch, 3, 4, 5] (channels first) as 60 values."""
    x = helper.make_tensor_value_info("IMAGE", TensorProto.FLOAT, ["batch", 3, 4, 5])
    y = helper.make_tensor_value_info("FLAT", TensorProto.FLOAT, ["batch", 60])
    node = helper.make_node("Flatten", ["IMAGE"], ["FLAT"], axis=1)
    return finish(helper.make_graph([node], "flatten", [x], [y]))


@pytest.fixture(scope="module")
def own_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batch_models")
    write_model(root, "parse_int", parse_int_model(), PARSE_CONFIG)
    write_model(root, "flatten", flatten_model(), FLAT_CONFIG)
    write_model(root, "spin", spin_model(40, batched=True), SPIN_CONFIG)
    return root


@pytest.fixture(scope="module")
def server(example_repo: Path, own_repo: Path) -> Iterator[ServerProcess]:
    with running_server([example_repo, own_repo]) as proc:
        yield proc


def batch(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "batch", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def read_output(folder: Path) -> pa.Table:
    return pads.dataset(folder, format="parquet").to_table().sort_by("row")


def served(
    server: ServerProcess, model: str, inputs: dict[str, np.ndarray[Any, Any]], outputs: list[str]
) -> dict[str, np.ndarray[Any, Any]]:
    """The server's answers for ``inputs`` (rows first), asked 8 rows at a time."""
    client = httpclient.InferenceServerClient(server.http_url)
    rows = next(iter(inputs.values())).shape[0]
    parts: dict[str, list[np.ndarray[Any, Any]]] = {name: [] for name in outputs}
    try:
        for start in range(0, rows, 8):
            tensors = []
            for name, array in inputs.items():
                part = array[start : start + 8]
                tensor = httpclient.InferInput(name, list(part.shape), _datatype(part))
                tensor.set_data_from_numpy(part)
                tensors.append(tensor)
            result = client.infer(model, tensors)
            for name in outputs:
                parts[name].append(result.as_numpy(name))
    finally:
        client.close()
    return {name: np.concatenate(p) for name, p in parts.items()}


def _datatype(array: np.ndarray[Any, Any]) -> str:
    return {"int32": "INT32", "float32": "FP32", "object": "BYTES"}[array.dtype.name]


def bad_rows(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "_bad_rows.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def column(table: pa.Table, name: str) -> np.ndarray[Any, Any]:
    return np.array(table.column(name).to_pylist())


def test_parquet_and_npz_outputs_equal_the_servers(
    server: ServerProcess, example_repo: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, (100, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, (100, 16), dtype=np.int32)
    pq.write_table(
        pa.table(
            {
                "INPUT0": pa.FixedSizeListArray.from_arrays(pa.array(a.ravel()), 16),
                "INPUT1": pa.array(list(b)),  # a plain list column works too
            }
        ),
        tmp_path / "rows.parquet",
        row_group_size=30,
    )
    np.savez(tmp_path / "rows.npz", INPUT0=a, INPUT1=b)
    want = served(server, "simple", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"])
    for source in ("rows.parquet", "rows.npz"):
        out = tmp_path / f"out-{source}"
        done = batch("simple", "--model-repository", example_repo, "--input",
                     tmp_path / source, "--output", out, "--shard-rows", "32")  # fmt: skip
        assert "100 rows written, 0 bad rows, 4 shard(s)" in done.stdout
        table = read_output(out)
        assert table.column_names == ["row", "OUTPUT0", "OUTPUT1"]
        assert table.column("row").to_pylist() == list(range(100))
        np.testing.assert_array_equal(column(table, "OUTPUT0"), want["OUTPUT0"])
        np.testing.assert_array_equal(column(table, "OUTPUT1"), want["OUTPUT1"])
        assert sorted(p.name for p in out.iterdir()) == [
            "_manifest.json",
            *(f"part-0000{i}.parquet" for i in range(4)),
        ]


def test_csv_features_and_image_folders_equal_the_servers(
    server: ServerProcess, example_repo: Path, own_repo: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(2)
    features = rng.integers(0, 17, (40, 64)).astype(np.float32)
    pacsv.write_csv(
        pa.table({f"pixel{i}": features[:, i] for i in range(64)}), tmp_path / "digits.csv"
    )
    want = served(server, "digits", {"input": features}, ["probabilities"])
    batch("digits", "--model-repository", example_repo, "--input", tmp_path / "digits.csv",
          "--output", tmp_path / "csv-out", "--outputs", "probabilities")  # fmt: skip
    table = read_output(tmp_path / "csv-out")
    assert table.column_names == ["row", "probabilities"]
    np.testing.assert_allclose(column(table, "probabilities"), want["probabilities"], atol=1e-6)

    images = tmp_path / "images"
    images.mkdir()
    pixels = rng.integers(0, 256, (12, 4, 5, 3), dtype=np.uint8)  # height, width, RGB
    for i, image in enumerate(pixels):
        Image.fromarray(image, mode="RGB").save(images / f"img{i:02d}.png")
    (images / "img99.png").write_bytes(b"not an image")
    scale = 1 / 255
    as_input = pixels.transpose(0, 3, 1, 2).astype(np.float32) * np.float32(scale)
    want = served(server, "flatten", {"IMAGE": as_input}, ["FLAT"])
    done = batch("flatten", "--model-repository", own_repo, "--input", images,
                 "--output", tmp_path / "img-out", "--image-scale", str(scale))  # fmt: skip
    assert "12 rows written, 1 bad rows" in done.stdout
    np.testing.assert_array_equal(column(read_output(tmp_path / "img-out"), "FLAT"), want["FLAT"])
    bad = bad_rows(tmp_path / "img-out")
    assert [b["row"] for b in bad] == [12]
    assert "img99.png" in bad[0]["reason"]


def test_v2_json_requests_are_rows(
    server: ServerProcess, example_repo: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "requests"
    folder.mkdir()
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (6, 16), dtype=np.int32)
    for name, (lo, hi) in {"r1": (0, 2), "r2": (2, 3), "r3": (3, 6)}.items():
        body = {
            "inputs": [
                {"name": n, "shape": [hi - lo, 16], "datatype": "INT32",
                 "data": a[lo:hi].ravel().tolist()}
                for n in ("INPUT0", "INPUT1")
            ]
        }  # fmt: skip
        (folder / f"{name}.json").write_text(json.dumps(body))
    (folder / "r4.json").write_text('{"inputs": [')
    batch("simple", "--model-repository", example_repo, "--input", folder,
          "--output", tmp_path / "out")  # fmt: skip
    table = read_output(tmp_path / "out")
    want = served(server, "simple", {"INPUT0": a, "INPUT1": a}, ["OUTPUT0"])
    assert table.column("row").to_pylist() == list(range(6))
    np.testing.assert_array_equal(column(table, "OUTPUT0"), want["OUTPUT0"])
    bad = bad_rows(tmp_path / "out")
    assert [(b["row"], "r4.json" in b["reason"]) for b in bad] == [(6, True)]


def test_bad_rows_are_reported_and_the_rest_written(
    server: ServerProcess, example_repo: Path, own_repo: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(4)
    rows = [list(rng.integers(0, 17, 64).astype(float)) for _ in range(20)]
    rows[3][5] = float("nan")
    rows[11] = rows[11][:63]
    pq.write_table(pa.table({"input": pa.array(rows)}), tmp_path / "digits.parquet")
    done = batch("digits", "--model-repository", example_repo, "--input",
                 tmp_path / "digits.parquet", "--output", tmp_path / "out")  # fmt: skip
    assert "18 rows written, 2 bad rows" in done.stdout
    bad = {b["row"]: b["reason"] for b in bad_rows(tmp_path / "out")}
    assert sorted(bad) == [3, 11]
    assert "NaN" in bad[3]
    assert "shape [63]" in bad[11]
    table = read_output(tmp_path / "out")
    good = [i for i in range(20) if i not in bad]
    assert table.column("row").to_pylist() == good
    want = served(server, "digits", {"input": np.array([rows[i] for i in good], np.float32)},
                  ["label"])  # fmt: skip
    np.testing.assert_array_equal(column(table, "label"), want["label"])

    # a row the model itself fails on takes its batch down: bisection finds it
    texts = [str(i) for i in range(20)]
    texts[6], texts[17] = "six", "x17"
    pq.write_table(pa.table({"TEXT": texts}), tmp_path / "texts.parquet")
    done = batch("parse_int", "--model-repository", own_repo, "--input",
                 tmp_path / "texts.parquet", "--output", tmp_path / "parsed")  # fmt: skip
    assert "18 rows written, 2 bad rows" in done.stdout
    bad = {b["row"]: b["reason"] for b in bad_rows(tmp_path / "parsed")}
    assert sorted(bad) == [6, 17]
    assert all("the model failed on it" in reason for reason in bad.values())
    table = read_output(tmp_path / "parsed")
    assert column(table, "NUMBER")[:, 0].tolist() == [i for i in range(20) if i not in (6, 17)]


def _finished(out: Path) -> dict[str, Any]:
    try:
        finished: dict[str, Any] = json.loads((out / "_manifest.json").read_text())["finished"]
    except (OSError, ValueError, KeyError):
        return {}
    return finished


def test_a_killed_job_resumes_without_redoing_finished_shards(
    own_repo: Path, tmp_path: Path
) -> None:
    values = np.arange(1, 401, dtype=np.int32) % 7 + 1
    np.savez(tmp_path / "spin.npz", IN=values.reshape(-1, 1))
    out = tmp_path / "out"
    args = ["spin", "--model-repository", own_repo, "--input", tmp_path / "spin.npz",
            "--output", out, "--shard-rows", "8", "--in-flight", "1"]  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-m", "inferd.cli.main", "batch", *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while len(_finished(out)) < 3 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    finished = _finished(out)
    assert 3 <= len(finished) < 50, "the job was not caught mid-way"
    kept = {name: (out / f"part-{int(name):05d}.parquet").stat().st_mtime_ns for name in finished}

    done = batch(*args)
    assert f"{len(finished)} finished before" in done.stdout
    for name, mtime in kept.items():
        assert (out / f"part-{int(name):05d}.parquet").stat().st_mtime_ns == mtime
    table = read_output(out)
    assert table.column("row").to_pylist() == list(range(400))
    assert column(table, "OUT")[:, 0].tolist() == values.tolist()
    assert len(_finished(out)) == 50
    assert not [p for p in out.iterdir() if p.name.startswith(".")]

    # another job into the same folder is refused in one line
    refused = batch("spin", "--model-repository", own_repo, "--input", tmp_path / "spin.npz",
                    "--output", out, "--shard-rows", "16", check=False)  # fmt: skip
    assert refused.returncode == 2
    assert "holds the output of another job (it differs in: shard_rows)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_mistakes_are_one_line_errors(
    example_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.savez(tmp_path / "x.npz", INPUT0=np.zeros((2, 16), np.int32))
    common = ["--model-repository", example_repo, "--output", tmp_path / "o"]
    # caught before any model loads: in process
    for expected, args in {
        "--input": ["simple", "--input", tmp_path / "missing.parquet"],
        "add --ray": ["simple", "--input", tmp_path / "x.npz", "--ray-actors", "3"],
    }.items():
        assert main(["batch", *map(str, [*args, *common])]) == 2
        err = capsys.readouterr().err
        assert expected in err
        assert len(err.strip().splitlines()) == 1
    # found once the model is loaded: the command itself
    for expected, args in {
        "no column for the model's input(s) INPUT1": ["simple", "--input", tmp_path / "x.npz"],
        "max_batch_size 8": ["simple", "--input", tmp_path / "x.npz", "--batch-size", "9"],
        "has no output": ["simple", "--input", tmp_path / "x.npz", "--outputs", "NOPE"],
    }.items():
        done = batch(*args, *common, check=False)
        assert done.returncode == 2, (expected, done.stderr)
        assert expected in done.stderr
        assert "Traceback" not in done.stderr
