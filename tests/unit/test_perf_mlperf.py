"""MLPerf scenarios: LoadGen's summary read back, each scenario's figure in MLPerf's terms, the
server scenario's QPS search, and the flags of ``--scenario`` runs."""

from __future__ import annotations

import pytest

from inferd.cli.main import main
from inferd.tools.perf.mlperf import Run, Scenario, next_target, parse_summary, result_of

SINGLE_STREAM = """================================================
MLPerf Results Summary
================================================
SUT name : PySUT
Scenario : SingleStream
Mode     : PerformanceOnly
90.0th percentile latency (ns) : 123456
Result is : VALID
  Min duration satisfied : Yes
  Min queries satisfied : Yes
  Early stopping satisfied: Yes
Early Stopping Result:
 * Processed at least 64 queries (10001).
 * Early stopping 90.0th percentile estimate: 2634

================================================
Additional Stats
================================================
QPS w/ loadgen overhead         : 137106.56
99.00 percentile latency (ns)   : 3905
"""


def test_the_summary_is_read_into_keys_and_values() -> None:
    summary = parse_summary(SINGLE_STREAM)
    assert summary["Scenario"] == "SingleStream"
    assert summary["90.0th percentile latency (ns)"] == "123456"
    assert summary["Result is"] == "VALID"
    assert summary["Early stopping satisfied"] == "Yes"
    assert summary["99.00 percentile latency (ns)"] == "3905"
    assert not any(k.startswith("*") for k in summary)


def _run(summary: dict[str, str], valid: bool = True, qps: float | None = None) -> Run:
    return Run(qps, valid, summary, 0, "logs")


def test_each_scenario_reports_its_mlperf_figure() -> None:
    single = result_of(Scenario.SINGLE_STREAM, [_run(parse_summary(SINGLE_STREAM))])
    assert (single.metric, single.value, single.unit) == (
        "90th percentile latency",
        123.456,
        "usec",
    )
    assert single.valid
    assert single.text() == "MLPerf single-stream: 90th percentile latency: 123.456 usec — VALID"
    multi = result_of(
        Scenario.MULTI_STREAM, [_run({"99.0th percentile latency (ns)": "2000000"}, False)]
    )
    assert multi.value == 2000.0
    assert multi.text().endswith("— INVALID")
    offline = result_of(Scenario.OFFLINE, [_run({"Samples per second": "5000.5"})])
    assert (offline.value, offline.unit) == (5000.5, "samples/s")


def test_the_server_result_is_the_highest_valid_target() -> None:
    runs = [_run({}, True, 100), _run({}, False, 200), _run({}, True, 150), _run({}, False, 175)]
    result = result_of(Scenario.SERVER, runs)
    assert result.value == 150
    assert result.valid
    none = result_of(Scenario.SERVER, [_run({}, False, 100)])
    assert none.value is None
    assert not none.valid


def test_the_server_search_doubles_then_halves_the_gap() -> None:
    assert next_target([(100, True)]) == 200
    assert next_target([(100, True), (200, False)]) == 150
    assert next_target([(100, True), (200, False), (150, True)]) == 175
    assert next_target([(100, False)]) == 50
    assert next_target([(100, False), (50, True)]) == 75
    assert next_target([(1.5, False)]) is None  # nothing below 1 QPS is tried


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "server"], "--scenario server needs --latency-bound-ms"),
        (["--scenario", "offline", "--concurrency-range", "2"], "cannot be used with --scenario"),
        (["--scenario", "offline", "-f", "x.csv"], "-f cannot be used with --scenario"),
        (["--latency-bound-ms", "5"], "applies to --scenario runs only"),
        (["--target-qps", "5"], "applies to --scenario runs only"),
    ],
)
def test_scenario_flags_are_checked(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["perf", "-m", "simple", *argv]) == 2
    assert message in capsys.readouterr().err
