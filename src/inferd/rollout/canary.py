"""The canary rollout, as a pure judgement of the counts seen since the current stage began.

A canary sends a growing share of the traffic (``CanaryRules.stages``, e.g. 1%, 10%, 50%,
100%) to a candidate. After each window of requests the router asks :func:`judge`:

* a breached threshold rolls the candidate back at once (share 0), with a reason that names the
  threshold and the figures, e.g. ``error rate 4.1% > 2.0% after 210 requests at stage 2 (10%)``;
  rates are trusted from :data:`MIN_BREACH_REQUESTS` requests on (or the stage's
  ``min_requests``, when smaller), except that any error breaches ``max_error_rate: 0``;
* a stage with ``min_requests`` clean candidate requests moves to the next stage (promoted after
  the last), or, without ``auto_promote``, pauses there until :func:`promote` is called; a check
  that has no figures yet holds the promotion back (a latency ratio needs both p99s, a
  disagreement limit needs compared answers) while the primary still gets traffic;
* otherwise nothing changes.

The window's counts start again whenever ``stage`` or ``status`` changes (the router keeps the
window; this module keeps no state). ``promoted`` and ``rolled_back`` are final for
:func:`judge`; :func:`rollback` also works on a promoted canary.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "MIN_BREACH_REQUESTS",
    "STATUSES",
    "CanaryRules",
    "CanaryState",
    "CanaryWindow",
    "judge",
    "promote",
    "rollback",
    "stage_label",
]

MIN_BREACH_REQUESTS = 20
STATUSES = ("running", "promoted", "rolled_back", "paused")
FINAL = ("promoted", "rolled_back")


def _fraction(name: str, value: float | None) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], not {value}")


def _positive(name: str, value: float | None) -> None:
    if value is not None and not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive number, not {value}")


@dataclass(frozen=True, slots=True)
class CanaryRules:
    stages: tuple[float, ...]  # candidate shares, strictly increasing, the last 1.0
    min_requests: int  # candidate requests a stage needs before it may be promoted
    max_error_rate: float | None = None  # candidate errors / candidate requests
    max_latency_ratio: float | None = None  # candidate p99 / primary p99
    max_p99_ms: float | None = None  # candidate p99
    max_disagreement: float | None = None  # disagreeing answers / compared answers
    auto_promote: bool = True

    def __post_init__(self) -> None:
        stages = tuple(self.stages)
        if (
            not stages
            or not all(0.0 < s <= 1.0 for s in stages)
            or any(b <= a for a, b in itertools.pairwise(stages))
            or stages[-1] != 1.0
        ):
            raise ValueError(
                "stages must be strictly increasing shares in (0, 1] ending with 1.0, "
                f"not {list(stages)}"
            )
        if isinstance(self.min_requests, bool) or self.min_requests < 1:
            raise ValueError(f"min_requests must be at least 1, not {self.min_requests}")
        _fraction("max_error_rate", self.max_error_rate)
        _fraction("max_disagreement", self.max_disagreement)
        _positive("max_latency_ratio", self.max_latency_ratio)
        _positive("max_p99_ms", self.max_p99_ms)


@dataclass(frozen=True, slots=True)
class CanaryWindow:
    """What happened since the current stage began."""

    candidate_requests: int = 0
    candidate_errors: int = 0
    primary_requests: int = 0
    primary_errors: int = 0
    candidate_p99_ms: float | None = None
    primary_p99_ms: float | None = None
    compared: int = 0  # requests whose candidate and primary answers were compared
    disagreed: int = 0  # ... and found to disagree


@dataclass(frozen=True, slots=True)
class CanaryState:
    stage: int = 0  # index into CanaryRules.stages
    status: str = "running"  # "running" | "promoted" | "rolled_back" | "paused"
    reason: str = ""  # why the last change happened

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {self.status!r}")
        if self.stage < 0:
            raise ValueError(f"stage must be 0 or more, not {self.stage}")

    def share(self, rules: CanaryRules) -> float:
        """The candidate's share of the traffic in this state."""
        if self.status == "rolled_back":
            return 0.0
        if self.status == "promoted":
            return 1.0
        return rules.stages[self.stage]

    def as_dict(self, rules: CanaryRules) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "stages": len(rules.stages),
            "status": self.status,
            "share": self.share(rules),
            "reason": self.reason,
        }


def stage_label(rules: CanaryRules, stage: int) -> str:
    """``stage 2 (10%)``: numbered from 1, as people count them."""
    return f"stage {stage + 1} ({rules.stages[stage] * 100:g}%)"


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _breach(rules: CanaryRules, window: CanaryWindow, need: int) -> str | None:
    """What the window breaches first, without the "after ... at stage" tail; None if nothing."""
    n = window.candidate_requests
    if rules.max_error_rate is not None and n > 0:
        rate = window.candidate_errors / n
        zero_tolerance = rules.max_error_rate == 0.0 and window.candidate_errors > 0
        if (n >= need or zero_tolerance) and rate > rules.max_error_rate:
            return f"error rate {_pct(rate)} > {_pct(rules.max_error_rate)}"
    p99 = window.candidate_p99_ms
    if rules.max_p99_ms is not None and p99 is not None and n >= need and p99 > rules.max_p99_ms:
        return f"p99 latency {p99:.1f} ms > {rules.max_p99_ms:.1f} ms"
    primary = window.primary_p99_ms
    if (
        rules.max_latency_ratio is not None
        and p99 is not None
        and primary is not None
        and primary > 0.0
        and n >= need
        and window.primary_requests >= need
    ):
        ratio = p99 / primary
        if ratio > rules.max_latency_ratio:
            return (
                f"p99 latency ratio {ratio:.2f} ({p99:.1f} ms vs {primary:.1f} ms) "
                f"> {rules.max_latency_ratio:.2f}"
            )
    if rules.max_disagreement is not None and window.compared >= need:
        share = window.disagreed / window.compared
        if share > rules.max_disagreement:
            return (
                f"disagreement {_pct(share)} ({window.disagreed} of {window.compared} compared)"
                f" > {_pct(rules.max_disagreement)}"
            )
    return None


def _missing(rules: CanaryRules, window: CanaryWindow, share: float, need: int) -> str | None:
    """A configured check that has no figures yet (it holds the promotion back)."""
    if rules.max_p99_ms is not None and window.candidate_p99_ms is None:
        return "the candidate's p99 latency"
    if share >= 1.0:  # the primary gets no traffic: nothing to compare with
        return None
    if rules.max_latency_ratio is not None and (
        window.candidate_p99_ms is None
        or not window.primary_p99_ms
        or window.primary_requests < need
    ):
        return f"the primary's p99 latency over {need} requests"
    if rules.max_disagreement is not None and window.compared < need:
        return f"{need} compared answers (have {window.compared})"
    return None


def _figures(window: CanaryWindow) -> str:
    n = window.candidate_requests
    text = f"{n} requests, error rate {_pct(window.candidate_errors / n if n else 0.0)}"
    if window.candidate_p99_ms is not None:
        text += f", p99 {window.candidate_p99_ms:.1f} ms"
    return text


def _advance(state: CanaryState, rules: CanaryRules, why: str) -> CanaryState:
    nxt = state.stage + 1
    if nxt >= len(rules.stages):
        return CanaryState(state.stage, "promoted", f"{why}; promoted")
    return CanaryState(nxt, "running", f"{why}; now at {stage_label(rules, nxt)}")


def _check_stage(state: CanaryState, rules: CanaryRules) -> None:
    if state.stage >= len(rules.stages):
        raise ValueError(f"stage {state.stage} is past the last of {len(rules.stages)} stages")


def judge(state: CanaryState, rules: CanaryRules, window: CanaryWindow) -> CanaryState:
    """The state after looking at ``window`` (see the module's text)."""
    if state.status in FINAL:
        return state
    _check_stage(state, rules)
    here = stage_label(rules, state.stage)
    need = min(MIN_BREACH_REQUESTS, rules.min_requests)
    breach = _breach(rules, window, need)
    if breach is not None:
        reason = f"{breach} after {window.candidate_requests} requests at {here}"
        return CanaryState(state.stage, "rolled_back", reason)
    if state.status == "paused" or window.candidate_requests < rules.min_requests:
        return state
    missing = _missing(rules, window, rules.stages[state.stage], need)
    if missing is not None:
        waiting = f"{here} has {window.candidate_requests} requests; waiting for {missing}"
        return state if state.reason == waiting else replace(state, reason=waiting)
    passed = f"{here} passed with {_figures(window)}"
    if not rules.auto_promote:
        return CanaryState(state.stage, "paused", f"{passed}; waiting for a manual promote")
    return _advance(state, rules, passed)


def promote(state: CanaryState, rules: CanaryRules) -> CanaryState:
    """The manual promotion: the next stage, or promoted from the last one."""
    if state.status == "promoted":
        raise ValueError("the canary is already promoted")
    if state.status == "rolled_back":
        raise ValueError(
            f"the canary was rolled back ({state.reason}); apply the policy again to restart it"
        )
    _check_stage(state, rules)
    return _advance(state, rules, f"promoted by hand from {stage_label(rules, state.stage)}")


def rollback(state: CanaryState, reason: str) -> CanaryState:
    """The manual rollback (also of a promoted canary); rolling back twice changes nothing."""
    if state.status == "rolled_back":
        return state
    return CanaryState(state.stage, "rolled_back", reason or "rolled back by hand")
