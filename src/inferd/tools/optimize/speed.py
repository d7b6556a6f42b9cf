"""How fast a served candidate answers, measured in process by ``inferd perf``'s own driver.

Each batch size is one closed-loop load point with as many requests in flight as the model has
instances (each instance busy, nothing queued behind it), until perf_analyzer's stability rule
holds. Requests carry a real row of the eval data, repeated to the batch size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.engine import Engine
from inferd.tools.perf.inprocess import InProcessTransport
from inferd.tools.perf.options import PerfOptions, Range
from inferd.tools.perf.run import run_perf

if TYPE_CHECKING:
    from inferd.tools.optimize.data import Dataset

__all__ = ["SpeedPoint", "SpeedSettings", "batch_sizes_for", "measure_speed", "write_sample"]


@dataclass(frozen=True)
class SpeedSettings:
    batch_sizes: tuple[int, ...] = (1, 8, 64)
    measurement_interval_ms: int = 1000
    stability_percentage: float = 10.0
    max_trials: int = 6


@dataclass(frozen=True)
class SpeedPoint:
    batch_size: int
    concurrency: int
    throughput: float  # inferences per second
    p50_ms: float
    p99_ms: float
    stable: bool


def batch_sizes_for(wanted: Sequence[int], max_batch_size: int) -> tuple[int, ...]:
    """The batch sizes the model can take: those up to ``max_batch_size`` (1 when it does not
    batch), with the largest allowed added when some were above it."""
    if max_batch_size == 0:
        return (1,)
    allowed = sorted({b for b in wanted if 1 <= b <= max_batch_size})
    if any(b > max_batch_size for b in wanted) and max_batch_size not in allowed:
        allowed.append(max_batch_size)
    return tuple(allowed) or (1,)


def write_sample(data: Dataset, path: Path, rows: int = 16) -> Path:
    """The first rows of ``data`` as an ``.npz`` in ``inferd perf``'s input format."""
    sample = data.head(rows)
    arrays: dict[str, Any] = {name: np.asarray(a) for name, a in sample.inputs.items()}
    np.savez(path, **arrays)
    return path


async def measure_speed(
    engine: Engine,
    model: str,
    sample: Path,
    settings: SpeedSettings,
    *,
    concurrency: int,
    max_batch_size: int,
) -> list[SpeedPoint]:
    """One load point per batch size the model accepts."""
    points: list[SpeedPoint] = []
    for batch in batch_sizes_for(settings.batch_sizes, max_batch_size):
        options = PerfOptions(
            model=model,
            transport="in-process",
            batch_size=batch,
            concurrency=Range(concurrency, concurrency, 1),
            measurement_interval_ms=settings.measurement_interval_ms,
            stability_percentage=settings.stability_percentage,
            max_trials=settings.max_trials,
            input_data=(str(sample),),
            quiet=True,
        )
        transport = InProcessTransport(engine, model)
        try:
            result = await run_perf(options, transport, in_process=True)
        finally:
            await transport.close()
        point = result.points[0]
        points.append(
            SpeedPoint(
                batch_size=batch,
                concurrency=concurrency,
                throughput=point.throughput,
                p50_ms=point.percentiles_us.get(50, point.avg_latency_us) / 1000.0,
                p99_ms=point.percentiles_us.get(99, point.avg_latency_us) / 1000.0,
                stable=point.stable,
            )
        )
    return points
