"""A batch job: what it is, how the model shapes it, and running it on an engine.

``plan_job`` turns the user's :class:`BatchJob` and the model's config into the facts every
runner shares (inputs, outputs, batch size, requests in flight, format); ``run_batch`` runs the
job in this process on an :class:`~inferd.engine.Engine` that has the model loaded.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest, RequestedOutput
from inferd.core.model_spec import ModelSpec
from inferd.engine import Engine
from inferd.errors import InferdError, InvalidArgumentError
from inferd.tools.batch.batches import choose_batch_size, choose_in_flight
from inferd.tools.batch.isolate import Infer
from inferd.tools.batch.outdir import OutputDir
from inferd.tools.batch.output import output_plans, warm_up_arrow
from inferd.tools.batch.pipeline import PipelineSettings, run_pipeline
from inferd.tools.batch.progress import JobProgress
from inferd.tools.batch.rows import input_plans
from inferd.tools.batch.shards import input_stamp, plan_shards
from inferd.tools.batch.sources import SourceOptions, detect_format, open_source

__all__ = [
    "BatchJob",
    "BatchReport",
    "JobPlan",
    "engine_infer",
    "job_identity",
    "model_spec",
    "plan_job",
    "run_batch",
    "set_instances",
]

DEFAULT_SHARD_ROWS = 4096


@dataclass(frozen=True, slots=True)
class BatchJob:
    model: str
    input: Path
    output: Path
    version: str = ""
    input_format: str = "auto"
    outputs: tuple[str, ...] = ()  # empty: every output
    shard_rows: int = DEFAULT_SHARD_ROWS
    batch_size: int | None = None  # None: the model's preferred or maximum batch size
    in_flight: int | None = None  # None: two requests per instance
    allow_nan: bool = False
    image_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class JobPlan:
    spec: ModelSpec
    fmt: str
    settings: PipelineSettings


@dataclass(slots=True)
class BatchReport:
    output: Path
    rows: int  # in the input
    written: int = 0  # rows written by this run
    bad: int = 0  # bad rows found by this run
    shards: int = 0  # shards in the job
    done_before: int = 0  # shards finished by an earlier run, not redone
    processed_rows: int = 0  # rows read by this run
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def rows_per_s(self) -> float:
        return self.processed_rows / self.seconds if self.seconds > 0 else 0.0


def plan_job(spec: ModelSpec, job: BatchJob) -> JobPlan:
    if spec.decoupled:
        raise InvalidArgumentError(
            f"model '{spec.name}' is decoupled (zero or many responses per request); "
            "inferd batch needs one response per request"
        )
    if spec.has_sequence_batching:
        raise InvalidArgumentError(
            f"model '{spec.name}' is stateful (sequence batching): its rows depend on each "
            "other's order, which a batch job does not keep"
        )
    if job.shard_rows < 1:
        raise InvalidArgumentError(f"--shard-rows must be at least 1, not {job.shard_rows}")
    if not job.image_scale > 0:
        raise InvalidArgumentError(f"--image-scale must be positive, not {job.image_scale}")
    fmt = detect_format(job.input) if job.input_format == "auto" else job.input_format
    settings = PipelineSettings(
        inputs=input_plans(spec),
        outputs=tuple(output_plans(spec, job.outputs)),
        batch_size=choose_batch_size(spec, job.batch_size),
        in_flight=choose_in_flight(spec, job.in_flight),
        batching=spec.max_batch_size > 0,
        allow_nan=job.allow_nan,
    )
    return JobPlan(spec, fmt, settings)


def job_identity(job: BatchJob, plan: JobPlan, rows: int) -> dict[str, Any]:
    """What the output depends on: a rerun with the same identity resumes the job."""
    return {
        "model": plan.spec.name,
        "version": job.version,
        "input": input_stamp(job.input),
        "format": plan.fmt,
        "rows": rows,
        "shard_rows": job.shard_rows,
        "outputs": [o.name for o in plan.settings.outputs],
        "allow_nan": job.allow_nan,
        "image_scale": job.image_scale,
    }


def model_spec(engine: Engine, model: str, version: str) -> ModelSpec:
    try:
        return engine.model_config(model, version)
    except InferdError as exc:
        raise InvalidArgumentError(f"model '{model}': {exc.message}") from None


async def set_instances(engine: Engine, model: str, count: int) -> None:
    """Reload ``model`` with ``count`` CPU instances (the config otherwise unchanged)."""
    if count < 1:
        raise InvalidArgumentError(f"--instances must be at least 1, not {count}")
    config = dict(model_spec(engine, model, "").config)
    config["instance_group"] = [{"kind": "KIND_CPU", "count": count}]
    await engine.load_model(model, config_json=json.dumps(config))


def engine_infer(engine: Engine, spec: ModelSpec, version: str, outputs: list[str]) -> Infer:
    """A function that sends one request of tensors to ``engine`` and returns its outputs."""
    requested = [RequestedOutput(name) for name in outputs]
    wanted = {o.name for o in spec.outputs} != set(outputs)

    async def infer(inputs: dict[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        request = InferRequest(
            model_name=spec.name,
            inputs=inputs,
            model_version=version,
            outputs=list(requested) if wanted else None,
        )
        return (await engine.infer(request)).outputs

    return infer


async def run_batch(
    engine: Engine, job: BatchJob, progress: JobProgress | None = None
) -> BatchReport:
    """Run ``job`` on ``engine``; resume it when ``job.output`` holds its unfinished run."""
    spec = model_spec(engine, job.model, job.version)
    plan = plan_job(spec, job)
    options = SourceOptions(image_scale=job.image_scale)
    await asyncio.to_thread(warm_up_arrow)
    source = await asyncio.to_thread(
        open_source, job.input, plan.fmt, spec, plan.settings.inputs, options
    )
    try:
        shards = plan_shards(source.rows, job.shard_rows)
        identity = job_identity(job, plan, source.rows)
        out = await asyncio.to_thread(OutputDir.open, job.output, identity, len(shards))
        todo = [s for s in shards if not out.is_finished(s)]
        report = BatchReport(
            output=job.output,
            rows=source.rows,
            shards=len(shards),
            done_before=len(shards) - len(todo),
            processed_rows=sum(s.rows for s in todo),
        )
        infer = engine_infer(engine, spec, job.version, [o.name for o in plan.settings.outputs])
        if progress is not None:
            progress.start(source.rows, source.rows - report.processed_rows)
        started = time.perf_counter()
        try:
            totals = await run_pipeline(infer, source, todo, out, plan.settings, progress)
        finally:
            if progress is not None:
                progress.stop()
        report.seconds = time.perf_counter() - started
        report.written, report.bad = totals.written, totals.bad
        return report
    finally:
        source.close()
