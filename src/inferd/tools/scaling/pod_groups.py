"""Groups of identical pods as the simulation keeps them: pods created together start, warm
up and serve alike, so one group with a count stands for them all. Each group remembers its
recent per-second metric values (for the scrapes) and its latest samples (for the HPA)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from inferd.tools.scaling.hpa import PENDING, RUNNING, MetricSample, PodView

__all__ = ["PodGroup", "merge_groups", "remove_newest", "scrape", "view"]


@dataclass
class PodGroup:
    count: int
    created_s: float
    running_s: float
    ready_s: float
    history: deque[tuple[int, float | None, float | None, float]]
    backlog: float = 0.0
    deleted_s: float | None = None
    samples: dict[str, MetricSample] = field(default_factory=dict)

    def phase(self, t: float) -> str:
        return PENDING if t < self.running_s else RUNNING

    def is_ready(self, t: float) -> bool:
        return t >= self.ready_s


def view(g: PodGroup, t: float, request: float) -> PodView:
    ready = g.is_ready(t)
    return PodView(
        count=g.count,
        phase=g.phase(t),
        deleting=g.deleted_s is not None,
        ready=ready,
        start_s=g.created_s,
        ready_transition_s=g.ready_s if ready else g.created_s,
        cpu_request=request,
        samples=dict(g.samples),
    )


_HISTORY_INDEX = {"pending": 1, "queue-us": 2, "cpu": 3}


def scrape(g: PodGroup, t: int, window: int, metrics: tuple[str, ...]) -> None:
    recent = [h for h in g.history if t - window <= h[0] < t]
    samples: dict[str, MetricSample] = {}
    for name in metrics:
        index = _HISTORY_INDEX[name]
        values = [v for h in recent if (v := h[index]) is not None]
        if values:
            samples[name] = MetricSample(sum(values) / len(values), float(t), float(window))
    g.samples = samples


def _mergeable(a: PodGroup, b: PodGroup, t: int, settled_s: float, window: int) -> bool:
    if a.backlog or b.backlog or t < max(a.ready_s, b.ready_s) + max(settled_s, window):
        return False
    if a.samples != b.samples:
        return False
    tail_a = [h[1:] for h in a.history if h[0] >= t - window - 1]
    tail_b = [h[1:] for h in b.history if h[0] >= t - window - 1]
    return tail_a == tail_b


def remove_newest(groups: list[PodGroup], leaving: list[PodGroup], count: int, t: int) -> None:
    """Delete ``count`` pods, the newest first (pending and unready pods are newer than ready
    ones here, since every pod takes as long to start)."""
    for g in sorted(groups, key=lambda g: g.created_s, reverse=True):
        if count == 0:
            break
        take = min(count, g.count)
        count -= take
        g.count -= take
        if g.phase(t) == RUNNING:  # a pending pod just goes; a running one stops
            leaving.append(
                PodGroup(take, g.created_s, g.running_s, g.ready_s, deque(), g.backlog, float(t))
            )
    groups[:] = [g for g in groups if g.count > 0]


def merge_groups(groups: list[PodGroup], t: int, settled_s: float, window: int) -> list[PodGroup]:
    """Groups that have long been ready and behaved alike over the window become one."""
    merged: list[PodGroup] = []
    for g in sorted(groups, key=lambda g: g.created_s):
        if merged and _mergeable(merged[-1], g, t, settled_s, window):
            merged[-1].count += g.count
        else:
            merged.append(g)
    return merged
