"""The canary's judgement, worked by hand: promotion, each rollback, and the manual actions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.rollout.canary import (
    MIN_BREACH_REQUESTS,
    CanaryRules,
    CanaryState,
    CanaryWindow,
    judge,
    promote,
    rollback,
    stage_label,
)

STAGES = (0.01, 0.1, 0.5, 1.0)
RULES = CanaryRules(
    stages=STAGES,
    min_requests=200,
    max_error_rate=0.02,
    max_latency_ratio=1.5,
    max_p99_ms=300.0,
    max_disagreement=0.05,
)
CLEAN = CanaryWindow(
    candidate_requests=200,
    candidate_errors=1,
    primary_requests=2000,
    primary_errors=3,
    candidate_p99_ms=60.0,
    primary_p99_ms=50.0,
    compared=200,
    disagreed=2,
)
AT_10 = CanaryState(stage=1)


def test_clean_windows_promote_through_every_stage() -> None:
    state = CanaryState()
    shares = [state.share(RULES)]
    while state.status == "running":
        state = judge(state, RULES, CLEAN)
        shares.append(state.share(RULES))
    assert shares == [0.01, 0.1, 0.5, 1.0, 1.0]
    assert state == CanaryState(
        3,
        "promoted",
        "stage 4 (100%) passed with 200 requests, error rate 0.5%, p99 60.0 ms; promoted",
    )


def test_a_promotion_names_the_stage_passed_and_the_next() -> None:
    assert judge(AT_10, RULES, CLEAN) == CanaryState(
        2,
        "running",
        "stage 2 (10%) passed with 200 requests, error rate 0.5%, p99 60.0 ms; "
        "now at stage 3 (50%)",
    )


def test_nothing_changes_before_the_stage_has_its_requests() -> None:
    short = CanaryWindow(199, 1, 2000, 3, 60.0, 50.0, 200, 2)
    assert judge(AT_10, RULES, short) is AT_10
    assert judge(AT_10, RULES, CanaryWindow()) is AT_10


@pytest.mark.parametrize(
    ("window", "reason"),
    [
        (
            CanaryWindow(210, 9, 2000, 3, 60.0, 50.0, 200, 2),
            "error rate 4.3% > 2.0% after 210 requests at stage 2 (10%)",
        ),
        (
            CanaryWindow(50, 0, 500, 0, 512.0, 50.0, 0, 0),
            "p99 latency 512.0 ms > 300.0 ms after 50 requests at stage 2 (10%)",
        ),
        (
            CanaryWindow(50, 0, 500, 0, 91.0, 50.0, 0, 0),
            "p99 latency ratio 1.82 (91.0 ms vs 50.0 ms) > 1.50 after 50 requests at stage 2 (10%)",
        ),
        (
            CanaryWindow(120, 0, 500, 0, 60.0, 50.0, 200, 15),
            "disagreement 7.5% (15 of 200 compared) > 5.0% after 120 requests at stage 2 (10%)",
        ),
    ],
)
def test_each_threshold_rolls_back_with_its_figures(window: CanaryWindow, reason: str) -> None:
    state = judge(AT_10, RULES, window)
    assert state == CanaryState(1, "rolled_back", reason)
    assert state.share(RULES) == 0.0


def test_the_first_stage_is_numbered_one() -> None:
    state = judge(CanaryState(), RULES, CanaryWindow(20, 1, 100, 0))
    assert state.reason == "error rate 5.0% > 2.0% after 20 requests at stage 1 (1%)"
    rules = CanaryRules(stages=(0.005, 0.25, 1.0), min_requests=10)
    assert [stage_label(rules, i) for i in range(3)] == [
        "stage 1 (0.5%)",
        "stage 2 (25%)",
        "stage 3 (100%)",
    ]


def test_rates_are_not_trusted_below_the_minimum_sample() -> None:
    bad = MIN_BREACH_REQUESTS - 1  # every request failed, but too few to judge
    assert judge(AT_10, RULES, CanaryWindow(bad, bad, 500, 0, 900.0, 50.0, bad, bad)) is AT_10
    n = MIN_BREACH_REQUESTS
    assert judge(AT_10, RULES, CanaryWindow(n, n, 500, 0)).status == "rolled_back"


def test_a_stage_smaller_than_the_minimum_sample_still_judges_its_requests() -> None:
    rules = CanaryRules(stages=(0.5, 1.0), min_requests=10, max_error_rate=0.1)
    state = judge(CanaryState(), rules, CanaryWindow(10, 3, 10, 0))
    assert state.reason == "error rate 30.0% > 10.0% after 10 requests at stage 1 (50%)"


def test_a_zero_error_budget_rolls_back_on_the_first_error() -> None:
    rules = CanaryRules(stages=(0.1, 1.0), min_requests=100, max_error_rate=0.0)
    state = judge(CanaryState(), rules, CanaryWindow(3, 1))
    assert state == CanaryState(
        0, "rolled_back", "error rate 33.3% > 0.0% after 3 requests at stage 1 (10%)"
    )
    assert judge(CanaryState(), rules, CanaryWindow(3, 0)).status == "running"


def test_the_latency_ratio_needs_enough_primary_requests() -> None:
    few = CanaryWindow(50, 0, MIN_BREACH_REQUESTS - 1, 0, 91.0, 50.0, 0, 0)
    assert judge(AT_10, RULES, few) is AT_10


def test_a_check_without_figures_holds_the_promotion_back() -> None:
    no_comparisons = CanaryWindow(200, 0, 2000, 0, 60.0, 50.0, 3, 0)
    state = judge(AT_10, RULES, no_comparisons)
    assert state == CanaryState(
        1, "running", "stage 2 (10%) has 200 requests; waiting for 20 compared answers (have 3)"
    )
    assert judge(state, RULES, no_comparisons) is state
    no_primary = CanaryWindow(200, 0, 2000, 0, 60.0, None, 200, 0)
    assert "waiting for the primary's p99 latency" in judge(AT_10, RULES, no_primary).reason
    no_latency = CanaryWindow(200, 0, 2000, 0, None, 50.0, 200, 0)
    assert "waiting for the candidate's p99 latency" in judge(AT_10, RULES, no_latency).reason


def test_at_full_share_the_comparisons_with_the_primary_are_not_awaited() -> None:
    last = CanaryState(stage=3)
    alone = CanaryWindow(200, 0, 0, 0, 60.0, None, 0, 0)
    assert judge(last, RULES, alone).status == "promoted"


def test_without_auto_promote_a_passed_stage_pauses() -> None:
    rules = CanaryRules(stages=STAGES, min_requests=200, max_error_rate=0.02, auto_promote=False)
    paused = judge(AT_10, rules, CLEAN)
    assert paused == CanaryState(
        1,
        "paused",
        "stage 2 (10%) passed with 200 requests, error rate 0.5%, p99 60.0 ms; "
        "waiting for a manual promote",
    )
    assert paused.share(rules) == 0.1
    assert judge(paused, rules, CLEAN) is paused  # it waits
    broken = CanaryWindow(400, 40, 4000, 3)
    assert judge(paused, rules, broken).status == "rolled_back"  # but is still watched
    resumed = promote(paused, rules)
    assert resumed == CanaryState(
        2, "running", "promoted by hand from stage 2 (10%); now at stage 3 (50%)"
    )


def test_promote_by_hand_through_every_stage() -> None:
    state = CanaryState()
    for stage in (1, 2, 3):
        state = promote(state, RULES)
        assert (state.stage, state.status) == (stage, "running")
    state = promote(state, RULES)
    assert state == CanaryState(3, "promoted", "promoted by hand from stage 4 (100%); promoted")
    with pytest.raises(ValueError, match="already promoted"):
        promote(state, RULES)


def test_rollback_by_hand() -> None:
    state = rollback(AT_10, "the dashboards look wrong")
    assert state == CanaryState(1, "rolled_back", "the dashboards look wrong")
    assert rollback(state, "again") is state
    assert rollback(AT_10, "") == CanaryState(1, "rolled_back", "rolled back by hand")
    with pytest.raises(ValueError, match=r"rolled back \(the dashboards look wrong\); apply"):
        promote(state, RULES)
    promoted = CanaryState(3, "promoted", "done")
    assert rollback(promoted, "late regression").share(RULES) == 0.0


@pytest.mark.parametrize("final", [CanaryState(3, "promoted"), CanaryState(1, "rolled_back")])
def test_final_states_stay_final(final: CanaryState) -> None:
    for window in (CLEAN, CanaryWindow(500, 500, 10, 0, 900.0, 1.0, 500, 500)):
        assert judge(final, RULES, window) is final


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stages": ()}, "stages must be strictly increasing"),
        ({"stages": (0.1, 0.5)}, r"ending with 1.0, not \[0.1, 0.5\]"),
        ({"stages": (0.5, 0.1, 1.0)}, "strictly increasing"),
        ({"stages": (0.1, 0.1, 1.0)}, "strictly increasing"),
        ({"stages": (0.0, 1.0)}, "strictly increasing"),
        ({"min_requests": 0}, "min_requests must be at least 1, not 0"),
        ({"max_error_rate": 1.5}, r"max_error_rate must lie in \[0, 1\], not 1.5"),
        ({"max_disagreement": -0.1}, r"max_disagreement must lie in \[0, 1\]"),
        ({"max_latency_ratio": 0.0}, "max_latency_ratio must be a positive number"),
        ({"max_p99_ms": float("inf")}, "max_p99_ms must be a positive number"),
    ],
)
def test_bad_rules_are_refused(kwargs: dict[str, object], message: str) -> None:
    settings = {"stages": STAGES, "min_requests": 100, **kwargs}
    with pytest.raises(ValueError, match=message):
        CanaryRules(**settings)  # type: ignore[arg-type]


def test_bad_states_are_refused() -> None:
    with pytest.raises(ValueError, match="status must be one of running, promoted"):
        CanaryState(0, "done")
    with pytest.raises(ValueError, match="stage 4 is past the last of 4 stages"):
        judge(CanaryState(4), RULES, CLEAN)


def test_as_dict() -> None:
    assert AT_10.as_dict(RULES) == {
        "stage": 1,
        "stages": 4,
        "status": "running",
        "share": 0.1,
        "reason": "",
    }


windows = st.builds(
    CanaryWindow,
    candidate_requests=st.integers(0, 400),
    candidate_errors=st.integers(0, 40),
    primary_requests=st.integers(0, 4000),
    primary_errors=st.integers(0, 40),
    candidate_p99_ms=st.none() | st.floats(1.0, 500.0),
    primary_p99_ms=st.none() | st.floats(1.0, 500.0),
    compared=st.integers(0, 400),
    disagreed=st.integers(0, 40),
).filter(
    lambda w: (
        w.candidate_errors <= w.candidate_requests
        and w.primary_errors <= w.primary_requests
        and w.disagreed <= w.compared
    )
)
states = st.builds(
    CanaryState, st.integers(0, 3), st.sampled_from(["running", "promoted", "paused"])
)


@given(states, windows)
def test_a_judgement_moves_forward_or_rolls_back(state: CanaryState, window: CanaryWindow) -> None:
    after = judge(state, RULES, window)
    assert after.stage in (state.stage, state.stage + 1)
    if after.stage == state.stage + 1:
        assert (state.status, after.status) == ("running", "running")
    if after.status == "rolled_back":
        assert after.stage == state.stage
        assert f"after {window.candidate_requests} requests at" in after.reason
    if after != state and after.status != "rolled_back":  # moved on: every figure was clean
        assert window.candidate_requests >= RULES.min_requests
        assert window.candidate_errors / window.candidate_requests <= 0.02
    assert after.share(RULES) in (0.0, *STAGES)


@given(states, windows)
def test_no_rollback_on_a_small_sample(state: CanaryState, window: CanaryWindow) -> None:
    if window.candidate_requests < MIN_BREACH_REQUESTS and window.compared < MIN_BREACH_REQUESTS:
        assert judge(state, RULES, window).status != "rolled_back"
