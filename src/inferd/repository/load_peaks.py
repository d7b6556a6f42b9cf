"""The transient peaks of on-demand loads: measured when a load runs alone, estimated otherwise.

A load holds more for a while than it keeps (the files it reads, the session it builds, the
buffers of its warm-up). The on-demand loader reserves that peak before the load starts, so
that the budget holds at its top. A peak is read from the process's peak resident set
(:class:`~inferd.repository.memory.PeakMeter`), and it is the load's own only if nothing else
moved the resident set meanwhile: no other load began, and no unload or allocator trim gave
memory back (those are *spoiled*). A model whose own peak is unknown is estimated from a copy
of it, else from its runtime's recent loads
(:func:`~inferd.repository.on_demand_state.transient_estimate`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from inferd.repository.memory import PeakMeter
from inferd.repository.on_demand_state import RATIO_SAMPLES, ModelRecord, transient_estimate

__all__ = ["LoadPeaks"]


class LoadPeaks:
    """``meter``: None where no peak can be read (every transient is then unknown: 0)."""

    def __init__(self, meter: PeakMeter | None) -> None:
        self._meter = meter
        self._alone: dict[str, bool] = {}  # loads running: whether nothing else overlapped
        # per runtime, the last transient / size ratios measured: their median estimates a
        # model whose own transient is unknown and that has no measured copy
        self._ratios: dict[str, list[float]] = {}

    @property
    def measurable(self) -> bool:
        """Whether a load that runs alone can have its peak read here."""
        return self._meter is not None

    def begin(self, name: str) -> None:
        """A load starts: the peak is reset when no other load runs (and read at its end
        only if nothing overlapped it)."""
        if self._meter is None:
            return
        alone = not self._alone
        if alone and not self._meter.reset():
            self._meter = None  # the peak cannot be reset here: every transient stays unknown
        self.spoil()
        self._alone[name] = alone

    def spoil(self) -> None:
        """The peaks of the loads under way are not theirs alone: another load began, or an
        unload or a trim gave memory back meanwhile."""
        for other in self._alone:
            self._alone[other] = False

    def end(self, name: str) -> int | None:
        """A load ended: how far the resident set rose above its start, if it ran alone."""
        if self._alone.pop(name, False) and self._meter is not None:
            return self._meter.rise()
        return None

    def record(self, model: ModelRecord, runtime: str, rise: int | None) -> None:
        """Keep what a load that ran alone held beyond its (now updated) size."""
        if rise is None:
            return
        above = max(0, rise - model.size_bytes)
        model.transient_bytes = above
        ratios = self._ratios.setdefault(runtime, [])
        ratios[:] = [*ratios, above / max(1, model.size_bytes)][-RATIO_SAMPLES:]

    def estimate(self, model: ModelRecord, size: int, records: Iterable[ModelRecord]) -> int:
        ratios = {k: statistics.median(v) for k, v in self._ratios.items()}
        return transient_estimate(model, size, ratios, records)
