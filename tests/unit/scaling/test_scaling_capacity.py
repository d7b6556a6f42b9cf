"""Reading one replica's capacity curve from what ``inferd perf`` writes (its JSON document and
perf_analyzer's CSV, produced here by perf's own writers), and reading the curve back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.report import csv_text, json_text
from inferd.tools.perf.server_split import ServerSplit
from inferd.tools.perf.summary import LoadPoint
from inferd.tools.scaling.capacity import CapacityCurve, CurvePoint, load_curve, parse_curve

# concurrency, throughput, p50, p99, queue (µs), server CPU seconds over the 3 s point
MEASURED = [
    (1, 400.0, 2400.0, 4000.0, 100.0, 1.2),
    (2, 700.0, 2800.0, 5000.0, 300.0, 2.1),
    (4, 1000.0, 4000.0, 8000.0, 1200.0, 3.0),
    (8, 1150.0, 7000.0, 14000.0, 4000.0, 3.3),
    (16, 1100.0, 14000.0, 30000.0, 11000.0, 3.3),  # past the peak: dropped
]


def _points(batch: int = 1) -> list[LoadPoint]:
    out = []
    for level, throughput, p50, p99, queue, cpu_s in MEASURED:
        out.append(
            LoadPoint(
                mode="concurrency",
                level=level,
                batch_size=batch,
                stable=True,
                windows=3,
                request_count=int(throughput * 3 / batch),
                error_count=0,
                duration_s=3.0,
                throughput=throughput,
                avg_latency_us=p50 * 1.1,
                std_latency_us=10.0,
                percentiles_us={50: p50, 90: p50 * 1.4, 95: p50 * 1.6, 99: p99},
                stabilising_percentile=None,
                server=ServerSplit(300, 300, 300, p50, queue, 10.0, 2000.0, 10.0, 100.0),
                cost={"server_cpu_s": cpu_s, "server_cpu_s_per_1000": 1.0},
            )
        )
    return out


def test_an_inferd_perf_json_document() -> None:
    curve = parse_curve(json_text(_points(), {"model": "m"}), "perf.json")
    assert [p.rps for p in curve.points] == [400.0, 700.0, 1000.0, 1150.0]
    assert curve.max_rps == 1150.0
    assert curve.has_queue
    assert curve.has_cpu
    assert curve.points[0].queue_us == 100.0
    assert curve.cpu_cores_at(1000.0) == pytest.approx(1.0)  # 3.0 CPU-s over 3 s
    assert curve.cpu_cores_at(0.0) == 0.0
    assert curve.percentile_levels == (50, 90, 95, 99)


def test_a_json_curve_counts_requests_not_inferences() -> None:
    curve = parse_curve(json_text(_points(batch=4), {}), "perf.json")
    assert curve.max_rps == pytest.approx(1150.0 / 4)


def test_a_perf_analyzer_csv() -> None:
    curve = parse_curve(csv_text(_points()), "perf.csv")
    assert [p.rps for p in curve.points] == [400.0, 700.0, 1000.0, 1150.0]
    assert curve.has_queue
    assert not curve.has_cpu
    assert curve.cpu_cores_at(500.0) is None
    assert parse_curve(csv_text(_points()), "perf.csv", batch_size=2).max_rps == 575.0


def test_a_csv_without_server_statistics_estimates_the_queue_from_latency() -> None:
    text = (
        "Concurrency,Inferences/Second,Server Queue,p50 latency,p99 latency\n"
        "1,100,0,1000,2000\n2,180,0,1100,2500\n4,200,0,2000,5000\n"
    )
    curve = parse_curve(text, "c.csv")
    assert not curve.has_queue
    # the latency added over the lightest point: 2000 - 1000 at the peak
    assert curve.queue_us_at(200.0) == 1000.0
    assert curve.pending_at(200.0) == pytest.approx(200 * 0.001)


def test_reading_back_by_throughput() -> None:
    curve = parse_curve(json_text(_points(), {}), "perf.json")
    assert curve.percentiles_at(550.0)[50] == pytest.approx(2600.0)
    assert curve.percentiles_at(10.0)[99] == 4000.0  # held below the lightest point
    assert curve.queue_us_at(850.0) == pytest.approx(750.0)
    assert curve.pending_at(1000.0) == pytest.approx(1.2)  # 1000/s x 1.2 ms


def test_the_quantile_function_passes_through_the_measured_percentiles() -> None:
    curve = parse_curve(json_text(_points(), {}), "perf.json")
    q = curve.quantiles_us(700.0, np.array([0.01, 0.5, 0.9, 0.95, 0.99, 0.999]))
    assert q[1:5] == pytest.approx([2800.0, 3920.0, 4480.0, 5000.0])
    assert np.all(np.diff(q) > 0)  # the tails continue the nearest segment
    assert 0 < q[0] < 2800.0
    assert q[5] > 5000.0


def test_a_file(tmp_path: Path) -> None:
    path = tmp_path / "perf.json"
    path.write_text(json_text(_points(), {}))
    assert load_curve(path).max_rps == 1150.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"format": "other"}', "not a file written by 'inferd perf --json-output'"),
        ("{not json", "not valid JSON"),
        ("a,b\n1,2\n", "needs perf_analyzer's columns"),
        ("Concurrency,Inferences/Second,p50 latency,p99 latency\n1,x,2,3\n", "not a number"),
        ("Concurrency,Inferences/Second,p50 latency,p99 latency\n1,0,2,3\n", "no load point"),
        ("", "empty"),
    ],
)
def test_bad_curves_are_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_curve(text, "f")


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        load_curve(tmp_path / "none.json")


def test_a_curve_must_rise_and_have_p50_and_p99() -> None:
    p: dict[str, Any] = {"percentiles_us": {50: 1.0, 99: 2.0}}
    with pytest.raises(InvalidArgumentError, match="rise"):
        CapacityCurve((CurvePoint(rps=2.0, **p), CurvePoint(rps=1.0, **p)))
    with pytest.raises(InvalidArgumentError, match="p50 and p99"):
        CapacityCurve((CurvePoint(rps=2.0, percentiles_us={50: 1.0}),))
