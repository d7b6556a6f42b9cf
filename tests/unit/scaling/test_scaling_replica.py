"""One replica as a queue in front of its curve, the metrics it shows, and the latency
histograms that gather its requests."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.capacity import CapacityCurve, CurvePoint
from inferd.tools.scaling.hpa import MetricTarget
from inferd.tools.scaling.latency import LatencyModel, histogram, percentile, share_above
from inferd.tools.scaling.replica import ReplicaModel


def curve(cpu: bool = False) -> CapacityCurve:
    rows = [
        (250.0, 2000.0, 4000.0, 100.0),
        (500.0, 2400.0, 5000.0, 400.0),
        (1000.0, 4000.0, 9000.0, 2000.0),
    ]
    return CapacityCurve(
        tuple(
            CurvePoint(
                rps=r,
                percentiles_us={50: p50, 90: p50 * 1.4, 95: p50 * 1.6, 99: p99},
                queue_us=q,
                cpu_cores=r / 1000 * 1.6 if cpu else None,
                level=i,
            )
            for i, (r, p50, p99, q) in enumerate(rows)
        )
    )


def test_below_the_peak_nothing_queues() -> None:
    model = ReplicaModel(curve(), 1.0, 1.0)
    lat = LatencyModel(model.curve)
    s = model.step(0.0, 500.0, 3, lat)
    assert (s.served, s.failed, s.queued, s.backlog) == (500.0, 0.0, 0.0, 0.0)
    assert s.pending == pytest.approx(500 * 400e-6)
    assert s.queue_us == 400.0
    hist = lat.take()
    assert hist.sum() == pytest.approx(1500.0)  # 3 pods x 500 requests
    assert percentile(hist, 50) == pytest.approx(2400.0, rel=0.06)
    assert percentile(hist, 99) == pytest.approx(5000.0, rel=0.06)


def test_above_the_peak_the_queue_grows_then_requests_fail() -> None:
    model = ReplicaModel(curve(), 1.0, request_timeout_s=0.5)
    lat = LatencyModel(model.curve)
    backlog, failed, served = 0.0, 0.0, 0.0
    for _ in range(5):
        s = model.step(backlog, 1500.0, 1, lat)
        backlog, failed, served = s.backlog, failed + s.failed, served + s.served
    # 500 more than the peak each second, until the queue holds 0.5 s of work (500 requests,
    # 400 left at the end of a second's service)
    assert backlog == pytest.approx(400.0, rel=0.02)
    assert served == pytest.approx(5000.0)
    assert served + failed + backlog == pytest.approx(7500.0)
    assert s.pending > 400  # the queue shows in the pending count
    assert s.queue_us > 400_000
    hist = lat.take()
    assert percentile(hist, 99) > 400_000  # half a second of waiting


def test_the_queue_drains_once_the_load_falls() -> None:
    model = ReplicaModel(curve(), 1.0, 1.0)
    lat = LatencyModel(model.curve)
    s = model.step(600.0, 500.0, 1, lat)
    assert s.backlog == pytest.approx(100.0, abs=1)  # 500 more served than arrived
    s = model.step(s.backlog, 500.0, 1, lat)
    assert s.backlog == 0.0
    assert s.failed == 0.0


def test_cpu_is_measured_or_a_share_of_the_request() -> None:
    assert ReplicaModel(curve(cpu=True), 2.0, 1.0).steady_value("cpu", 500.0) == 40.0
    assert ReplicaModel(curve(), 2.0, 1.0).steady_value("cpu", 500.0) == 50.0
    assert ReplicaModel(curve(), 2.0, 1.0).steady_value("cpu", 5000.0) == 100.0


def test_the_load_at_a_target() -> None:
    model = ReplicaModel(curve(), 1.0, 1.0)
    assert model.rate_at_target(MetricTarget("cpu", 50, True)) == pytest.approx(500.0)
    assert model.rate_at_target(MetricTarget("queue-us", 400.0)) == pytest.approx(500.0)
    # at the peak one pod holds 1000 x 2 ms = 2 requests: a target of 5 is never reached
    high = MetricTarget("pending", 5.0)
    assert model.rate_at_target(high) == 1000.0
    assert not model.reaches_target(high)


def test_bad_models() -> None:
    with pytest.raises(InvalidArgumentError):
        ReplicaModel(curve(), 0.0, 1.0)
    with pytest.raises(InvalidArgumentError):
        ReplicaModel(curve(), 1.0, 0.0)
    with pytest.raises(InvalidArgumentError, match="unknown metric"):
        ReplicaModel(curve(), 1.0, 1.0).steady_value("memory", 1.0)


def test_histogram_percentiles_and_shares() -> None:
    values = np.array([1000.0] * 90 + [10_000.0] * 10)
    hist = histogram(values, np.ones(100))
    assert percentile(hist, 50) == pytest.approx(1000.0, rel=0.06)
    assert percentile(hist, 95) == pytest.approx(10_000.0, rel=0.06)
    assert share_above(hist, 5000.0) == pytest.approx(0.10)
    assert share_above(hist, 500.0) == pytest.approx(1.0)
    assert np.isnan(percentile(np.zeros_like(hist), 50))
