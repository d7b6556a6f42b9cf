"""The drift alert's hysteresis: raised after a run of drifting evaluations, cleared after a
run of calm ones, never flapping with a statistic that hovers at its threshold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.monitoring.drift.alerts import AlertState, step

# each evaluation: drifting, calm, or in between (neither)
EVALS = st.lists(st.sampled_from(["drift", "calm", "between"]), max_size=60)


def _run(evals: list[str], raise_after: int, clear_after: int) -> list[bool]:
    state, alerts = AlertState(), []
    for e in evals:
        state = step(
            state,
            drifting=e == "drift",
            calm=e == "calm",
            raise_after=raise_after,
            clear_after=clear_after,
        )
        alerts.append(state.alert)
    return alerts


def test_raised_after_a_run_and_cleared_after_a_longer_one() -> None:
    evals = ["drift", "drift", "between", "calm", "calm", "calm", "drift", "calm"] + ["calm"] * 4
    alerts = _run(evals, raise_after=2, clear_after=4)
    assert alerts == [False, True, True, True, True, True, True, True, True, True, False, False]


def test_a_hovering_statistic_does_not_flap() -> None:
    assert not any(_run(["drift", "calm"] * 20, raise_after=2, clear_after=4))
    raised = _run(["drift", "drift"] + ["calm", "drift"] * 20, raise_after=2, clear_after=4)
    assert all(raised[1:])


@given(EVALS, st.integers(1, 4), st.integers(1, 6))
def test_the_alert_follows_only_complete_runs(evals: list[str], up: int, down: int) -> None:
    alerts = _run(evals, up, down)
    previous = False
    for i, alert in enumerate(alerts):
        if alert and not previous:  # raised: the last `up` evaluations drifted
            assert i + 1 >= up
            assert evals[i + 1 - up : i + 1] == ["drift"] * up
        if previous and not alert:  # cleared: the last `down` were calm
            assert evals[i + 1 - down : i + 1] == ["calm"] * down
        previous = alert


def test_an_evaluation_cannot_be_both() -> None:
    with pytest.raises(ValueError, match="both"):
        step(AlertState(), drifting=True, calm=True, raise_after=1, clear_after=1)
