"""The load generator's figures: stability rule, windows and load points, the server split."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.tools.perf.server_split import ServerDelta, delta, split
from inferd.tools.perf.stability import WindowFigures, is_stable, should_stop
from inferd.tools.perf.summary import Window, merge, percentile_index, percentiles

W = WindowFigures


def test_three_close_windows_are_stable() -> None:
    windows = [W(50, 900), W(1000, 100), W(1040, 104), W(1090, 109)]
    assert is_stable(windows, 1.1)
    assert not is_stable(windows, 1.05)  # 1090 / 1000 = 1.09


def test_fewer_than_three_windows_are_never_stable() -> None:
    assert not is_stable([W(100, 10), W(100, 10)], 1.1)


def test_throughput_or_latency_spread_breaks_stability() -> None:
    assert not is_stable([W(100, 10), W(100, 10), W(120, 10)], 1.1)
    assert not is_stable([W(100, 10), W(100, 12), W(100, 10)], 1.1)
    assert is_stable([W(100, 10), W(100, 12), W(100, 10)], 1.1, check_latency=False)


def test_a_window_with_no_answers_is_not_stable() -> None:
    assert not is_stable([W(0, 0), W(0, 0), W(0, 0)], 1.1)


def test_measuring_stops_when_stable_or_out_of_trials() -> None:
    unstable = [W(100, 10), W(200, 10), W(100, 10)]
    assert not should_stop(unstable, 1.1, max_trials=4)
    assert should_stop(unstable, 1.1, max_trials=3)
    assert should_stop([W(100, 10)] * 3, 1.1, max_trials=10)


@given(st.lists(st.floats(1, 1e6), min_size=3, max_size=8), st.floats(1.0, 2.0))
def test_stability_is_the_max_over_min_ratio_of_the_last_three(
    values: list[float], ratio: float
) -> None:
    windows = [W(v, 1.0) for v in values]
    last = values[-3:]
    assert is_stable(windows, ratio) == (max(last) / min(last) <= ratio)


def test_percentiles_take_perf_analyzers_index() -> None:
    assert percentile_index(100, 50) == 50  # round(49.5)
    assert percentile_index(100, 99) == 98
    assert percentile_index(1, 99) == 0
    values = np.arange(1, 101, dtype=np.int64) * 1000
    assert percentiles(values, [50, 90, 99]) == {50: 51000, 90: 90000, 99: 99000}
    assert percentiles(np.array([], dtype=np.int64), [50]) == {50: 0}


def _window(latencies_us: list[int], duration_s: float = 1.0, **kw: object) -> Window:
    return Window(
        duration_ns=int(duration_s * 1e9),
        latencies_ns=np.array(latencies_us, dtype=np.int64) * 1000,
        **kw,  # type: ignore[arg-type]
    )


def test_a_window_gives_throughput_times_batch_and_its_stabilising_latency() -> None:
    w = _window([100, 200, 300, 400], duration_s=0.5)
    assert w.throughput(batch_size=2) == pytest.approx(16.0)
    assert w.figures(2, None) == W(16.0, 250_000.0)
    assert w.figures(2, 90).latency_ns == 400_000  # index round(0.9 * 3) = 3


def test_a_load_point_merges_its_last_three_windows() -> None:
    windows = [
        _window([10_000], errors=9),  # an early window outside the three reported
        _window([100] * 10, errors=1, client_cpu_s=0.2),
        _window([200] * 10, client_cpu_s=0.2),
        _window([300] * 20, duration_s=2.0, client_cpu_s=0.4, error_samples=("boom",)),
    ]
    point = merge(windows, mode="concurrency", level=2, batch_size=4, stable=True, percentile=None)
    assert point.windows == 4
    assert point.request_count == 40
    assert point.error_count == 1
    assert point.duration_s == pytest.approx(4.0)
    assert point.throughput == pytest.approx(40 * 4 / 4.0)
    assert point.avg_latency_us == pytest.approx((1000 + 2000 + 6000) / 40)
    assert point.percentiles_us[50] == 300  # sorted index round(0.5 * 39) = 20: a 300
    assert point.percentiles_us[99] == 300
    assert set(point.percentiles_us) == {50, 90, 95, 99}
    assert point.client_cpu_share == pytest.approx(0.2)
    assert point.errors == ("boom",)
    assert point.server is None  # no statistics were taken


def test_a_chosen_percentile_is_reported_too() -> None:
    point = merge(
        [_window(list(range(1, 101)))],
        mode="request-rate",
        level=50,
        batch_size=1,
        stable=False,
        percentile=85,
    )
    assert set(point.percentiles_us) == {50, 85, 90, 95, 99}
    assert point.percentiles_us[85] == 85
    assert point.level_label == "50"


def _stats(success: int, queue_ns: int, infer_ns: int, inferences: int) -> dict[str, object]:
    def d(count: int, ns: int) -> dict[str, int]:
        return {"count": count, "ns": ns}

    return {
        "name": "m",
        "version": "1",
        "inference_count": inferences,
        "execution_count": success,
        "inference_stats": {
            "success": d(success, queue_ns + infer_ns + 30_000 * success),
            "fail": d(0, 0),
            "queue": d(success, queue_ns),
            "compute_input": d(success, 10_000 * success),
            "compute_infer": d(success, infer_ns),
            "compute_output": d(success, 5_000 * success),
        },
    }


def test_server_split_is_per_request_from_statistics_deltas() -> None:
    before = _stats(10, 1_000_000, 2_000_000, 20)
    after = _stats(110, 3_000_000, 12_000_000, 220)
    d = delta(before, after)
    assert d.success_count == 100
    assert d.inference_count == 200
    assert d.queue_ns == 2_000_000
    s = split(d, client_avg_latency_ns=200_000)
    assert s.queue_us == pytest.approx(20.0)
    assert s.compute_input_us == pytest.approx(10.0)
    assert s.compute_infer_us == pytest.approx(100.0)
    assert s.compute_output_us == pytest.approx(5.0)
    # the client's 200 usec minus the 135 the server accounted for
    assert s.network_us == pytest.approx(65.0)
    assert s.request_us == pytest.approx(20 + 100 + 30)
    assert s.overhead_us == pytest.approx(150 - 135)


def test_server_split_never_goes_negative_and_survives_reloads() -> None:
    d = delta(_stats(100, 10**9, 10**9, 100), _stats(5, 1000, 1000, 5))  # counters restarted
    assert d.success_count == 5
    assert split(d, client_avg_latency_ns=1.0).network_us == 0.0
    assert split(ServerDelta(), 100.0).queue_us == 0.0


def test_a_load_point_adds_the_deltas_of_its_windows() -> None:
    a = delta(_stats(0, 0, 0, 0), _stats(10, 100_000, 1_000_000, 10))
    b = delta(_stats(0, 0, 0, 0), _stats(30, 300_000, 3_000_000, 30))
    windows = [_window([200] * 10, server=a), _window([200] * 30, server=b)]
    point = merge(windows, mode="concurrency", level=1, batch_size=1, stable=True, percentile=None)
    assert point.server is not None
    assert point.server.request_count == 40
    assert point.server.compute_infer_us == pytest.approx(100.0)
    assert point.server.network_us == pytest.approx(200 - 10 - 100 - 10 - 5)


def test_cost_per_thousand_inferences_is_summed_over_the_windows() -> None:
    windows = [
        _window([100] * 500, server_cpu_s=0.5, energy_j=10.0, server_rss_bytes=2**20),
        _window([100] * 500, server_cpu_s=0.7, energy_j=None, server_rss_bytes=3 * 2**20),
    ]
    point = merge(windows, mode="concurrency", level=1, batch_size=2, stable=True, percentile=None)
    assert point.cost["server_cpu_s_per_1000"] == pytest.approx(1.2 * 1000 / 2000)
    assert point.cost["energy_j_per_1000"] is None  # one window had no reading
    assert point.cost["server_rss_mb"] == pytest.approx(3.0)
