"""The analysis itself: for each model, measure its own config, then the candidates the search
proposes, each loaded through the model control API, each result stored as it comes.

Several models are searched one after the other, in the order given. While one is searched the
others stay loaded and idle: the ones searched before with their best config, the ones after
with their own. Each model's search has its own budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from inferd.codecs.model_config import ModelConfig
from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.configs import (
    apply_candidate,
    candidate_of,
    facts_of,
    load_base_config,
    override_json,
    served_message,
)
from inferd.tools.analyze.control import LoadFailedError, ModelControl
from inferd.tools.analyze.measure import MeasureSettings, measure_points
from inferd.tools.analyze.memory import MemoryProbe
from inferd.tools.analyze.objective import (
    Goals,
    Measurement,
    Outcome,
    PointFigures,
    evaluate,
    judge,
)
from inferd.tools.analyze.progress import Reporter
from inferd.tools.analyze.repeats import combine, to_confirm
from inferd.tools.analyze.search import GridSearch, QuickSearch, Searcher, drive
from inferd.tools.analyze.space import Candidate, RangeChoices, Space, enumerate_space, space_for
from inferd.tools.analyze.store import ResultStore
from inferd.tools.perf.driver import PerfRunError
from inferd.tools.perf.transport import PerfAccessError, PerfRequestError, Transport

__all__ = ["AUTO_GRID_LIMIT", "AnalyzeOptions", "Analyzer", "ModelRun", "plan_search"]

# --search auto: a full grid up to this many configurations, the quick search above
AUTO_GRID_LIMIT = 16


@dataclass(frozen=True)
class AnalyzeOptions:
    models: tuple[str, ...]
    repository: Path
    goals: Goals
    measure: MeasureSettings
    choices: RangeChoices = field(default_factory=RangeChoices)
    search: str = "auto"  # "grid" | "quick" | "auto"
    budget: int | None = None
    seed: int = 0
    cores: int = 1
    confirm: int = 3  # the best configs measured a second time, besides the default


@dataclass
class ModelRun:
    """What the analysis found for one model."""

    model: str
    base: ModelConfig  # the repository's config (the candidates change only their fields)
    space: Space
    search: str
    budget: int
    outcome: Outcome
    measured_now: int
    resumed: int


def plan_search(search: str, size: int, budget: int | None) -> tuple[str, int]:
    """The search to run and how many configurations it may measure.

    ``auto`` runs the grid when the space has at most :data:`AUTO_GRID_LIMIT` configurations
    and the quick search otherwise. Without a budget the grid measures them all and the quick
    search a quarter of them (at least 4).
    """
    if search == "auto":
        search = "grid" if size <= AUTO_GRID_LIMIT else "quick"
    if budget is None:
        budget = size if search == "grid" else max(4, math.ceil(size / 4))
    return search, min(budget, size)


class Analyzer:
    def __init__(
        self,
        options: AnalyzeOptions,
        control: ModelControl,
        make_transport: Callable[[str], Transport],
        memory: MemoryProbe,
        store: ResultStore,
        reporter: Reporter,
        *,
        in_process: bool = False,
    ) -> None:
        self._options = options
        self._control = control
        self._make_transport = make_transport
        self._memory = memory
        self._store = store
        self._reporter = reporter
        self._in_process = in_process

    async def run(self) -> list[ModelRun]:
        runs: list[ModelRun] = []
        for model in self._options.models:
            run = await self._analyze(model)
            runs.append(run)
            best = run.outcome.best
            if best is not None and not best.is_default and model != self._options.models[-1]:
                # the models searched next are measured beside this one's chosen config
                await self._control.load(model, override_json(self._config_of(run.base, best)))
        return runs

    @staticmethod
    def _config_of(base: ModelConfig, measurement: Measurement) -> ModelConfig:
        if measurement.is_default:
            return base
        return apply_candidate(base, measurement.candidate)

    async def _analyze(self, model: str) -> ModelRun:
        options = self._options
        await self._control.load(model)  # as its repository says
        served = await self._control.config(model)
        model_dir = options.repository / model
        if not model_dir.is_dir():
            raise InvalidArgumentError(f"model '{model}' has no directory in {options.repository}")
        base = load_base_config(model_dir, served)
        served_config = served_message(served, base)
        _check_searchable(model, served_config)
        facts = facts_of(served_config)
        space = space_for(facts, options.cores, options.choices)
        for note in space.notes:
            self._reporter.note(note)
        candidates = enumerate_space(space)
        search, budget = plan_search(options.search, len(candidates), options.budget)
        stored = self._store.measurements(model)
        earlier = [m for m in stored if m.repeat == 0]  # the search's rounds
        in_space = set(candidates)
        known = {m.candidate: self._score(m) for m in combine(stored) if not m.is_default}
        resumed = len(earlier)
        if earlier:
            self._reporter.note(
                f"resuming: {resumed} configuration(s) of '{model}' measured earlier in "
                f"{self._store.directory} are not measured again"
            )
        self._reporter.note(
            f"{model}: {len(candidates)} configurations in the space; {search} search, "
            f"up to {budget} measured" + (" besides the model's own config" if budget else "")
        )
        planned = max(0, budget - sum(1 for c in known if c in in_space))
        has_default = any(m.is_default for m in earlier)  # its first round
        self._reporter.add_total(planned + (0 if has_default else 1))
        measured_now = 0
        if not has_default:
            await self._measure(model, "default", candidate_of(served_config), None)
            measured_now += 1
        searcher: Searcher = (
            GridSearch(candidates)
            if search == "grid"
            else QuickSearch(space, candidates, seed=options.seed)
        )

        async def measure(candidate: Candidate) -> float:
            config = apply_candidate(base, candidate)
            measurement = await self._measure(model, candidate.key, candidate, config)
            return self._score(measurement)

        measured_now += await drive(searcher, measure, budget=budget, known=known, space=candidates)
        measured_now += await self._confirm(model, base)
        outcome = judge(
            model,
            combine(self._store.measurements(model)),
            options.goals,
            confirmed_only=options.confirm > 0,
        )
        return ModelRun(model, base, space, search, budget, outcome, measured_now, resumed)

    async def _confirm(self, model: str, base: ModelConfig) -> int:
        """Measure the default and the leading configs once more (see repeats.py)."""
        stored = self._store.measurements(model)
        first_round = judge(model, [m for m in stored if m.repeat == 0], self._options.goals)
        done = {m.key for m in stored if m.repeat > 0}
        pending = to_confirm(first_round, self._options.confirm, done)
        if not pending:
            return 0
        self._reporter.note(
            f"{model}: measuring again, to confirm: " + ", ".join(m.label for m in pending)
        )
        self._reporter.add_total(len(pending))
        for m in pending:
            config = None if m.is_default else apply_candidate(base, m.candidate)
            await self._measure(model, m.key, m.candidate, config, repeat=1)
        return len(pending)

    def _score(self, measurement: Measurement) -> float:
        return evaluate(measurement, self._options.goals).score(self._options.goals)

    async def _measure(
        self,
        model: str,
        key: str,
        candidate: Candidate,
        config: ModelConfig | None,
        *,
        repeat: int = 0,
    ) -> Measurement:
        """Load ``config`` (None: the repository's own), measure it, store the result."""
        self._reporter.start(model, key, candidate.describe())
        error: str | None = None
        points: tuple[PointFigures, ...] = ()
        memory_mb: float | None = None
        try:
            await self._control.load(model, None if config is None else override_json(config))
            self._memory.start()
            points = await measure_points(
                self._options.measure,
                model,
                lambda: self._make_transport(model),
                progress=self._reporter,
                in_process=self._in_process,
            )
            memory_mb = await self._memory.read_mb()
        except LoadFailedError as exc:
            if config is None:
                raise
            error = f"load failed: {exc.message}"
        except PerfAccessError:
            raise  # every config would be refused alike: the command says what to pass
        except PerfRequestError as exc:
            error = f"requests failed: {exc.message}"
        except PerfRunError as exc:
            error = exc.message
        measurement = Measurement(model, key, candidate, points, memory_mb, error, repeat)
        self._store.append(measurement)
        self._reporter.done(measurement, evaluate(measurement, self._options.goals))
        return measurement


def _check_searchable(model: str, config: ModelConfig) -> None:
    """Models whose serving the searched settings do not describe are refused by name."""
    if config.platform == "ensemble":
        raise InvalidArgumentError(
            f"model '{model}' is an ensemble, which has no instances or batcher of its own: "
            "analyze the models its steps call"
        )
    if config.model_transaction_policy.decoupled:
        raise InvalidArgumentError(
            f"model '{model}' is decoupled (any number of responses per request): inferd analyze "
            "measures request/response models"
        )
