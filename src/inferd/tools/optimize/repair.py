"""Accuracy repair: keep the most sensitive nodes in float until a quantized model meets its
accuracy budget (mixed precision).

The nodes are taken from the top of the sensitivity ranking (:mod:`.sensitivity`) in growing
prefixes: 1, 2, 4, 8... nodes, then a bisection between the last prefix that missed the budget
and the first that met it. Each try is a quantization (the calibrated ranges are cached, so it
does not calibrate again) and one evaluation. A linear scan would cost one try per node kept;
doubling finds a prefix that meets the budget in about log2(n) tries and never keeps more than
twice the nodes needed, and the bisection then trims it to the shortest prefix that meets the
budget, in about log2(n) more tries. The prefix of a ranking is the right search space because
excluding a node helps only through the error charged to it, which the ranking orders; when the
error is not monotonic in the prefix, the bisection still returns a prefix that was measured to
meet the budget.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.data import Dataset
from inferd.tools.optimize.quantize import PreparedModel, StaticSettings, quantize_static_int8
from inferd.tools.optimize.sensitivity import NodeSensitivity

__all__ = [
    "QualityJudge",
    "RepairStep",
    "doubling_counts",
    "repair_exclusions",
    "repair_static",
]

#: builds the candidate that keeps the given nodes in float, under the given name
Builder = Callable[[Sequence[str], str], Candidate]


class QualityJudge(Protocol):
    """What the evaluation supplies: the quality of a candidate model file, and whether that
    quality is within the accuracy budget (for example accuracy ≥ baseline - 1 point)."""

    def quality(self, path: Path) -> float: ...

    def budget_ok(self, value: float) -> bool: ...


@dataclass(frozen=True)
class RepairStep:
    """One try: how many nodes of the ranking stayed in float, and what that measured."""

    excluded: int
    quality: float
    within_budget: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "excluded": self.excluded,
            "quality": self.quality,
            "within_budget": self.within_budget,
        }


def doubling_counts(limit: int) -> list[int]:
    """1, 2, 4... below ``limit``, then ``limit`` itself (nothing when ``limit`` < 1)."""
    counts: list[int] = []
    count = 1
    while count < limit:
        counts.append(count)
        count *= 2
    if limit >= 1:
        counts.append(limit)
    return counts


def repair_exclusions(
    ranking: Sequence[NodeSensitivity],
    judge: QualityJudge,
    build: Builder,
    work_dir: Path,
    name: str,
    *,
    max_excluded: int | None = None,
) -> Candidate:
    """The candidate keeping the shortest prefix of ``ranking`` in float that ``judge`` finds
    within budget; :class:`CandidateSkipped` when no prefix of up to ``max_excluded`` nodes
    (default: all but one, so something stays quantized) does. ``build`` makes each try."""
    limit = len(ranking) - 1 if max_excluded is None else min(max_excluded, len(ranking))
    if limit < 1:
        raise CandidateSkipped(
            f"{name}: the sensitivity ranking has {len(ranking)} quantized node(s); none can be "
            "kept in float while something stays quantized"
        )
    steps: dict[int, RepairStep] = {}
    tries: dict[int, Candidate] = {}

    def attempt(count: int) -> bool:
        excluded = [s.node for s in ranking[:count]]
        try_name = f"{name}.try-{count}"
        try:
            candidate = build(excluded, try_name)
        except CandidateSkipped:
            shutil.rmtree(work_dir / try_name, ignore_errors=True)
            raise
        tries[count] = candidate
        value = judge.quality(candidate.path)
        steps[count] = RepairStep(count, value, judge.budget_ok(value))
        return steps[count].within_budget

    passed: int | None = None
    failed = 0
    stopped = ""
    try:
        for count in doubling_counts(limit):
            try:
                if attempt(count):
                    passed = count
                    break
            except CandidateSkipped as exc:  # e.g. nothing left to quantize
                stopped = f"; keeping {count} in float failed: {exc}"
                break
            failed = count
        if passed is None:
            order = sorted(steps.values(), key=lambda s: s.excluded)
            tried = ", ".join(f"{s.excluded}: {s.quality:.4g}" for s in order) or "nothing"
            raise CandidateSkipped(
                f"{name}: no mix met the accuracy budget; the quality with the most sensitive "
                f"nodes kept in float, by their count, was {tried}{stopped}"
            )
        while passed - failed > 1:
            middle = (passed + failed) // 2
            if attempt(middle):
                passed = middle
            else:
                failed = middle
        chosen = _finish(tries.pop(passed), ranking[:passed], steps, work_dir, name)
    finally:  # the tries not chosen (all of them when none was)
        for candidate in tries.values():
            shutil.rmtree(candidate.path.parent, ignore_errors=True)
    return chosen


def _finish(
    chosen: Candidate,
    kept: Sequence[NodeSensitivity],
    steps: dict[int, RepairStep],
    work_dir: Path,
    name: str,
) -> Candidate:
    folder = work_dir / name
    if folder.exists():
        shutil.rmtree(folder)
    shutil.move(chosen.path.parent, folder)
    order = [steps[k] for k in sorted(steps)]
    step = steps[len(kept)]
    listed = ", ".join(f"{s.node} ({s.op_type}, score {s.score:.3g})" for s in kept)
    tried = ", ".join(
        f"{s.excluded}: {s.quality:.4g} ({'within' if s.within_budget else 'over'} budget)"
        for s in order
    )
    notes = (
        *chosen.notes,
        f"kept {len(kept)} node(s) in float, the most sensitive on the calibration data, to "
        f"meet the accuracy budget (quality {step.quality:.4g}): {listed}",
        f"nodes kept in float per try: {tried}",
    )
    recipe = {
        **chosen.recipe,
        "excluded": [s.node for s in kept],
        "excluded_scores": {s.node: s.score for s in kept},
        "repair": [s.as_dict() for s in order],
    }
    return Candidate(
        name,
        "int8-mixed",
        folder / chosen.path.name,
        platform=chosen.platform,
        parameters=chosen.parameters,
        recipe=recipe,
        notes=notes,
        parent=chosen.parent,
    )


def repair_static(
    prepared: PreparedModel,
    calibration: Dataset,
    work_dir: Path,
    settings: StaticSettings,
    ranking: Sequence[NodeSensitivity],
    judge: QualityJudge,
    *,
    vnni: bool | None = None,
    max_excluded: int | None = None,
    name: str | None = None,
    parent: str | None = None,
) -> Candidate:
    """Static INT8 with ``settings``, keeping the fewest most sensitive nodes of ``ranking`` in
    float that bring the quality within budget (``int8-mixed``)."""
    if max_excluded is not None and max_excluded < 1:
        raise InvalidArgumentError(f"max_excluded must be at least 1, not {max_excluded}")

    def build(excluded: Sequence[str], try_name: str) -> Candidate:
        return quantize_static_int8(
            prepared,
            calibration,
            work_dir,
            settings,
            vnni=vnni,
            nodes_to_exclude=excluded,
            kind="int8-mixed",
            name=try_name,
            parent=parent,
        )

    name = name or f"int8-mixed-{settings.suffix()}"
    return repair_exclusions(ranking, judge, build, work_dir, name, max_excluded=max_excluded)
