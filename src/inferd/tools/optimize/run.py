"""``inferd optimize`` from start to end: the baseline measured as it is served, every candidate
built, served from a scratch repository, checked on the eval data and measured, the winner
chosen and written, and the reports produced.

The engine that serves each model is injected (``engine_factory``): the CLI passes an in-process
server with no listeners, so what is measured is inferd's own request path down to the runtime.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from inferd.codecs.model_config import ModelConfig, parse_pbtxt
from inferd.core.model_spec import ModelSpec
from inferd.engine import Engine
from inferd.errors import InferdError, InvalidArgumentError
from inferd.tools.optimize.candidate import ONNX_PLATFORM, Candidate, CandidateSkipped
from inferd.tools.optimize.data import Dataset, load_dataset
from inferd.tools.optimize.decide import Decision, Goals, Outcome, decide
from inferd.tools.optimize.device import (
    Device,
    device_config,
    moves_instances,
    require_device,
    resolve_device,
)
from inferd.tools.optimize.evaluate import judge, model_outputs
from inferd.tools.optimize.metrics import default_metric, needs_labels
from inferd.tools.optimize.plan import PlanContext, Step, plan_steps, repair_steps
from inferd.tools.optimize.progress import LineReporter, Reporter
from inferd.tools.optimize.scratch import inside
from inferd.tools.optimize.speed import SpeedSettings, measure_speed, write_sample
from inferd.tools.optimize.staging import platform_of, stage
from inferd.tools.optimize.write import Written, write_winner

__all__ = ["EngineFactory", "OptimizeOptions", "OptimizeResult", "optimize"]

log = logging.getLogger(__name__)

EngineFactory = Callable[[Path, str], AbstractAsyncContextManager[Engine]]


@dataclass(frozen=True)
class OptimizeOptions:
    model: str
    repository: Path
    calibration: Path
    eval_data: Path
    results: Path
    train: Path | None = None
    metric: str | None = None
    label: str | None = None
    output: str | None = None
    goals: Goals = field(default_factory=Goals)
    speed: SpeedSettings = field(default_factory=SpeedSettings)
    only: tuple[str, ...] = ()  # candidate kinds to build; empty: every kind that applies
    extra: tuple[Path, ...] = ()  # candidate model files made elsewhere (inferd distill)
    write: bool = True
    output_model: str | None = None
    eval_batch_size: int = 32
    calibration_rows: int = 256
    device: str = "auto"  # cpu, cuda, cuda:N or auto (the configuration's instance kind)


@dataclass
class OptimizeResult:
    outcomes: list[Outcome]
    decision: Decision
    candidates: dict[str, Candidate]
    written: Written | None
    cpu_summary: str
    sensitivity: list[dict[str, object]] = field(default_factory=list)
    device: str = "cpu"  # where every model was measured: cpu or cuda:N
    device_reason: str = ""


@dataclass
class _Baseline:
    spec: ModelSpec
    output: str
    reference: np.ndarray
    labels: np.ndarray | None
    metric: str
    eval: Dataset
    calibration: Dataset
    train: Dataset | None
    sample: Path


def _rss_mb() -> float | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return None


def read_model_config(model_dir: Path) -> ModelConfig:
    """The model's ``config.pbtxt`` (empty when it has none: the server completes it)."""
    path = model_dir / "config.pbtxt"
    if not path.is_file():
        return ModelConfig()
    return parse_pbtxt(path.read_text(encoding="utf-8"), str(path))


def _size_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _latest_version_dir(model_dir: Path) -> Path:
    versions = sorted(
        (int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True
    )
    if not versions:
        raise InvalidArgumentError(f"{model_dir} has no version folder (1/, 2/, ...)")
    return model_dir / str(versions[0])


def _float_output(spec: ModelSpec, wanted: str | None) -> str:
    names = [t.name for t in spec.outputs]
    if wanted is not None:
        if wanted not in names:
            raise InvalidArgumentError(
                f"model '{spec.name}' has no output '{wanted}' (outputs: {', '.join(names)})"
            )
        return wanted
    for tensor in spec.outputs:
        if tensor.datatype.name in ("FP32", "FP16", "BF16", "FP64"):
            return tensor.name
    raise InvalidArgumentError(
        f"model '{spec.name}' has no floating-point output to compare: name one with --output"
    )


def _instances(spec: ModelSpec) -> int:
    return max(1, sum(g.count for g in spec.instance_groups))


class _Session:
    """One run: the options, the engine factory, the reporter and the scratch repository."""

    def __init__(
        self,
        options: OptimizeOptions,
        engine_factory: EngineFactory,
        reporter: Reporter,
        served_config: ModelConfig,
    ) -> None:
        self.options = options
        self.engine_factory = engine_factory
        self.reporter = reporter
        self.scratch = options.results / "repository"
        self.builds = options.results / "candidates"
        # the baseline's configuration with its instances on the measured device
        self.served_config = served_config

    async def measure(
        self, name: str, kind: str, repository: Path, model: str, base: _Baseline | None
    ) -> tuple[Outcome, _Baseline | None]:
        """Serve ``model`` from ``repository``, check it on the eval data and time it."""
        options = self.options
        before = _rss_mb()
        async with self.engine_factory(repository, model) as engine:
            after = _rss_mb()
            spec = engine.model_config(model)
            if base is None:
                base = self._baseline_data(spec)
            self.reporter.step(name, "checking on the eval data")
            batch = min(options.eval_batch_size, spec.max_batch_size or 1)
            outputs = await model_outputs(engine, model, base.eval, base.output, batch)
            if base.reference.size == 0:
                base.reference = outputs
                base.metric = options.metric or default_metric(outputs, base.labels)
            quality = judge(outputs, base.reference, base.labels, base.metric)
            self.reporter.step(name, "measuring speed")
            speed = await measure_speed(
                engine,
                model,
                base.sample,
                options.speed,
                concurrency=_instances(spec),
                max_batch_size=spec.max_batch_size,
            )
        memory = after - before if before is not None and after is not None else None
        return (
            Outcome(
                name=name,
                kind=kind,
                quality=quality,
                speed=tuple(speed),
                memory_mb=memory,
            ),
            base,
        )

    def _baseline_data(self, spec: ModelSpec) -> _Baseline:
        options = self.options
        output = _float_output(spec, options.output)
        eval_data = load_dataset(options.eval_data, spec.inputs, options.label)
        if options.metric is not None and needs_labels(options.metric) and eval_data.labels is None:
            raise InvalidArgumentError(
                f"--metric {options.metric} needs labels, and {options.eval_data} has none: "
                "add a label array/column (see --label) or use an agreement metric "
                "(cosine, top1, max_abs_error)"
            )
        calibration = load_dataset(options.calibration, spec.inputs, None).head(
            options.calibration_rows
        )
        train = load_dataset(options.train, spec.inputs, options.label) if options.train else None
        self.builds.mkdir(parents=True, exist_ok=True)
        sample = write_sample(eval_data, self.builds / "perf-sample.npz")
        return _Baseline(
            spec=spec,
            output=output,
            reference=np.empty(0),
            labels=eval_data.labels,
            metric=options.metric or "",
            eval=eval_data,
            calibration=calibration,
            train=train,
            sample=sample,
        )

    async def try_candidate(
        self, step: Step, context: PlanContext, base: _Baseline, config_model_dir: Path
    ) -> tuple[Outcome, Candidate | None]:
        self.reporter.step(step.name, "building")
        work = self.builds / step.name
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        started = time.perf_counter()
        try:
            with inside(work):
                candidate = step.build(context, work, step.options)
        except CandidateSkipped as exc:
            return Outcome(step.name, step.kind, skipped=exc.message), None
        except InferdError as exc:
            return Outcome(step.name, step.kind, skipped=f"failed to build: {exc.message}"), None
        except Exception as exc:  # a library's own error while building: report, go on
            log.exception("building candidate %s failed", step.name)
            return Outcome(step.name, step.kind, skipped=f"failed to build: {exc}"), None
        build_s = time.perf_counter() - started
        candidate = replace(candidate, name=step.name)
        return await self.measure_candidate(candidate, base, config_model_dir, build_s), candidate

    async def measure_candidate(
        self, candidate: Candidate, base: _Baseline, config_model_dir: Path, build_s: float
    ) -> Outcome:
        model_dir = stage(
            candidate,
            self.served_config,
            self.scratch,
            candidate.name,
            baseline_dir=config_model_dir,
        )
        try:
            outcome, _ = await self.measure(
                candidate.name, candidate.kind, self.scratch, candidate.name, base
            )
        except InferdError as exc:
            return Outcome(
                candidate.name, candidate.kind, skipped=f"failed to serve or run: {exc.message}"
            )
        return replace(
            outcome,
            size_bytes=_size_bytes(model_dir / "1"),
            notes=tuple(candidate.notes),
            recipe=dict(candidate.recipe),
            build_s=build_s,
        )


async def optimize(
    options: OptimizeOptions,
    engine_factory: EngineFactory,
    reporter: Reporter | None = None,
) -> OptimizeResult:
    reporter = reporter or LineReporter(lines=False)
    # absolute paths: builds run inside their own folder (see scratch.inside)
    options = replace(
        options,
        repository=options.repository.resolve(),
        results=options.results.resolve(),
        calibration=options.calibration.resolve(),
        eval_data=options.eval_data.resolve(),
        train=options.train.resolve() if options.train is not None else None,
        extra=tuple(p.resolve() for p in options.extra),
    )
    model_dir = options.repository / options.model
    if not model_dir.is_dir():
        raise InvalidArgumentError(f"no model '{options.model}' in {options.repository}")
    config = read_model_config(model_dir)
    version_dir = _latest_version_dir(model_dir)
    device = resolve_device(options.device, config)
    require_device(device, platform_of(config), options.model)
    session = _Session(options, engine_factory, reporter, device_config(config, device))
    session.scratch.mkdir(parents=True, exist_ok=True)

    reporter.add_total(1)
    reporter.step("baseline", f"loading on {device.name}")
    baseline_repository = _baseline_repository(options, model_dir, version_dir, config, device)
    baseline, base = await session.measure(
        "baseline", "baseline", baseline_repository, options.model, None
    )
    assert base is not None
    baseline = replace(baseline, size_bytes=_size_bytes(version_dir))
    reporter.done(baseline)
    outcomes = [baseline]
    candidates: dict[str, Candidate] = {}

    context = PlanContext(
        spec=base.spec,
        config=config,
        model_dir=model_dir,
        version_dir=version_dir,
        platform=platform_of(base.spec),
        calibration=base.calibration,
        train=base.train,
        work_root=session.builds,
        output=base.output,
        only=options.only,
        device=device.name,
    )
    context, steps = plan_steps(context)
    reporter.add_total(len(steps) + len(options.extra))
    for step in steps:
        outcome, candidate = await session.try_candidate(step, context, base, model_dir)
        if candidate is not None and step.source:
            context = replace(context, source=candidate)
        outcomes.append(outcome)
        if candidate is not None:
            candidates[candidate.name] = candidate
        reporter.done(outcome)

    sensitivity: list[dict[str, object]] = []
    repairs = repair_steps(
        context,
        outcomes,
        candidates,
        base.eval,
        base.reference,
        base.output,
        base.metric,
        options.goals,
    )
    reporter.add_total(len(repairs))
    for repair in repairs:
        outcome, candidate = await session.try_candidate(repair, context, base, model_dir)
        outcomes.append(outcome)
        if candidate is not None:
            candidates[candidate.name] = candidate
            ranking = candidate.recipe.get("sensitivity")
            if isinstance(ranking, list) and not sensitivity:
                sensitivity = ranking
        reporter.done(outcome)

    for path in options.extra:
        name = f"extra-{path.stem}"
        candidate = Candidate(name=name, kind="external", path=path, platform=ONNX_PLATFORM)
        reporter.step(name, "loading")
        outcome = await session.measure_candidate(candidate, base, model_dir, 0.0)
        outcomes.append(outcome)
        candidates[name] = candidate
        reporter.done(outcome)

    decision = decide(outcomes, options.goals)
    written = None
    if options.write and not decision.kept_baseline:
        winner = candidates[decision.winner]
        written = write_winner(
            winner,
            config,
            model_dir,
            output_model=options.output_model,
            provenance={**_provenance(winner, outcomes, decision), "device": device.name},
        )
    from inferd.tools.optimize.cpu import detect_cpu

    return OptimizeResult(
        outcomes,
        decision,
        candidates,
        written,
        detect_cpu().summary(),
        sensitivity,
        device=device.name,
        device_reason=device.why,
    )


def _baseline_repository(
    options: OptimizeOptions,
    model_dir: Path,
    version_dir: Path,
    config: ModelConfig,
    device: Device,
) -> Path:
    """Where the baseline is served from: the repository itself when its configuration already
    runs on ``device``, else a copy of its latest version with the instances moved there."""
    if not moves_instances(config, device):
        return options.repository
    from google.protobuf import text_format

    repository = options.results / "baseline-repository"
    target = repository / options.model
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copytree(version_dir, target / version_dir.name)
    for item in model_dir.iterdir():  # label files, warm-up data
        if item.is_file() and item.name != "config.pbtxt":
            shutil.copy2(item, target / item.name)
    if (model_dir / "warmup").is_dir():
        shutil.copytree(model_dir / "warmup", target / "warmup")
    moved = device_config(config, device)
    (target / "config.pbtxt").write_text(text_format.MessageToString(moved), encoding="utf-8")
    return repository


def _provenance(
    winner: Candidate, outcomes: Sequence[Outcome], decision: Decision
) -> dict[str, object]:
    chosen = next(o for o in outcomes if o.name == winner.name)
    baseline = outcomes[0]
    return {
        "made_by": "inferd optimize",
        "candidate": winner.name,
        "kind": winner.kind,
        "recipe": dict(winner.recipe),
        "notes": list(winner.notes),
        "gain": decision.gain,
        "batch_size": decision.batch_size,
        "quality": dict(chosen.quality.figures) if chosen.quality else {},
        "baseline_quality": dict(baseline.quality.figures) if baseline.quality else {},
    }
