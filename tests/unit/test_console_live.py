"""The console's live figures: pure functions of two statistics snapshots."""

from __future__ import annotations

from inferd.core.statistics import (
    BATCH_BUCKETS,
    LATENCY_BUCKETS_US,
    BatchStat,
    Duration,
    Histogram,
    StatsSnapshot,
)
from inferd.frontends.console.live import (
    ProcessUsage,
    Sample,
    model_window,
    percentile,
    process_usage,
    server_window,
)


def snapshot(
    success: int, *, latencies_us: tuple[float, ...] = (), batches: int = 0, name: str = "m"
) -> StatsSnapshot:
    latency = Histogram.with_bounds(LATENCY_BUCKETS_US)
    for value in latencies_us:
        latency.observe(value)
    return StatsSnapshot(
        name=name,
        version="1",
        last_inference_ms=0,
        inference_count=success,
        execution_count=batches,
        success=Duration(success, success * 1000),
        fail=Duration(0, 0),
        queue=Duration(success, success * 2000),
        compute_input=Duration(success, 0),
        compute_infer=Duration(success, success * 5000),
        compute_output=Duration(success, 0),
        cache_hit=Duration(0, 0),
        cache_miss=Duration(0, 0),
        batch_stats={1: BatchStat(compute_infer=Duration(batches, 0))} if batches else {},
        failures={"BACKEND": 0},
        rejections={},
        batch_close_reasons={},
        pending=3,
        latency_us=latency,
        batch_rows=Histogram.with_bounds(BATCH_BUCKETS),
    )


def test_percentiles_interpolate_within_a_bucket() -> None:
    bounds = (10.0, 20.0, 40.0)
    assert percentile(bounds, [0, 0, 0, 0], 0.5) is None
    assert percentile(bounds, [10, 0, 0, 0], 0.5) == 5.0
    assert percentile(bounds, [0, 10, 0, 0], 0.5) == 15.0
    assert percentile(bounds, [50, 0, 50, 0], 0.99) == 20.0 + 20.0 * 49 / 50
    assert percentile(bounds, [0, 0, 0, 7], 0.5) == 40.0  # overflow: its lower bound


def test_a_window_counts_only_what_happened_in_it() -> None:
    before = snapshot(100, latencies_us=(50.0,) * 100, batches=100)
    after = snapshot(300, latencies_us=(50.0,) * 100 + (3000.0,) * 200, batches=300)
    window = model_window(before, after, 2.0, detail=True)
    assert window["rps"] == 100.0  # 200 requests in 2 s
    assert window["errors_per_s"] == 0.0
    assert 2500 < window["p50_us"] <= 5000  # the new requests only, not the old fast ones
    assert window["split_us"] == {"queue": 2.0, "input": 0.0, "infer": 5.0, "output": 0.0}
    assert window["batches"] == {"1": 200}
    assert window["totals"]["success"] == 300
    first = model_window(None, after, 1.0)  # a version that just appeared: an empty window
    assert first["rps"] == 0.0
    assert first["p99_us"] is None
    assert "totals" not in first


def test_the_server_window_sums_models_and_details_one() -> None:
    usage = ProcessUsage(cpu_s=1.0, rss_bytes=1 << 20)
    prev = Sample.of(10.0, usage, [snapshot(0, name="a"), snapshot(0, name="b")])
    cur = Sample.of(
        11.0, ProcessUsage(1.5, 2 << 20), [snapshot(10, name="a"), snapshot(30, name="b")]
    )
    figures = server_window(prev, cur, detail="b")
    assert figures["rps"] == 40.0
    assert figures["cpu_percent"] == 50.0
    assert figures["rss_bytes"] == 2 << 20
    assert [m["name"] for m in figures["models"]] == ["a", "b"]
    assert "totals" in figures["models"][1]
    assert "totals" not in figures["models"][0]


def test_the_process_usage_is_read() -> None:
    usage = process_usage()
    assert usage.cpu_s > 0
    assert usage.rss_bytes > 1 << 20
