"""The quality figures, the accuracy budget and the choice of a winner."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.decide import Goals, Outcome, decide
from inferd.tools.optimize.evaluate import judge
from inferd.tools.optimize.metrics import (
    Budget,
    Quality,
    agreement_figures,
    default_metric,
    parse_budget,
    task_figures,
)
from inferd.tools.optimize.speed import SpeedPoint, batch_sizes_for


def test_task_figures_of_a_classifier() -> None:
    logits = np.array([[2.0, 0.1, 0.0], [0.0, 3.0, 0.1], [0.2, 0.1, 1.0], [1.0, 0.0, 0.5]])
    labels = np.array([0, 1, 2, 2])
    figures = task_figures(logits, labels)
    assert figures["accuracy"] == pytest.approx(0.75)
    assert 0.0 < figures["f1"] < 1.0
    assert 0.5 < figures["auc"] <= 1.0


def test_task_figures_of_a_regressor() -> None:
    figures = task_figures(np.array([[1.0], [2.0], [4.0]]), np.array([1.0, 2.0, 2.0]))
    assert figures["rmse"] == pytest.approx(np.sqrt(4.0 / 3.0))
    assert figures["mae"] == pytest.approx(2.0 / 3.0)


def test_agreement_with_itself_and_with_a_perturbed_copy() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(50, 8)).astype(np.float32)
    same = agreement_figures(ref, ref)
    assert same["cosine"] == pytest.approx(1.0)
    assert same["top1"] == 1.0
    assert same["max_abs_error"] == 0.0
    noisy = agreement_figures(ref + rng.normal(scale=0.5, size=ref.shape), ref)
    assert noisy["cosine"] < 0.99
    assert noisy["cosine_min"] <= noisy["cosine"]
    assert noisy["max_abs_error"] > 0.5


def test_zero_rows_agree_only_with_zero_rows() -> None:
    ref = np.array([[1.0, 2.0], [0.0, 0.0], [3.0, 1.0]])
    got = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 1.0]])
    figures = agreement_figures(got, ref)
    assert figures["cosine_min"] == 0.0
    assert figures["cosine"] == pytest.approx(2.0 / 3.0)


def test_labels_must_match_rows() -> None:
    with pytest.raises(InvalidArgumentError, match="3 labels for 2 rows"):
        task_figures(np.zeros((2, 3)), np.array([0, 1, 2]))


def test_default_metric() -> None:
    assert default_metric(np.zeros((4, 10)), np.arange(4)) == "accuracy"
    assert default_metric(np.zeros((4, 1)), np.array([0.5, 1.5, 2.0, 3.0])) == "rmse"
    assert default_metric(np.zeros((4, 384)), None) == "cosine"


def test_budget_in_points_and_relative() -> None:
    budget = parse_budget("1%")
    assert budget == Budget(0.01)
    assert budget.passes("accuracy", 0.95, 0.94)
    assert not budget.passes("accuracy", 0.95, 0.9399)
    assert budget.passes("rmse", 2.0, 2.02)
    assert not budget.passes("rmse", 2.0, 2.03)
    assert budget.passes("max_abs_error", 0.0, 0.01)  # against itself: the error allowed outright
    assert not budget.passes("cosine", 1.0, float("nan"))
    assert parse_budget("0.005").fraction == pytest.approx(0.005)
    for bad in ("lots", "-1%", "100%"):
        with pytest.raises(InvalidArgumentError, match="--accuracy-budget"):
            parse_budget(bad)


def test_judge_names_what_it_cannot_compute() -> None:
    with pytest.raises(InvalidArgumentError, match="--metric accuracy cannot be computed"):
        judge(np.zeros((2, 3)), np.zeros((2, 3)), None, "accuracy")


def _outcome(
    name: str, value: float, throughput: float, p99: float = 1.0, kind: str = "x"
) -> Outcome:
    return Outcome(
        name=name,
        kind=kind,
        quality=Quality("accuracy", value, {"accuracy": value}),
        speed=(
            SpeedPoint(1, 1, throughput / 10, 0.5, p99, True),
            SpeedPoint(64, 1, throughput, 1.0, p99, True),
        ),
        size_bytes=1000,
    )


def test_the_fastest_within_budget_wins() -> None:
    outcomes = [
        _outcome("baseline", 0.95, 1000, kind="baseline"),
        _outcome("fast-but-wrong", 0.80, 5000),
        _outcome("good", 0.945, 2000),
        _outcome("better", 0.95, 2500),
    ]
    decision = decide(outcomes, Goals())
    assert decision.winner == "better"
    assert decision.batch_size == 64
    assert decision.gain == pytest.approx(2.5)
    assert "misses the accuracy budget" in decision.reasons["fast-but-wrong"]
    assert "better did better" in decision.reasons["good"]


def test_baseline_stays_when_nothing_pays_or_qualifies() -> None:
    baseline = _outcome("baseline", 0.95, 1000, kind="baseline")
    small_gain = decide([baseline, _outcome("meh", 0.95, 1030)], Goals())
    assert small_gain.kept_baseline
    assert small_gain.winner == "baseline"
    assert "needs 1.05x" in small_gain.reasons["meh"]
    broken = Outcome("broken", "int8-static", skipped="failed to build: boom")
    none = decide([baseline, broken, _outcome("bad", 0.5, 9000)], Goals())
    assert none.kept_baseline
    assert none.reasons["broken"] == "failed to build: boom"


def test_latency_budget_and_objectives() -> None:
    baseline = _outcome("baseline", 0.95, 1000, p99=1.0, kind="baseline")
    slow_tail = _outcome("slow-tail", 0.95, 3000, p99=9.0)
    decision = decide([baseline, slow_tail], Goals(latency_budget_ms=5.0))
    assert decision.kept_baseline
    assert "above the latency budget" in decision.reasons["slow-tail"]
    small = Outcome(
        "small", "x", quality=Quality("accuracy", 0.95), speed=baseline.speed, size_bytes=250
    )
    assert decide([baseline, small], Goals(objective="size")).winner == "small"
    quick = _outcome("quick", 0.95, 1000)
    quick = Outcome(
        "quick",
        "x",
        quality=quick.quality,
        speed=(SpeedPoint(1, 1, 100, 0.25, 0.3, True), SpeedPoint(64, 1, 1000, 1.0, 1.0, True)),
    )
    latency = decide([baseline, quick], Goals(objective="latency"))
    assert latency.winner == "quick"
    assert latency.batch_size == 1


def test_batch_sizes_capped_at_the_models_limit() -> None:
    assert batch_sizes_for((1, 8, 64), 32) == (1, 8, 32)
    assert batch_sizes_for((1, 8, 64), 64) == (1, 8, 64)
    assert batch_sizes_for((1, 8, 64), 0) == (1,)
    assert batch_sizes_for((64,), 8) == (8,)
