"""Properties of the HPA rule over any sequence of observations (hypothesis): the count never
leaves [minReplicas, maxReplicas], and never falls faster than the scale-down policies allow."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.tools.scaling.hpa import (
    PENDING,
    Behavior,
    HpaSpec,
    HpaState,
    MetricSample,
    MetricTarget,
    PodView,
    ScalingPolicy,
    ScalingRules,
    sync,
)

METRIC = MetricTarget("pending", 1.0)

observations = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=50.0),  # each running pod's value
        st.integers(min_value=0, max_value=3),  # pods still pending
        st.booleans(),  # samples missing this time
    ),
    min_size=1,
    max_size=60,
)


def _pods(current: int, value: float, pending: int, missing: bool) -> list[PodView]:
    pending = min(pending, current)
    running = current - pending
    samples = {} if missing else {"pending": MetricSample(value, 0.0, 30.0)}
    out = [PodView(count=running, samples=samples)]
    if pending:
        out.append(PodView(count=pending, phase=PENDING, ready=False))
    return out


def _drive(spec: HpaSpec, current: int, obs: list[tuple[float, int, bool]], step: int):
    state = HpaState()
    history = []
    for i, (value, pending, missing) in enumerate(obs):
        now = float((i + 1) * step)
        result = sync(spec, state, current, _pods(current, value, pending, missing), now)
        history.append((now, current, result.desired))
        state, current = result.state, result.desired
    return history


@settings(max_examples=200, deadline=None)
@given(
    lo=st.integers(min_value=1, max_value=5),
    span=st.integers(min_value=0, max_value=30),
    start=st.integers(min_value=1, max_value=60),
    obs=observations,
    window=st.sampled_from([0, 60, 300]),
)
def test_the_count_stays_within_min_and_max(
    lo: int, span: int, start: int, obs: list[tuple[float, int, bool]], window: int
) -> None:
    hi = lo + span
    down = ScalingRules(window, (ScalingPolicy("Percent", 100, 15),))
    spec = HpaSpec(lo, hi, (METRIC,), Behavior(scale_down=down))
    for _, before, after in _drive(spec, start, obs, 15):
        if lo <= before <= hi:
            assert lo <= after <= hi
        else:  # brought back inside in one sync
            assert after == (hi if before > hi else lo)


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(min_value=1, max_value=200),
    obs=observations,
    pods_value=st.integers(min_value=1, max_value=10),
    percent=st.integers(min_value=1, max_value=100),
    period=st.sampled_from([15, 30, 60, 120]),
    select=st.sampled_from(["Max", "Min"]),
    step=st.sampled_from([15, 30]),
)
def test_scale_down_is_never_faster_than_its_policies(
    start: int,
    obs: list[tuple[float, int, bool]],
    pods_value: int,
    percent: int,
    period: int,
    select: str,
    step: int,
) -> None:
    policies = (
        ScalingPolicy("Pods", pods_value, period),
        ScalingPolicy("Percent", percent, period),
    )
    rules = ScalingRules(0, policies, select)
    # one period for both directions, so every event within it counts
    up = ScalingRules(0, (ScalingPolicy("Percent", 100, period),))
    spec = HpaSpec(1, 1000, (METRIC,), Behavior(scale_up=up, scale_down=rules))
    history = _drive(spec, start, obs, step)
    for i, (now, _, after) in enumerate(history):
        # the count at the start of the period (before the first change within it)
        inside = [h for h in history[: i + 1] if h[0] > now - period]
        period_start = inside[0][1]
        allowed_pods = period_start - pods_value
        allowed_percent = int(period_start * (1 - percent / 100))
        pick = min if select == "Max" else max
        floor = max(1, pick(allowed_pods, allowed_percent))
        if after < inside[-1][1]:  # this sync scaled down
            assert after >= min(floor, inside[-1][1])


@settings(max_examples=100, deadline=None)
@given(
    current=st.integers(min_value=1, max_value=50),
    value=st.floats(min_value=0.0, max_value=20.0),
)
def test_one_sync_moves_towards_the_load(current: int, value: float) -> None:
    # with no stabilization and generous policies, one sync lands on ceil(current * ratio)
    # (or stays when the ratio is within the tolerance)
    free = ScalingRules(0, (ScalingPolicy("Percent", 10_000, 15),))
    spec = HpaSpec(1, 10_000, (METRIC,), Behavior(scale_up=free, scale_down=free))
    result = sync(spec, HpaState(), current, _pods(current, value, 0, False), 15.0)
    ratio = math.ceil(round(value * 1000, 6)) / 1000
    if 0.9 <= ratio <= 1.1:
        assert result.desired == current
    else:
        assert result.desired == max(1, math.ceil(ratio * current))
