"""Which configuration to measure next: every one in turn (grid) or the ones optuna's TPE
sampler thinks promising (quick), and the loop that spends the measurement budget.

Both searchers work on scores to maximise (:meth:`Verdict.score`); a configuration measured
before (a resumed run) is told to the searcher without being measured again.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from inferd.tools.analyze.space import Candidate, Space

__all__ = ["GridSearch", "QuickSearch", "Searcher", "drive"]

# optuna is told this instead of -inf for a configuration that failed or broke a constraint
_WORST = -1e18
_CATEGORICAL = frozenset({"intra_op", "inter_op", "preferred"})
# consecutive proposals of already measured configurations before the quick search picks an
# unmeasured one at random instead
_MAX_REPEATS = 20


class Searcher(Protocol):
    def preload(self, candidate: Candidate, score: float) -> None:
        """Learn a result measured before (a resumed run)."""
        ...

    def propose(self) -> Candidate | None:
        """The next configuration to measure; None when there is none left."""
        ...

    def record(self, candidate: Candidate, score: float) -> None:
        """The score of the configuration :meth:`propose` returned last."""
        ...


class GridSearch:
    """Every candidate, in the space's order."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self._queue = list(candidates)
        self._done: set[Candidate] = set()

    def preload(self, candidate: Candidate, score: float) -> None:
        self._done.add(candidate)

    def propose(self) -> Candidate | None:
        while self._queue:
            candidate = self._queue.pop(0)
            if candidate not in self._done:
                return candidate
        return None

    def record(self, candidate: Candidate, score: float) -> None:
        self._done.add(candidate)


class QuickSearch:
    """optuna's TPE sampler over the space, seeded, asked and told one configuration at a time.

    Ordered settings (instances, max_batch_size, queue delay) are sampled as positions in their
    list so the sampler can use their order; the batching settings are sampled only when the
    dynamic batcher is on. A proposal that is not a valid config (a preferred size above the
    max batch) is corrected by dropping the sizes too large.
    """

    def __init__(self, space: Space, candidates: Sequence[Candidate], seed: int = 0) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self._space = space
        self._valid = list(candidates)
        self._valid_set = set(candidates)
        self._scores: dict[Candidate, float] = {}
        self._pending: Any = None
        self._rng = random.Random(seed)
        with warnings.catch_warnings():
            # multivariate and group are marked experimental; they model settings jointly and
            # sample the batching settings only when the batcher is on
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=seed,
                multivariate=True,
                group=True,
                n_startup_trials=_startup_trials(len(candidates)),
            )
        self._study = optuna.create_study(direction="maximize", sampler=sampler)

    # -- encoding -------------------------------------------------------------------------------

    def _distributions(self, dynamic: bool) -> dict[str, Any]:
        d = self._optuna.distributions
        space = self._space
        found: dict[str, Any] = {}
        if len(space.instances) > 1:
            found["instances"] = d.IntDistribution(0, len(space.instances) - 1)
        if len(space.intra_op_threads) > 1:
            found["intra_op"] = d.CategoricalDistribution(_labels(space.intra_op_threads))
        if len(space.inter_op_threads) > 1:
            found["inter_op"] = d.CategoricalDistribution(_labels(space.inter_op_threads))
        if len(space.dynamic_batching) > 1:
            found["dynamic_batching"] = d.CategoricalDistribution(["off", "on"])
        if dynamic:
            if len(space.max_batch_sizes) > 1:
                found["max_batch_size"] = d.IntDistribution(0, len(space.max_batch_sizes) - 1)
            if len(space.queue_delays_us) > 1:
                found["queue_delay"] = d.IntDistribution(0, len(space.queue_delays_us) - 1)
            if len(space.preferred_batch_sizes) > 1:
                found["preferred"] = d.CategoricalDistribution(_labels(space.preferred_batch_sizes))
        return found

    def _encode(self, candidate: Candidate) -> dict[str, Any]:
        space = self._space
        params: dict[str, Any] = {}
        names = self._distributions(candidate.dynamic_batching)
        values: dict[str, Any] = {
            "instances": _position(space.instances, candidate.instances),
            "intra_op": _label(candidate.intra_op_threads),
            "inter_op": _label(candidate.inter_op_threads),
            "dynamic_batching": "on" if candidate.dynamic_batching else "off",
            "max_batch_size": _position(space.max_batch_sizes, candidate.max_batch_size),
            "queue_delay": _position(space.queue_delays_us, candidate.max_queue_delay_us),
            "preferred": _label(candidate.preferred_batch_sizes),
        }
        for name in names:
            params[name] = values[name]
        return params

    def _decode(self, trial: Any) -> Candidate:
        space = self._space

        def pick(name: str, values: Sequence[Any]) -> Any:
            if len(values) == 1:
                return values[0]
            if name in _CATEGORICAL:
                label = trial.suggest_categorical(name, _labels(values))
                return values[_labels(values).index(label)]
            return values[trial.suggest_int(name, 0, len(values) - 1)]

        instances = pick("instances", space.instances)
        intra = pick("intra_op", space.intra_op_threads)
        inter = pick("inter_op", space.inter_op_threads)
        if len(space.dynamic_batching) > 1:
            dynamic = trial.suggest_categorical("dynamic_batching", ["off", "on"]) == "on"
        else:
            dynamic = space.dynamic_batching[0]
        if not dynamic:
            return Candidate(instances, space.own_max_batch_size, False, 0, (), intra, inter)
        mbs = pick("max_batch_size", space.max_batch_sizes)
        delay = pick("queue_delay", space.queue_delays_us)
        preferred = tuple(s for s in pick("preferred", space.preferred_batch_sizes) if s <= mbs)
        return Candidate(instances, mbs, True, delay, preferred, intra, inter)

    # -- the protocol ---------------------------------------------------------------------------

    def preload(self, candidate: Candidate, score: float) -> None:
        self._scores[candidate] = score
        if candidate not in self._valid_set:
            return  # measured for another space; nothing to teach the sampler
        trial = self._optuna.trial.create_trial(
            params=self._encode(candidate),
            distributions=self._distributions(candidate.dynamic_batching),
            value=_finite(score),
        )
        self._study.add_trial(trial)

    def propose(self) -> Candidate | None:
        for _ in range(_MAX_REPEATS):
            trial = self._study.ask()
            candidate = self._decode(trial)
            if candidate in self._scores or candidate not in self._valid_set:
                score = self._scores.get(candidate, _WORST)
                self._study.tell(trial, _finite(score))
                continue
            self._pending = trial
            return candidate
        left = [c for c in self._valid if c not in self._scores]
        if not left:
            return None
        candidate = self._rng.choice(left)
        self._pending = None
        return candidate

    def record(self, candidate: Candidate, score: float) -> None:
        self._scores[candidate] = score
        if self._pending is not None:
            self._study.tell(self._pending, _finite(score))
            self._pending = None
        else:
            self.preload(candidate, score)


def _startup_trials(size: int) -> int:
    """Random trials before TPE models the results: a few, fewer on a small space."""
    return max(3, min(10, size // 12))


def _labels(values: Sequence[Any]) -> list[str]:
    return [_label(v) for v in values]


def _label(value: Any) -> str:
    if value is None:
        return "auto"
    if isinstance(value, tuple):
        return "+".join(str(v) for v in value) or "none"
    return str(value)


def _position(values: Sequence[Any], value: Any) -> int:
    return values.index(value) if value in values else 0


def _finite(score: float) -> float:
    return score if score > _WORST else _WORST


async def drive(
    searcher: Searcher,
    measure: Callable[[Candidate], Awaitable[float]],
    *,
    budget: int,
    known: Mapping[Candidate, float],
    space: Sequence[Candidate],
) -> int:
    """Measure proposals until ``budget`` configurations of ``space`` have been measured (the
    ``known`` ones count) or the searcher has none left. Returns how many were measured now."""
    scores = dict(known)
    for done, done_score in known.items():
        searcher.preload(done, done_score)
    members = set(space)
    spent = sum(1 for done in known if done in members)
    measured = 0
    while spent < budget:
        candidate = searcher.propose()
        if candidate is None:
            break
        if candidate in scores:
            searcher.record(candidate, scores[candidate])
            continue
        score = await measure(candidate)
        scores[candidate] = score
        searcher.record(candidate, score)
        spent += 1
        measured += 1
    return measured
