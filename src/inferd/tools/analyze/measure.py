"""Measuring one loaded configuration at every load point, through ``inferd perf``'s API.

Each load point is one :func:`~inferd.tools.perf.run_perf` run at one concurrency (perf_analyzer's
windows and stability rule), over a transport made fresh for it, so nothing of the previous
configuration's connections carries over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from inferd.tools.analyze.objective import PointFigures
from inferd.tools.perf import LoadPoint, PerfOptions, Range, run_perf
from inferd.tools.perf.driver import NoProgress, Progress
from inferd.tools.perf.transport import Transport

__all__ = ["MeasureSettings", "figures_of", "measure_points"]


@dataclass(frozen=True)
class MeasureSettings:
    """How every configuration is measured (stored with the results: resuming needs the same)."""

    transport: str  # "http-binary" | "grpc" | "in-process"
    url: str
    concurrency: tuple[int, ...]
    measurement_interval_ms: int = 2000
    stability_percentage: float = 10.0
    max_trials: int = 10
    input_data: tuple[str, ...] = ("random",)
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """What makes figures comparable (the URL is left out: a server's port may change)."""
        return {
            "transport": self.transport,
            "concurrency": list(self.concurrency),
            "measurement_interval_ms": self.measurement_interval_ms,
            "stability_percentage": self.stability_percentage,
            "max_trials": self.max_trials,
            "input_data": list(self.input_data),
            "shapes": [[name, list(dims)] for name, dims in self.shapes],
            "batch_size": 1,
        }

    def options(self, model: str, concurrency: int) -> PerfOptions:
        return PerfOptions(
            model=model,
            transport=self.transport,
            url=self.url,
            concurrency=Range(concurrency, concurrency, 1),
            measurement_interval_ms=self.measurement_interval_ms,
            stability_percentage=self.stability_percentage,
            max_trials=self.max_trials,
            input_data=self.input_data,
            shapes=self.shapes,
            quiet=True,
        )


def figures_of(point: LoadPoint) -> PointFigures:
    """A perf load point as the analyzer keeps it."""
    latency = {"avg": point.avg_latency_us}
    latency.update({f"p{p}": float(v) for p, v in point.percentiles_us.items()})
    return PointFigures(
        concurrency=int(point.level),
        throughput=point.throughput,
        latency_us=latency,
        stable=point.stable,
        errors=point.error_count,
    )


async def measure_points(
    settings: MeasureSettings,
    model: str,
    make_transport: Callable[[], Transport],
    *,
    progress: Progress | None = None,
    in_process: bool = False,
) -> tuple[PointFigures, ...]:
    """Every load point of ``settings`` for the model as currently loaded.

    Raises what :func:`run_perf` raises (``PerfRunError`` when nothing was answered).
    """
    found: list[PointFigures] = []
    for concurrency in _ascending(settings.concurrency):
        transport = make_transport()
        try:
            result = await run_perf(
                settings.options(model, concurrency),
                transport,
                progress=progress or NoProgress(),
                in_process=in_process,
            )
        finally:
            await transport.close()
        found.extend(figures_of(point) for point in result.points)
    return tuple(found)


def _ascending(values: Sequence[int]) -> list[int]:
    return sorted(set(values))
