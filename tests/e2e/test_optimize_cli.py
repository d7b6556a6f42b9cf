"""``inferd optimize`` end to end: the command serves the baseline and each candidate in process,
judges them, and writes the winner as the model's next version, which a fresh ``inferd serve``
loads beside the old one and answers through ``tritonclient`` exactly as the candidate file does
under ONNX Runtime; a candidate that breaks the accuracy budget leaves the repository alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from inferd.testing import running_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST = ["--measurement-interval", "150", "--max-trials", "3", "--batch-sizes", "1,4"]


def _mlp(path: Path, w1: np.ndarray, w2: np.ndarray, padding: int = 0) -> None:
    """x[N,4] -> relu(x W1) W2 -> y[N,3]; ``padding`` floats of an unused initializer make the
    file bigger without changing what it computes."""
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    if padding:
        inits.append(numpy_helper.from_array(np.ones(padding, np.float32), "unused"))
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


CONFIG = """# the test's MLP
name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path, Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w1 = rng.normal(size=(4, 16)).astype(np.float32)
    w2 = rng.normal(size=(16, 3)).astype(np.float32)
    repo = tmp_path / "repo"
    _mlp(repo / "mlp" / "1" / "model.onnx", w1, w2, padding=200_000)
    (repo / "mlp" / "config.pbtxt").write_text(CONFIG)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    labels = np.argmax(np.maximum(x @ w1, 0) @ w2, axis=1)
    calibration, evaluation = tmp_path / "calibration.npz", tmp_path / "eval.npz"
    np.savez(calibration, x=x[:32])
    np.savez(evaluation, x=x[32:], label=labels[32:])
    return repo, calibration, evaluation, tmp_path, w1, w2


def optimize(*args: str | Path, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "optimize", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_the_winner_is_written_as_a_new_version_that_serves(
    setup: tuple[Path, Path, Path, Path, np.ndarray, np.ndarray],
) -> None:
    repo, calibration, evaluation, tmp, w1, w2 = setup
    smaller = tmp / "smaller.onnx"
    _mlp(smaller, w1, w2)  # the same function without the dead weight
    results = tmp / "results"
    done = optimize(
        "mlp", "--model-repository", repo, "--calibration", calibration, "--eval", evaluation,
        "--only", "none", "--candidate", smaller, "--objective", "size", "--results", results,
        *FAST,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads((results / "report.json").read_text())
    assert report["decision"]["winner"] == "extra-smaller"
    assert report["written"]["version"] == 2
    assert report["candidates"][0]["quality"]["metric"] == "accuracy"
    assert report["candidates"][1]["quality"]["figures"]["cosine"] == pytest.approx(1.0)
    assert (results / "report.html").read_text().count("plotly") > 0
    assert "winner: extra-smaller" in done.stdout
    assert (repo / "mlp" / "2" / "model.onnx").is_file()
    provenance = json.loads((repo / "mlp" / "2" / "optimized.json").read_text())
    assert provenance["candidate"] == "extra-smaller"
    config = (repo / "mlp" / "config.pbtxt").read_text()
    assert config.startswith("# the test's MLP")  # the comments survive
    assert "num_versions: 2" in config

    rows = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    direct = ort.InferenceSession(str(smaller), providers=["CPUExecutionProvider"])
    expected = direct.run(None, {"x": rows})[0]
    with running_server([repo]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        for version, want in (("2", expected), ("1", expected), ("", expected)):
            request = httpclient.InferInput("x", list(rows.shape), "FP32")
            request.set_data_from_numpy(rows)
            answer = client.infer("mlp", [request], model_version=version)
            np.testing.assert_allclose(answer.as_numpy("y"), want, rtol=1e-6, atol=1e-6)
            assert answer.get_response()["model_version"] == (version or "2")


def test_a_candidate_outside_the_budget_leaves_the_repository_alone(
    setup: tuple[Path, Path, Path, Path, np.ndarray, np.ndarray],
) -> None:
    repo, calibration, evaluation, tmp, w1, w2 = setup
    broken = tmp / "broken.onnx"
    _mlp(broken, w1, -w2)  # small, but every prediction changes
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    config_before = (repo / "mlp" / "config.pbtxt").read_text()
    done = optimize(
        "mlp", "--model-repository", repo, "--calibration", calibration, "--eval", evaluation,
        "--only", "none", "--candidate", broken, "--objective", "size",
        "--results", tmp / "results", *FAST,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr + done.stdout
    assert "misses the accuracy budget" in done.stdout
    assert "the baseline stays" in done.stdout
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before
    assert (repo / "mlp" / "config.pbtxt").read_text() == config_before


def test_usage_errors_are_one_line(
    setup: tuple[Path, Path, Path, Path, np.ndarray, np.ndarray],
) -> None:
    repo, calibration, evaluation, tmp, _, _ = setup
    done = optimize(
        "mlp", "--model-repository", repo, "--calibration", calibration, "--eval", evaluation,
        "--metric", "accuracy", "--accuracy-budget", "lots",
    )  # fmt: skip
    assert done.returncode == 2
    assert "--accuracy-budget 'lots'" in done.stderr
    assert "Traceback" not in done.stderr
    missing = optimize(
        "nope", "--model-repository", repo, "--calibration", calibration, "--eval", evaluation,
        "--results", tmp / "r",
    )  # fmt: skip
    assert missing.returncode == 2
    assert "no model 'nope'" in missing.stderr


def test_mixed_precision_repairs_what_plain_int8_breaks(tmp_path: Path) -> None:
    """One activation channel 1000x the others: every static INT8 candidate misses a 1% cosine
    budget; the repair keeps the nodes around the outlier in float and meets it."""
    from tests.unit.test_optimize_repair import outlier_model

    repo = tmp_path / "repo"
    (repo / "outlier" / "1").mkdir(parents=True)
    onnx.save(outlier_model(), str(repo / "outlier" / "1" / "model.onnx"))
    (repo / "outlier" / "config.pbtxt").write_text(
        'name: "outlier"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 16\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 8 ] } ]\n'
    )
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "calibration.npz", X=rng.normal(size=(64, 16)).astype(np.float32))
    np.savez(tmp_path / "eval.npz", X=rng.normal(size=(128, 16)).astype(np.float32))
    results = tmp_path / "results"
    done = optimize(
        "outlier", "--model-repository", repo, "--calibration", tmp_path / "calibration.npz",
        "--eval", tmp_path / "eval.npz", "--only", "int8-static,int8-mixed", "--dry-run",
        "--results", results, *FAST,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr + done.stdout
    report = json.loads((results / "report.json").read_text())
    by_name = {c["name"]: c for c in report["candidates"]}
    assert report["decision"]["reasons"]["int8-static-minmax"].startswith("cosine")
    for name in ("int8-static-minmax", "int8-static-minmax-pc"):
        assert by_name[name]["quality"]["value"] < 0.99
    mixed = by_name["int8-mixed"]
    assert mixed["skipped"] is None
    assert mixed["quality"]["value"] >= 0.99
    excluded = mixed["recipe"]["excluded"]
    assert excluded
    assert set(excluded) <= {"mm_a", "mm_b", "mm_c", "mm_d"}
    assert {"mm_b", "mm_c"} & set(excluded)
    assert report["sensitivity"]
    assert "misses the accuracy budget" not in report["decision"]["reasons"].get("int8-mixed", "")
    assert not (repo / "outlier" / "2").exists()  # --dry-run
