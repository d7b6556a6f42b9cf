"""Traffic traces: the built-in shapes, CSV traces, and one-line refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.traffic import parse_duration, parse_traffic, rates


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("500ms", 0.5),
        ("800us", 0.0008),
        ("1.5h", 5400.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_bad_duration() -> None:
    with pytest.raises(InvalidArgumentError, match="not a duration"):
        parse_duration("soon")


def test_a_daily_cycle_peaks_when_asked() -> None:
    traffic = parse_traffic("daily:low=20,high=300,peak=14h")
    r = rates(traffic, 86400)
    assert traffic.natural_duration_s == 86400
    assert r.max() == pytest.approx(300.0, abs=0.01)
    assert r.min() == pytest.approx(20.0, abs=0.01)
    assert abs(int(np.argmax(r)) - 14 * 3600) <= 1
    assert abs(int(np.argmin(r)) - 2 * 3600) <= 1  # twelve hours from the peak


def test_components_add_up() -> None:
    r = rates(parse_traffic("constant:rate=100 + spike:height=50,at=10m,duration=5m,rise=1m"), 1800)
    assert r[0] == 100.0
    assert r[int(9.5 * 60)] == pytest.approx(125.0, abs=1)  # half-way up the edge
    assert r[12 * 60] == 150.0
    assert r[int(15.5 * 60)] == pytest.approx(125.0, abs=1)  # half-way down
    assert r[20 * 60] == 100.0


def test_step_and_ramp() -> None:
    step = rates(parse_traffic("step:from=100,to=250,at=60"), 120)
    assert (step[59], step[60]) == (100.0, 250.0)
    ramp = rates(parse_traffic("ramp:from=0,to=400,start=100,end=200"), 300)
    assert (ramp[50], ramp[150], ramp[250]) == (0.0, pytest.approx(202.0), 400.0)


def test_a_csv_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("time,requests_per_second\n0,10\n60,70\n120,10\n")
    traffic = parse_traffic(f"csv:{path}")
    r = rates(traffic, 180)
    assert traffic.natural_duration_s == 121
    assert r[0] == pytest.approx(10.5)
    assert r[60] == pytest.approx(69.5)
    assert r[170] == 10.0  # the last value held


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("weekly:low=1", "unknown traffic 'weekly'"),
        ("daily:low=1", "give high="),
        ("daily:low=1,high=2,peek=3h", "unknown parameter 'peek'"),
        ("daily:low=5,high=2", "high must be at least low"),
        ("constant:rate=-1", "cannot be negative"),
        ("constant:rate=lots", "not a number"),
        ("spike:height=5,at=1h,duration=0", "longer than 0"),
        ("ramp:from=0,to=1,start=2h,end=1h", "end must come after start"),
        ("step:from=1,to=2,at=soon", "not a duration"),
        ("constant:100", "not key=value"),
        ("csv:", "give the file"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_traffic(spec)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("0,10\n0,20\n", "times must rise"),
        ("0,10\n5,-1\n", "negative"),
        ("time,rps\n", "no 'time,requests_per_second' rows"),
        ("0,10\n5,x\n", "line 2"),
    ],
)
def test_bad_csv_traces(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(InvalidArgumentError, match=message):
        parse_traffic(f"csv:{path}")
