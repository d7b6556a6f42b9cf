"""The single-process runner: read, infer and write shards at once, in a bounded pipeline.

Three stages joined by small queues, so reading and writing overlap with the model's work and
at most a few shards are held in memory:

    read (a thread: the file, then the row checks) → infer (requests of the batch size, up to
    ``in_flight`` at once, across shard boundaries) → write (a thread: Parquet, bad rows,
    manifest)

Any stage's failure stops the others; shards already written stay finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from inferd.tools.batch.batches import slices
from inferd.tools.batch.isolate import Answered, Infer, infer_isolating
from inferd.tools.batch.outdir import OutputDir
from inferd.tools.batch.output import OutputPlan, outputs_table
from inferd.tools.batch.progress import JobProgress
from inferd.tools.batch.rows import CheckedRows, InputPlan, check_rows
from inferd.tools.batch.shards import Shard
from inferd.tools.batch.sources import Source

__all__ = ["PipelineSettings", "Totals", "infer_checked", "run_pipeline"]

QUEUE_SHARDS = 2  # shards waiting between two stages


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    inputs: tuple[InputPlan, ...]
    outputs: tuple[OutputPlan, ...]
    batch_size: int
    in_flight: int
    batching: bool
    allow_nan: bool


@dataclass(slots=True)
class Totals:
    written: int = 0
    bad: int = 0
    shards: int = 0


def _read_and_check(source: Source, shard: Shard, settings: PipelineSettings) -> CheckedRows:
    block = source.read(shard.start, shard.stop)
    return check_rows(
        block.start,
        block.count,
        block.columns,
        settings.inputs,
        allow_nan=settings.allow_nan,
        row_errors=block.errors,
    )


async def infer_checked(
    infer: Infer,
    checked: CheckedRows,
    settings: PipelineSettings,
    gate: asyncio.Semaphore | None = None,
) -> tuple[list[Answered], list[tuple[int, str]]]:
    """Answer every good row of ``checked``: requests of the batch size, at most as many at
    once as ``gate`` lets through (default: ``settings.in_flight``)."""
    gate = gate or asyncio.Semaphore(settings.in_flight)

    async def one(start: int, stop: int) -> tuple[list[Answered], list[tuple[int, str]]]:
        async with gate:
            return await infer_isolating(infer, checked, start, stop, batching=settings.batching)

    results = await asyncio.gather(
        *(one(start, stop) for start, stop in slices(checked, settings.batch_size))
    )
    answered = [piece for pieces, _ in results for piece in pieces]
    bad = [row for _, rows in results for row in rows]
    return answered, bad


async def _first_failure(coros: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run the stages; when one fails, cancel the others and raise its error."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_pipeline(
    infer: Infer,
    source: Source,
    shards: Sequence[Shard],
    out: OutputDir,
    settings: PipelineSettings,
    progress: JobProgress | None = None,
) -> Totals:
    """Run ``shards`` (those not finished yet) through ``infer`` into ``out``."""
    totals = Totals()
    checked_q: asyncio.Queue[tuple[Shard, CheckedRows] | None] = asyncio.Queue(QUEUE_SHARDS)
    answered_q: asyncio.Queue[
        tuple[Shard, CheckedRows, asyncio.Task[tuple[list[Answered], list[tuple[int, str]]]]] | None
    ] = asyncio.Queue(QUEUE_SHARDS)
    gate = asyncio.Semaphore(settings.in_flight)
    running: set[asyncio.Task[Any]] = set()

    async def read() -> None:
        for shard in shards:
            checked = await asyncio.to_thread(_read_and_check, source, shard, settings)
            await checked_q.put((shard, checked))
        await checked_q.put(None)

    async def infer_stage() -> None:
        while (item := await checked_q.get()) is not None:
            shard, checked = item
            task = asyncio.ensure_future(infer_checked(infer, checked, settings, gate))
            running.add(task)  # until written: its error is retrieved whatever stops the job
            await answered_q.put((shard, checked, task))
        await answered_q.put(None)

    async def write() -> None:
        while (item := await answered_q.get()) is not None:
            shard, checked, task = item
            answered, failed = await task
            running.discard(task)
            bad = checked.bad + failed
            table = outputs_table(settings.outputs, answered)
            await asyncio.to_thread(out.finish_shard, shard, table, bad)
            totals.written += table.num_rows
            totals.bad += len(bad)
            totals.shards += 1
            if progress is not None:
                progress.advance(shard.rows, len(bad))

    try:
        await _first_failure([read(), infer_stage(), write()])
    finally:
        for task in list(running):
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    return totals
