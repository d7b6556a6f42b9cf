"""The results directory: lines written as results come, read back by a rerun, refused when the
settings differ, and robust to a line cut short by an interrupted write."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.objective import Measurement, PointFigures
from inferd.tools.analyze.space import Candidate
from inferd.tools.analyze.store import MEASUREMENTS_FILE, ResultStore

SETTINGS = {"concurrency": [1, 4], "measurement_interval_ms": 500}


def measurement(key: str, model: str = "m", throughput: float = 100.0) -> Measurement:
    latency = {"avg": 10.0, "p50": 9.0, "p90": 12.0, "p95": 13.0, "p99": 20.0}
    return Measurement(
        model,
        key,
        Candidate(2, 8, True, 100, (4,), 1, None),
        (PointFigures(1, throughput, latency, stable=False, errors=2),),
        123.5,
    )


def test_a_rerun_reads_what_the_first_run_wrote(tmp_path: Path) -> None:
    first = ResultStore(tmp_path, SETTINGS)
    first.append(measurement("default"))
    first.append(measurement("i2-b8-q100-p4-t1", model="other"))
    again = ResultStore(tmp_path, SETTINGS)
    assert again.measurements() == [
        measurement("default"),
        measurement("i2-b8-q100-p4-t1", "other"),
    ]
    assert again.measurements("m") == [measurement("default")]
    assert again.get("other", "i2-b8-q100-p4-t1") == measurement("i2-b8-q100-p4-t1", "other")
    assert again.get("m", "nope") is None


def test_the_last_line_of_a_key_wins(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, SETTINGS)
    store.append(measurement("k", throughput=1.0))
    store.append(measurement("k", throughput=2.0))
    (kept,) = ResultStore(tmp_path, SETTINGS).measurements()
    assert kept.points[0].throughput == 2.0


def test_other_settings_are_refused_naming_what_differs(tmp_path: Path) -> None:
    ResultStore(tmp_path, SETTINGS).append(measurement("default"))
    with pytest.raises(InvalidArgumentError, match=r"other settings \(concurrency\)"):
        ResultStore(tmp_path, {**SETTINGS, "concurrency": [1, 8]})


def test_a_line_cut_short_is_skipped_and_the_next_one_starts_on_its_own_line(
    tmp_path: Path,
) -> None:
    store = ResultStore(tmp_path, SETTINGS)
    store.append(measurement("a"))
    path = tmp_path / MEASUREMENTS_FILE
    with path.open("a", encoding="utf-8") as out:
        out.write('{"model": "m", "key": "b", "cand')  # the write an interrupt cut short
    resumed = ResultStore(tmp_path, SETTINGS)
    assert resumed.skipped_lines == 1
    resumed.append(measurement("c"))
    final = ResultStore(tmp_path, SETTINGS)
    assert [m.key for m in final.measurements()] == ["a", "c"]
    assert final.skipped_lines == 1
