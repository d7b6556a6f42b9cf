"""``inferd plan --models``: pods for a catalogue of models loaded on demand within a budget,
from one size or measured sizes, and its one-line refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from inferd.cli.main import main
from inferd.tools.scaling.model_cache import ModelFleet, sharded, zipf_popularity


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _needed(out: str) -> int:
    match = re.search(r"pods needed for .*: (\d+)$", out, re.MULTILINE)
    assert match is not None, out
    return int(match.group(1))


def test_one_size_for_every_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "--models", "1000",
        "--model-size", "100MiB",
        "--pod-budget", "5100MiB",
        "--baseline", "100MiB",
        "--zipf", "1.0",
        "--target-hit-ratio", "0.9",
    )  # fmt: skip
    assert code == 0, err
    assert "1000 models" in out
    assert "every pod serving every model: hit ratio 0.461" in out
    fleet = ModelFleet(np.full(1000, 100.0), zipf_popularity(1000, 1.0), 5000.0)
    needed = _needed(out)
    assert sharded(fleet, needed).hit_ratio >= 0.9 > sharded(fleet, needed - 1).hit_ratio
    assert re.search(rf"^\s+{needed}\s+0\.9\d\d\s+50\.0$", out, re.MULTILINE), out


def test_rate_and_load_time_add_pods_and_columns(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--models", "1000", "--model-size", "100MiB", "--pod-budget", "5000MiB"]
    _, hits_only, _ = run(capsys, *base)
    code, out, err = run(capsys, *base, "--rate", "1000", "--load-time", "500ms")
    assert code == 0, err
    assert "loads/s per pod" in out
    assert "time loading" in out
    assert "at most 50% of a pod's time loading" in out
    assert _needed(out) > _needed(hits_only)


def test_measured_sizes_from_a_repository_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = [
        {"name": "a", "version": "1", "state": "READY", "memory_bytes": str(3 << 30)},
        {"name": "b", "state": "UNAVAILABLE", "memory_bytes": str(1 << 30)},
        {"name": "c", "state": "UNAVAILABLE", "memory_bytes": str(1 << 30)},
    ]
    path = tmp_path / "index.json"
    path.write_text(json.dumps(index))
    code, out, err = run(capsys, "--model-sizes", str(path), "--pod-budget", "4GiB")
    assert code == 0, err
    assert "3 models (1.0 GiB to 3.0 GiB, 5.0 GiB in all)" in out
    assert _needed(out) == 2  # one pod holds a and c, or b; two hold all


def test_sizes_as_lines_and_a_model_too_big_for_any_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sizes.txt"
    path.write_text("# name, size\nbig, 10GiB\nsmall 1GiB\n2GiB\n")
    code, out, _ = run(capsys, "--model-sizes", str(path), "--pod-budget", "4GiB")
    assert "1 models are larger than a pod's room: never loaded (refused)" in out
    assert code == 1  # the most popular model can never be served: no hit ratio of 0.9
    assert "no number of pods up to 1000 gives a hit ratio >= 0.9" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--models", "10", "--model-size", "1GiB"], "--models needs --pod-budget"),
        (["--models", "10", "--pod-budget", "1GiB"], "one of --model-size and --model-sizes"),
        (
            ["--models", "10", "--model-size", "1GiB", "--pod-budget", "50%"],
            "--pod-budget '50%': give bytes",
        ),
        (
            ["--models", "10", "--model-size", "1GiB", "--pod-budget", "2GiB", "--zipf", "-1"],
            "--zipf must be a number >= 0",
        ),
        (
            ["--models", "10", "--model-size", "1G", "--pod-budget", "2G", "--load-time", "1s"],
            "--load-time needs --rate",
        ),
        (
            ["--models", "10", "--model-size", "1G", "--pod-budget", "2G", "--baseline", "2G"],
            "--baseline must be less than --pod-budget",
        ),
        (
            ["--models", "10", "--model-size", "1G", "--pod-budget", "2G", "--max-replicas", "3"],
            "--max-replicas do not apply with --models",
        ),
        ([], "--capacity and --traffic are required (or --models"),
    ],
)
def test_refusals(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *args)
    assert code == 2
    assert message in err


def test_sizes_that_do_not_match_models_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sizes.json"
    path.write_text(json.dumps({"a": 1e9, "b": 2e9}))
    code, _, err = run(capsys, "--models", "3", "--model-sizes", str(path), "--pod-budget", "4G")
    assert code == 2
    assert "--models 3 but" in err
    path.write_text(json.dumps([{"name": "a"}]))
    code, _, err = run(capsys, "--model-sizes", str(path), "--pod-budget", "4G")
    assert "model 'a' has no memory_bytes" in err


def test_the_cost_policy_is_planned_with_its_size_aware_ceiling(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 300 small models and 10 large ones among them: a fifth of the bytes per pod
    sizes = ["2MiB"] * 310
    for k in range(10):
        sizes[k * 31 + 5] = "300MiB"
    listed = tmp_path / "sizes.txt"
    listed.write_text("\n".join(sizes) + "\n")
    common = ["--models", "310", "--model-sizes", str(listed), "--zipf", "1.1"]
    common += ["--pod-budget", "800MiB", "--baseline", "80MiB", "--target-hit-ratio", "0.9"]
    code, lru_out, err = run(capsys, *common)
    assert code == 0, err
    code, cost_out, err = run(capsys, *common, "--eviction", "cost")
    assert code == 0, err
    assert "--model-eviction cost's ceiling" in cost_out
    assert "Che's approximation" in lru_out
    assert _needed(cost_out) < _needed(lru_out)
