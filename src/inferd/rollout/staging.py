"""A canary policy's stages at run time: the window of counts since the stage began, judged
after each of the candidate's outcomes with the pure :func:`inferd.rollout.canary.judge`.

A stage change (promotion, rollback, manual or automatic) starts a new window and is kept in a
short history with its reason, which the admin API shows and the server logs.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferd.errors import InvalidArgumentError
from inferd.rollout.canary import (
    CanaryRules,
    CanaryState,
    CanaryWindow,
    judge,
    promote,
    rollback,
)
from inferd.rollout.latency import LatencyWindow
from inferd.rollout.policy import CanarySpec

if TYPE_CHECKING:
    from inferd.rollout.router import LivePolicy

__all__ = ["CanaryDriver", "StageChange"]

_log = logging.getLogger("inferd.rollout")

HISTORY = 50
STAGE_LATENCIES = 1024


@dataclass(frozen=True, slots=True)
class StageChange:
    time_s: float  # wall-clock seconds since the epoch
    stage: int
    share: float
    status: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "time": self.time_s,
            "stage": self.stage,
            "share": self.share,
            "status": self.status,
            "reason": self.reason,
        }


class _Window:
    """Counts since the stage began."""

    def __init__(self) -> None:
        self.requests = [0, 0]  # primary, candidate
        self.errors = [0, 0]
        self.latency = (LatencyWindow(STAGE_LATENCIES), LatencyWindow(STAGE_LATENCIES))
        self.compared = 0
        self.disagreed = 0


class CanaryDriver:
    def __init__(self, live: LivePolicy, spec: CanarySpec) -> None:
        self._live = live
        self.rules = CanaryRules(
            stages=spec.stages,
            min_requests=spec.min_requests,
            max_error_rate=spec.max_error_rate,
            max_latency_ratio=spec.max_latency_ratio,
            max_p99_ms=spec.max_p99_ms,
            max_disagreement=spec.max_disagreement,
            auto_promote=spec.auto_promote,
        )
        self.compares = spec.max_disagreement is not None
        self._latency_rules = spec.max_latency_ratio is not None or spec.max_p99_ms is not None
        self.state = CanaryState(stage=0, status="running", reason="")
        self.share = self.state.share(self.rules)
        self.window = _Window()
        self.rollbacks = 0
        self.history: deque[StageChange] = deque(maxlen=HISTORY)
        self._record(self.state, "started")

    # -- outcomes -------------------------------------------------------------------------------

    @property
    def deciding(self) -> bool:
        """Still judged: running, or paused at a stage for a manual promote."""
        return self.state.status in ("running", "paused")

    def outcome(self, index: int, latency_s: float, *, error: bool) -> None:
        if not self.deciding:
            return
        w = self.window
        w.requests[index] += 1
        if error:
            w.errors[index] += 1
        else:
            w.latency[index].add(latency_s)
        if index == 1:
            self._judge()

    def compared(self, agreed: bool) -> None:
        if not self.deciding:
            return
        self.window.compared += 1
        self.window.disagreed += not agreed
        self._judge()

    def current_window(self) -> CanaryWindow:
        w = self.window
        p99: list[float | None] = [None, None]
        if self._latency_rules:
            for i in (0, 1):
                value = w.latency[i].percentile(99.0)
                p99[i] = None if value is None else value * 1e3
        return CanaryWindow(
            candidate_requests=w.requests[1],
            candidate_errors=w.errors[1],
            primary_requests=w.requests[0],
            primary_errors=w.errors[0],
            candidate_p99_ms=p99[1],
            primary_p99_ms=p99[0],
            compared=w.compared,
            disagreed=w.disagreed,
        )

    def _judge(self) -> None:
        self._move(judge(self.state, self.rules, self.current_window()))

    # -- manual actions -------------------------------------------------------------------------

    def promote(self) -> None:
        try:
            self._move(promote(self.state, self.rules))
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None

    def rollback(self, reason: str) -> None:
        self._move(rollback(self.state, reason))

    def _move(self, new: CanaryState) -> None:
        old = self.state
        if new == old:
            return
        self.state = new
        self.share = new.share(self.rules)
        if new.stage != old.stage or new.status != old.status:
            self.window = _Window()
        if new.status == "rolled_back" and old.status != "rolled_back":
            self.rollbacks += 1
        self._record(new, new.reason)

    def _record(self, state: CanaryState, reason: str) -> None:
        change = StageChange(time.time(), state.stage, self.share, state.status, reason)
        self.history.append(change)
        level = logging.WARNING if state.status == "rolled_back" else logging.INFO
        _log.log(
            level,
            "canary of '%s': stage %d (%.0f%% to '%s'), %s%s",
            self._live.model,
            state.stage,
            self.share * 100,
            self._live.variants[1].name,
            state.status,
            f": {reason}" if reason else "",
        )
