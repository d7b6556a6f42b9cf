"""The drift monitor: an observer of answered requests with a worker thread of its own.

On the event loop, :meth:`DriftMonitor.observe` copies the tensors a version's profile names
and appends them to a bounded queue (a full queue drops the request and counts it; nothing
waits). The worker drains the queue every few tens of milliseconds: it loads a version's
profile the first time it sees the version (or a reload of it), feeds the windows, runs the
tests every ``evaluate_every_rows`` rows and publishes an immutable snapshot, which the metrics
and the report read on the loop.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from inferd.core.drift import DriftSettings, MonitorStatistics
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import InferdError
from inferd.monitoring.drift.evaluate import Evaluator, Published
from inferd.monitoring.drift.reference import PROFILE_FILE, Profile, read_profile
from inferd.monitoring.drift.window import VersionWindow

__all__ = ["DriftMonitor", "profile_path"]

Array = np.ndarray[Any, Any]
_log = logging.getLogger("inferd.drift")

#: how often the worker drains the queue (the loop never signals it: appending is all it does)
DRAIN_INTERVAL_S = 0.05


class _Item(NamedTuple):  # a tuple: the cheapest thing to make on the event loop
    spec: ModelSpec
    version: int
    tensors: dict[str, Array]
    rows: int


@dataclass
class _Entry:
    """One version as the monitor knows it; ``window`` is None when it has no profile."""

    spec: ModelSpec
    names: frozenset[str] | None = None  # the tensors the profile watches
    window: VersionWindow | None = None
    evaluator: Evaluator | None = None
    published: Published | None = None
    pending: list[_Item] = field(default_factory=list)
    pending_rows: int = 0
    replaced: ModelSpec | None = None  # the load this entry replaced: its late requests are skipped


def profile_path(root: Path, model: str, version: int) -> Path | None:
    """``root/model/version/drift_profile.json``, when it exists inside ``root``."""
    base = root.resolve()
    path = (base / model / str(version) / PROFILE_FILE).resolve()
    if not path.is_relative_to(base) or not path.is_file():
        return None
    return path


class DriftMonitor:
    """Implements :class:`inferd.core.observe.InferenceObserver`; ``start``, then ``stop``."""

    def __init__(
        self,
        settings: DriftSettings,
        roots: Sequence[Path],
        *,
        serving: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.settings = settings
        self._roots = tuple(roots)
        self._serving = serving
        self._queue: collections.deque[_Item] = collections.deque()
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._dropped = 0  # changed on the loop only
        self._failures = 0  # changed by the worker only
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the event loop ----------------------------------------------------------------------

    def observe(
        self,
        spec: ModelSpec,
        version: int,
        request: InferRequest,
        outputs: Mapping[str, Array],
    ) -> None:
        entry = self._entries.get((spec.name, version))
        names = None
        if entry is not None and entry.spec is spec:
            names = entry.names
            if names is None:
                return  # this version has no profile
        if len(self._queue) >= self.settings.queue_size:
            self._dropped += 1
            return
        batched = spec.max_batch_size > 0
        tensors: dict[str, Array] = {}
        for source in (request.inputs, outputs):
            for name, array in source.items():
                if names is None or name in names:
                    # a copy: the buffer may be a client's shared-memory region
                    tensors[name] = array.copy() if batched else array.copy()[None]
        rows = len(next(iter(tensors.values()))) if tensors else 1
        self._queue.append(_Item(spec, version, tensors, rows))

    def statistics(self) -> MonitorStatistics:
        versions = tuple(
            entry.published.build()
            for (name, version), entry in list(self._entries.items())
            if entry.published is not None
            and (self._serving is None or self._serving(name, version))
        )
        return MonitorStatistics(len(self._queue), self._dropped, self._failures, versions)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="inferd-drift", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Observe what is queued, then end the worker (blocking: call it off the loop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # -- the worker thread -------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(DRAIN_INTERVAL_S):
            self.drain()
        self.drain()

    def drain(self) -> None:
        """Process every queued request (the worker's loop; tests may call it directly)."""
        touched: dict[int, _Entry] = {}
        while self._queue:
            item = self._queue.popleft()
            try:
                entry = self._entry(item.spec, item.version)
                if entry.window is None or entry.spec is not item.spec:
                    continue
                entry.pending.append(item)
                entry.pending_rows += item.rows
                touched[id(entry)] = entry
                if entry.window.since_evaluation + entry.pending_rows >= (
                    self.settings.evaluate_every_rows
                ):
                    self._flush(entry, evaluate=True)
            except Exception:
                self._failures += 1
                _log.exception("drift monitoring failed on a request to '%s'", item.spec.name)
        for entry in touched.values():
            try:
                self._flush(entry, evaluate=False)
            except Exception:
                self._failures += 1
                _log.exception("drift monitoring failed on '%s'", entry.spec.name)

    def _flush(self, entry: _Entry, *, evaluate: bool) -> None:
        window, evaluator = entry.window, entry.evaluator
        assert window is not None
        assert evaluator is not None
        items, rows, entry.pending, entry.pending_rows = entry.pending, entry.pending_rows, [], 0
        if items:
            window.add([item.tensors for item in items], rows)
        if evaluate:
            evaluator.evaluate(window)
        entry.published = evaluator.publish(window, entry.spec.name, _version(items, entry))

    def _entry(self, spec: ModelSpec, version: int) -> _Entry:
        key = (spec.name, version)
        entry = self._entries.get(key)
        if entry is not None and (entry.spec is spec or entry.replaced is spec):
            return entry  # a request the replaced load answered before the reload is skipped
        entry = _Entry(spec, replaced=entry.spec if entry is not None else None)
        profile = self._load_profile(spec, version)
        if profile is not None:
            window = VersionWindow(
                profile, self.settings.window_rows, self.settings.multivariate_rows
            )
            entry.window = window
            entry.evaluator = Evaluator(window, self.settings)
            entry.names = frozenset(window.tensors)
            entry.published = entry.evaluator.publish(window, spec.name, version)
            _log.info(
                "drift monitoring of '%s' version %d: %d feature(s), %d window bytes",
                spec.name,
                version,
                len(entry.published.results),
                window.nbytes,
            )
        self._entries[key] = entry
        return entry

    def _load_profile(self, spec: ModelSpec, version: int) -> Profile | None:
        for root in self._roots:
            path = profile_path(root, spec.name, version)
            if path is None:
                continue
            try:
                profile = read_profile(path)
                _check_profile(profile, spec)
            except InferdError as exc:
                _log.warning("drift monitoring of '%s' is off: %s", spec.name, exc)
                return None
            return profile
        _log.info(
            "no drift profile for '%s' version %d (write one with `inferd monitor profile`)",
            spec.name,
            version,
        )
        return None


def _version(items: list[_Item], entry: _Entry) -> int:
    return items[0].version if items else (entry.published.version if entry.published else 0)


def _check_profile(profile: Profile, spec: ModelSpec) -> None:
    from inferd.errors import InvalidArgumentError

    known = {t.name: "input" for t in spec.inputs} | {t.name: "output" for t in spec.outputs}
    for tensor in profile.tensors:
        if known.get(tensor.name) != tensor.role:
            raise InvalidArgumentError(
                f"its drift profile names {tensor.role} '{tensor.name}', which the model does "
                "not have; build the profile again with `inferd monitor profile`"
            )
