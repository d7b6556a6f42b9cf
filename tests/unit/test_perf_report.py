"""What ``inferd perf`` writes: perf_analyzer's CSV, the JSON document, the terminal text, the
client-bottleneck verdict and the baseline gate."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from typing import Any

import pytest

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.report import (
    client_verdict,
    csv_header,
    csv_text,
    gate_failures,
    json_document,
    json_text,
    point_text,
    summary_text,
)
from inferd.tools.perf.server_split import ServerSplit
from inferd.tools.perf.summary import LoadPoint

PA_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency"
)


def _point(level: float, throughput: float, mode: str = "concurrency", **kw: Any) -> LoadPoint:
    base = LoadPoint(
        mode=mode,
        level=level,
        batch_size=1,
        stable=True,
        windows=3,
        request_count=int(throughput * 3),
        error_count=0,
        duration_s=3.0,
        throughput=throughput,
        avg_latency_us=1234.7,
        std_latency_us=100.2,
        percentiles_us={50: 1200.9, 90: 1500.0, 95: 1600.0, 99: 2000.0},
        stabilising_percentile=None,
        server=ServerSplit(
            request_count=300,
            inference_count=300,
            execution_count=300,
            request_us=900.0,
            queue_us=50.4,
            compute_input_us=20.0,
            compute_infer_us=700.9,
            compute_output_us=10.0,
            network_us=453.4,
        ),
    )
    return replace(base, **kw)


def test_the_csv_header_is_perf_analyzers() -> None:
    assert ",".join(csv_header("concurrency", None, verbose=False)) == PA_HEADER
    verbose = ",".join(csv_header("concurrency", None, verbose=True))
    assert verbose == PA_HEADER + ",Avg latency,request/response,response wait"
    rate = csv_header("request-rate", 85, verbose=True)
    assert rate[0] == "Request Rate"
    assert rate[9:14] == ["p50 latency", "p85 latency", "p90 latency", "p95 latency", "p99 latency"]
    assert "Avg latency" not in rate  # perf_analyzer leaves it out when a percentile is chosen


def test_csv_rows_are_microseconds_sorted_by_throughput() -> None:
    text = csv_text([_point(2, 1500.5), _point(1, 800.25)], verbose=True)
    rows = list(csv.reader(io.StringIO(text)))
    assert ",".join(rows[0]) == PA_HEADER + ",Avg latency,request/response,response wait"
    assert rows[1] == [
        "1", "800.25", "0", "453", "50", "20", "700", "10", "0",
        "1200", "1500", "1600", "2000", "1234", "0", "1234",
    ]  # fmt: skip
    assert rows[2][:2] == ["2", "1500.5"]


def test_csv_without_server_statistics_writes_zeros_in_the_server_columns() -> None:
    text = csv_text([_point(1, 100.0, server=None)])
    row = list(csv.reader(io.StringIO(text)))[1]
    assert row[3:8] == ["0"] * 5
    assert csv_text([]) == ""


def test_json_holds_every_figure_and_reads_back() -> None:
    point = _point(4, 321.0, cost={"server_cpu_s_per_1000": 0.5})
    document = json.loads(json_text([point], {"model": "simple"}, ["a note"]))
    assert document == json.loads(
        json.dumps(json_document([point], {"model": "simple"}, ["a note"]))
    )
    entry = document["points"][0]
    assert entry["throughput"] == 321.0
    assert entry["percentiles_us"]["99"] == 2000.0
    assert entry["server"]["compute_infer_us"] == 700.9
    assert entry["cost"]["server_cpu_s_per_1000"] == 0.5
    assert document["settings"] == {"model": "simple"}
    assert document["notes"] == ["a note"]


def test_the_terminal_text_reads_like_perf_analyzer() -> None:
    text = point_text(_point(1, 800.25))
    assert "Request concurrency: 1" in text
    assert "    Throughput: 800.25 infer/sec" in text
    assert "    Avg latency: 1234 usec (standard deviation 100 usec)" in text
    assert "    p99 latency: 2000 usec" in text
    assert "compute infer 700 usec" in text
    assert "Server CPU: unknown" in text
    summary = summary_text([_point(1, 800.25)])
    assert (
        summary.splitlines()[1] == "Concurrency: 1, throughput: 800.25 infer/sec, latency 1234 usec"
    )
    assert "unstable" in point_text(_point(1, 10, stable=False))


def test_the_verdict_names_a_busy_client() -> None:
    assert client_verdict(_point(1, 10, client_cpu_share=0.5), in_process=False) is None
    busy = client_verdict(_point(1, 10, client_cpu_share=0.97), in_process=False)
    assert busy is not None
    assert "97% of one core" in busy
    # in process the server shares the core: CPU share says nothing of the client alone
    assert client_verdict(_point(1, 10, client_cpu_share=0.97), in_process=True) is None
    late = _point(100, 90, mode="request-rate", sent=1000, late_sends=50, max_slip_us=4000)
    verdict = client_verdict(late, in_process=False)
    assert verdict is not None
    assert "5.0% of the sends" in verdict
    on_time = _point(100, 90, mode="request-rate", sent=1000, late_sends=5)
    assert client_verdict(on_time, in_process=False) is None
    assert "[VERDICT] client bottleneck" in point_text(late)


def _baseline(*points: LoadPoint) -> dict[str, Any]:
    return json.loads(json_text(points, {}))


def test_the_gate_passes_without_a_drop() -> None:
    base = _baseline(_point(1, 1000), _point(2, 1800))
    assert gate_failures([_point(1, 950), _point(2, 1700)], base, 0.9) == []


def test_the_gate_names_the_points_that_dropped() -> None:
    base = _baseline(_point(1, 1000), _point(2, 1800))
    failures = gate_failures([_point(1, 950), _point(2, 1500)], base, 0.9)
    assert len(failures) == 1
    assert failures[0].startswith("concurrency 2: 1500.0 infer/sec is below 0.9")


def test_the_gate_checks_p99_when_asked() -> None:
    base = _baseline(_point(1, 1000))
    slower = _point(1, 1000, percentiles_us={50: 1, 90: 1, 95: 1, 99: 2500.0})
    assert gate_failures([slower], base, 0.9) == []
    failures = gate_failures([slower], base, 0.9, check_p99=True)
    assert failures
    assert "p99 2500 usec" in failures[0]


def test_the_gate_refuses_a_foreign_or_unrelated_baseline() -> None:
    with pytest.raises(InvalidArgumentError, match="not a JSON file written by"):
        gate_failures([_point(1, 10)], {"points": []}, 0.9)
    with pytest.raises(InvalidArgumentError, match="shares no load point"):
        gate_failures([_point(8, 10)], _baseline(_point(1, 10)), 0.9)
