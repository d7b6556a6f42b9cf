"""When a feature's drift alert is raised and cleared: a pure state machine with hysteresis.

An evaluation says whether a feature is *drifting* (a statistic crossed its threshold) and
whether it is *calm* (every statistic is back under its lower, clearing level). The alert is
raised after ``raise_after`` drifting evaluations in a row, and cleared after ``clear_after``
calm evaluations in a row; an evaluation between the two levels keeps the alert as it is and
restarts the count. So a statistic hovering at its threshold does not make the alert flap.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AlertState", "step"]


@dataclass(frozen=True, slots=True)
class AlertState:
    alert: bool = False
    streak: int = 0  # evaluations in a row pointing the other way


def step(
    state: AlertState, *, drifting: bool, calm: bool, raise_after: int, clear_after: int
) -> AlertState:
    """The state after one evaluation."""
    if drifting and calm:
        raise ValueError("an evaluation cannot be both drifting and calm")
    if not state.alert:
        streak = state.streak + 1 if drifting else 0
        return AlertState(True, 0) if streak >= raise_after else AlertState(False, streak)
    streak = state.streak + 1 if calm else 0
    return AlertState(False, 0) if streak >= clear_after else AlertState(True, streak)
