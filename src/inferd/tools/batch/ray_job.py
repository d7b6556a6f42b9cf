"""The same batch job on Ray Data: actors holding an inferd engine infer, Ray writes.

    range(rows), in blocks of --shard-rows row indices
      → map_batches(_Predictor, ActorPoolStrategy(size=actors)): each actor reads its rows from
        the input with the single-process runner's readers, checks them, infers them through its
        own engine (requests of the batch size, several in flight, bad rows isolated) and
        answers the single-process runner's table plus an error column
      → materialize → the good rows written with write_parquet, the bad rows collected into
        _bad_rows.jsonl

Ray hands out row indices rather than reading the file with its own readers: the row index is
part of the output, and Ray Data has no consecutive row number (``Dataset.zip`` with a range is
deprecated and relies on an order Ray does not guarantee). Reading through the same readers also
makes the rows, their checks and so the outputs exactly the single-process run's. The input and
the model repository must be readable at the same path on every node.

Each actor starts an engine on its own event loop thread with the model loaded (the engine
factory is injected: the CLI passes its own). A Ray run is not resumable: it needs a new or
empty output folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.engine import Engine
from inferd.errors import InternalError, InvalidArgumentError
from inferd.tools.batch.job import (
    BatchJob,
    BatchReport,
    engine_infer,
    model_spec,
    plan_job,
    set_instances,
)
from inferd.tools.batch.outdir import BAD_ROWS
from inferd.tools.batch.output import ROW_COLUMN, column_type, outputs_table
from inferd.tools.batch.pipeline import infer_checked
from inferd.tools.batch.rows import check_rows
from inferd.tools.batch.sources import SourceOptions, open_source

__all__ = ["ERROR_COLUMN", "EngineFactory", "RayOptions", "run_ray_batch"]

ERROR_COLUMN = "_error"
EngineFactory = Callable[[Path, str], AbstractAsyncContextManager[Engine]]


@dataclass(frozen=True, slots=True)
class RayOptions:
    address: str | None = None  # None: start a local Ray for the job
    actors: int = 2
    cpus: int | None = None  # a local Ray's CPUs (None: this machine's)
    instances: int | None = None  # model instances per actor (None: the config's)
    progress: bool = False  # Ray Data's own progress bars


class _Predictor:
    """A Ray Data actor: one inferd engine on a private event loop, fed blocks of row indices."""

    def __init__(
        self,
        repository: Path,
        job: BatchJob,
        fmt: str,
        instances: int | None,
        engine: EngineFactory,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._context = engine(repository, job.model)
        self._engine: Engine = self._run(self._context.__aenter__())
        if instances is not None:
            self._run(set_instances(self._engine, job.model, instances))
        spec = model_spec(self._engine, job.model, job.version)
        self._plan = plan_job(spec, job)
        self._infer = engine_infer(
            self._engine, spec, job.version, [o.name for o in self._plan.settings.outputs]
        )
        options = SourceOptions(image_scale=job.image_scale)
        self._source = open_source(job.input, fmt, spec, self._plan.settings.inputs, options)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        ids = batch.column("id").to_numpy()
        start, stop = int(ids[0]), int(ids[-1]) + 1
        if not np.array_equal(ids, np.arange(start, stop)):
            raise InternalError("Ray handed an actor row indices that are not consecutive")
        block = self._source.read(start, stop)
        settings = self._plan.settings
        checked = check_rows(
            start,
            stop - start,
            block.columns,
            settings.inputs,
            allow_nan=settings.allow_nan,
            row_errors=block.errors,
        )
        answered, failed = self._run(infer_checked(self._infer, checked, settings))
        good = outputs_table(settings.outputs, answered)
        good = good.append_column(ERROR_COLUMN, pa.nulls(good.num_rows, pa.string()))
        bad = sorted(checked.bad + failed)
        if not bad:
            return good
        bad_columns: dict[str, Any] = {ROW_COLUMN: pa.array([r for r, _ in bad], pa.int64())}
        for plan in settings.outputs:
            bad_columns[plan.name] = pa.nulls(len(bad), column_type(plan))
        bad_columns[ERROR_COLUMN] = pa.array([why for _, why in bad], pa.string())
        return pa.concat_tables([good, pa.table(bad_columns)])

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # the actor is going away; Ray ends it anyway
            self._source.close()
            self._run(self._context.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)


def _good_rows(table: Any) -> Any:
    import pyarrow.compute as pc

    return table.filter(pc.is_null(table.column(ERROR_COLUMN))).drop_columns([ERROR_COLUMN])


def _bad_rows(table: Any) -> Any:
    import pyarrow.compute as pc

    return table.filter(pc.is_valid(table.column(ERROR_COLUMN))).select([ROW_COLUMN, ERROR_COLUMN])


def _start_ray(options: RayOptions) -> bool:
    """Connect to or start Ray unless this process already has; True when started here."""
    import ray

    if ray.is_initialized():
        return False
    if options.address is not None:
        ray.init(address=options.address, log_to_driver=False)
    else:
        ray.init(
            num_cpus=options.cpus or os.cpu_count() or 1,
            include_dashboard=False,
            log_to_driver=False,
        )
    return True


def actor_cpus(cluster_cpus: float, actors: int) -> float:
    """The CPUs each actor asks Ray for: one, or less on a small cluster, so that one CPU
    stays free for Ray Data's own tasks (making the row blocks, writing); without it the
    actors would hold every CPU and the job would wait forever."""
    return max(0.05, min(1.0, (cluster_cpus - 1) / actors)) if cluster_cpus > 1 else 0.5 / actors


def block_rows(rows: int, shard_rows: int, actors: int, batch_size: int) -> int:
    """Rows per Ray block: at most ``shard_rows``, and small enough that every actor gets about
    four blocks (so none idles while another finishes a long one), in whole requests."""
    per_actor = -(-rows // (4 * actors))
    wanted = min(shard_rows, max(per_actor, 1))
    return (
        max(batch_size, -(-wanted // batch_size) * batch_size) if wanted >= batch_size else wanted
    )


def run_ray_batch(
    job: BatchJob, repository: Path, options: RayOptions, *, engine: EngineFactory
) -> BatchReport:
    """Run ``job`` on Ray Data (a Ray already initialised in this process is used as it is)."""
    if job.output.exists() and (not job.output.is_dir() or any(job.output.iterdir())):
        raise InvalidArgumentError(
            f"--output {job.output}: a Ray run writes into a new or empty folder"
        )
    if options.actors < 1:
        raise InvalidArgumentError(f"--ray-actors must be at least 1, not {options.actors}")

    async def facts() -> tuple[str, int, int]:
        async with engine(repository, job.model) as local:
            spec = model_spec(local, job.model, job.version)
            plan = plan_job(spec, job)
            source = open_source(
                job.input, plan.fmt, spec, plan.settings.inputs, SourceOptions(job.image_scale)
            )
            source.close()
            return plan.fmt, source.rows, plan.settings.batch_size

    # the plan and the row count, checked here so a mistake is one line before Ray starts
    fmt, rows, plan_batch = asyncio.run(facts())
    started_here = _start_ray(options)
    try:
        return _run_on_ray(job, repository, options, engine, fmt, rows, plan_batch)
    finally:
        if started_here:
            import ray

            ray.shutdown()


def _run_on_ray(
    job: BatchJob,
    repository: Path,
    options: RayOptions,
    engine: EngineFactory,
    fmt: str,
    rows: int,
    plan_batch: int,
) -> BatchReport:
    import ray
    import ray.data as ray_data

    started = time.perf_counter()
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    cluster_cpus = float(resources.get("CPU", 1))
    ray_data.DataContext.get_current().enable_progress_bars = options.progress
    block = block_rows(rows, job.shard_rows, options.actors, plan_batch)
    blocks = max(1, -(-rows // block))
    answered = (
        ray_data.range(rows, override_num_blocks=blocks)
        .map_batches(
            _Predictor,
            fn_constructor_kwargs={
                "repository": repository,
                "job": job,
                "fmt": fmt,
                "instances": options.instances,
                "engine": engine,
            },
            batch_format="pyarrow",
            batch_size=block,
            compute=ray_data.ActorPoolStrategy(size=options.actors),
            num_cpus=actor_cpus(cluster_cpus, options.actors),
        )
        .materialize()
    )
    job.output.mkdir(parents=True, exist_ok=True)
    answered.map_batches(_good_rows, batch_format="pyarrow").write_parquet(str(job.output))
    bad: list[tuple[int, str]] = []
    for part in answered.map_batches(_bad_rows, batch_format="pyarrow").iter_batches(
        batch_format="pyarrow"
    ):
        rows_ = part.column(ROW_COLUMN).to_pylist()
        reasons = part.column(ERROR_COLUMN).to_pylist()
        bad.extend(zip(rows_, reasons, strict=True))
    if bad:
        with open(job.output / BAD_ROWS, "w", encoding="utf-8") as f:
            for row, reason in sorted(bad):
                f.write(json.dumps({"row": row, "reason": reason}) + "\n")
    return BatchReport(
        output=job.output,
        rows=rows,
        written=rows - len(bad),
        bad=len(bad),
        shards=blocks,
        processed_rows=rows,
        seconds=time.perf_counter() - started,
    )
