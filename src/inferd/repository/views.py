"""Read-only views of the repository manager's state: the repository index and the statistics
of READY versions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from inferd.core.lifecycle import ModelState
from inferd.core.metadata import IndexEntry
from inferd.core.statistics import StatsSnapshot
from inferd.errors import InvalidArgumentError
from inferd.repository.manager_types import ServingModel
from inferd.repository.records import MODEL_LEVEL, ModelRecord

__all__ = ["Ready", "index_entries", "ready_statistics"]

#: name -> (versions -> serving, latest ready version): the manager's hot-path view
Ready = Mapping[str, tuple[Mapping[int, ServingModel], ServingModel]]


def index_entries(
    names: Iterable[str], records: Mapping[str, ModelRecord], ready_only: bool
) -> list[IndexEntry]:
    """The index entries of ``names``: one per version with its state (a model never loaded:
    one entry without a version, left out when ``ready_only``)."""
    entries: list[IndexEntry] = []
    for name in names:
        record = records.get(name)
        if record is None or not record.status:
            if not ready_only:
                entries.append(IndexEntry(name=name))
            continue
        for version in sorted(record.status):
            status = record.status[version]
            if ready_only and status.state is not ModelState.READY:
                continue
            shown = None if version == MODEL_LEVEL else str(version)
            entries.append(IndexEntry(name, shown, status.state.value, status.reason))
    return entries


def ready_statistics(ready: Ready, name: str, version: int | None) -> list[StatsSnapshot]:
    """Snapshots of READY versions: every model ("" name), one model, or one version."""
    if not name:
        return [
            s.stats.snapshot()
            for _, (versions, _) in sorted(ready.items())
            for _, s in sorted(versions.items())
        ]
    entry = ready.get(name)
    if entry is None:
        raise InvalidArgumentError(f"requested model '{name}' is not available")
    if version is None:
        return [s.stats.snapshot() for _, s in sorted(entry[0].items())]
    serving = entry[0].get(version)
    if serving is None:
        raise InvalidArgumentError(f"requested model version is not available for model '{name}'")
    return [serving.stats.snapshot()]
