"""The HPA's ``behavior`` (autoscaling/v2): scaling rules and policies, and the controller's
memory between syncs: recent recommendations (the stabilization windows) and scale events (the
rate policies). Pure functions of that memory and the time."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from inferd.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_BEHAVIOR",
    "DEFAULT_SCALE_DOWN",
    "DEFAULT_SCALE_UP",
    "Behavior",
    "HpaState",
    "ScaleEvent",
    "ScalingPolicy",
    "ScalingRules",
    "limit_rate",
    "scale_down_limit",
    "scale_up_limit",
    "stabilize",
    "store_event",
]

PODS, PERCENT = "Pods", "Percent"
SELECT_MAX, SELECT_MIN, SELECT_DISABLED = "Max", "Min", "Disabled"


@dataclass(frozen=True)
class ScalingPolicy:
    """``{type: Pods|Percent, value, periodSeconds}``."""

    type: str
    value: int
    period_s: int

    def __post_init__(self) -> None:
        if self.type not in (PODS, PERCENT):
            raise InvalidArgumentError(
                f"a scaling policy's type is Pods or Percent, not {self.type!r}"
            )
        if self.value <= 0:
            raise InvalidArgumentError("a scaling policy's value must be greater than 0")
        if not 0 < self.period_s <= 1800:
            raise InvalidArgumentError("a scaling policy's periodSeconds must be in 1..1800")


@dataclass(frozen=True)
class ScalingRules:
    """``behavior.scaleUp`` or ``behavior.scaleDown``."""

    stabilization_window_s: int
    policies: tuple[ScalingPolicy, ...]
    select_policy: str = SELECT_MAX
    tolerance: float | None = None  # None: the controller's own tolerance

    def __post_init__(self) -> None:
        if not 0 <= self.stabilization_window_s <= 3600:
            raise InvalidArgumentError("stabilizationWindowSeconds must be in 0..3600")
        if self.select_policy not in (SELECT_MAX, SELECT_MIN, SELECT_DISABLED):
            raise InvalidArgumentError(
                f"selectPolicy is Max, Min or Disabled, not {self.select_policy!r}"
            )
        if not self.policies and self.select_policy != SELECT_DISABLED:
            raise InvalidArgumentError("scaling rules need at least one policy")
        if self.tolerance is not None and self.tolerance < 0:
            raise InvalidArgumentError("a tolerance cannot be negative")

    @property
    def longest_period_s(self) -> int:
        return max((p.period_s for p in self.policies), default=0)


DEFAULT_SCALE_UP = ScalingRules(
    0, (ScalingPolicy(PERCENT, 100, 15), ScalingPolicy(PODS, 4, 15)), SELECT_MAX
)
DEFAULT_SCALE_DOWN = ScalingRules(300, (ScalingPolicy(PERCENT, 100, 15),), SELECT_MAX)


@dataclass(frozen=True)
class Behavior:
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN


DEFAULT_BEHAVIOR = Behavior()


# -- the controller's memory ------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleEvent:
    change: int
    t: float
    outdated: bool = False


@dataclass(frozen=True)
class HpaState:
    """What the controller remembers between syncs of one HPA."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (time, unstabilised recommendation)
    up_events: tuple[ScaleEvent, ...] = ()
    down_events: tuple[ScaleEvent, ...] = ()


def stabilize(
    recommendations: Sequence[tuple[float, int]],
    desired: int,
    current: int,
    now: float,
    behavior: Behavior,
) -> tuple[int, tuple[tuple[float, int], ...]]:
    """The stabilised recommendation, and the recommendations to remember (this one added,
    those older than both windows dropped)."""
    up_cutoff = now - behavior.scale_up.stabilization_window_s
    down_cutoff = now - behavior.scale_down.stabilization_window_s
    up_rec = down_rec = desired
    kept: list[tuple[float, int]] = []
    for t, rec in recommendations:
        if t > up_cutoff:
            up_rec = min(up_rec, rec)
        if t > down_cutoff:
            down_rec = max(down_rec, rec)
        if not (t < up_cutoff and t < down_cutoff):
            kept.append((t, rec))
    result = max(current, up_rec)
    result = min(result, down_rec)
    return result, (*kept, (now, desired))


def _changed_within(events: Sequence[ScaleEvent], period_s: int, now: float) -> int:
    cutoff = now - period_s
    return sum(e.change for e in events if e.t > cutoff)


def _period_limits(
    current: int, state: HpaState, rules: ScalingRules, now: float, up: bool
) -> list[int]:
    limits = []
    for policy in rules.policies:
        start = (
            current
            - _changed_within(state.up_events, policy.period_s, now)
            + _changed_within(state.down_events, policy.period_s, now)
        )
        if policy.type == PODS:
            limits.append(start + policy.value if up else start - policy.value)
        elif up:  # rounded up, or a small count could never grow
            limits.append(math.ceil(start * (1 + policy.value / 100)))
        else:
            limits.append(int(start * (1 - policy.value / 100)))
    return limits


def scale_up_limit(current: int, state: HpaState, rules: ScalingRules, now: float) -> int:
    """The most replicas the scale-up policies allow now."""
    if rules.select_policy == SELECT_DISABLED:
        return current
    pick: Callable[[list[int]], int] = min if rules.select_policy == SELECT_MIN else max
    return pick(_period_limits(current, state, rules, now, up=True))


def scale_down_limit(current: int, state: HpaState, rules: ScalingRules, now: float) -> int:
    """The fewest replicas the scale-down policies allow now."""
    if rules.select_policy == SELECT_DISABLED:
        return current
    pick: Callable[[list[int]], int] = max if rules.select_policy == SELECT_MIN else min
    return pick(_period_limits(current, state, rules, now, up=False))


def limit_rate(
    desired: int,
    current: int,
    bounds: tuple[int, int],
    behavior: Behavior,
    state: HpaState,
    now: float,
) -> tuple[int, str]:
    """``desired`` brought within the behaviour's rates and ``bounds`` (minReplicas,
    maxReplicas), with the reason."""
    low, high = bounds
    if desired > current:
        up = max(scale_up_limit(current, state, behavior.scale_up, now), current)
        if high > up:
            allowed, reason = up, "ScaleUpLimit"
        else:
            allowed, reason = high, "TooManyReplicas"
        if desired > allowed:
            return allowed, reason
    elif desired < current:
        down = min(scale_down_limit(current, state, behavior.scale_down, now), current)
        if low < down:
            allowed, reason = down, "ScaleDownLimit"
        else:
            allowed, reason = low, "TooFewReplicas"
        if desired < allowed:
            return allowed, reason
    return desired, "DesiredWithinRange"


def store_event(
    events: tuple[ScaleEvent, ...], change: int, now: float, longest_period_s: int
) -> tuple[ScaleEvent, ...]:
    """The controller's event list: events older than the longest policy period are marked
    outdated for good, and the new event takes the place of the last outdated one."""
    cutoff = now - longest_period_s
    marked = [replace(e, outdated=True) if e.t < cutoff else e for e in events]
    new = ScaleEvent(change, now)
    slots = [i for i, e in enumerate(marked) if e.outdated]
    if slots:
        marked[slots[-1]] = new
    else:
        marked.append(new)
    return tuple(marked)
