"""The drift report served at ``GET /v2/models/{name}[/versions/{v}]/drift`` (pure)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from inferd.core.drift import DriftSettings, MonitorStatistics, VersionDrift
from inferd.errors import NotFoundError

__all__ = ["drift_report"]


def drift_report(
    stats: MonitorStatistics, settings: DriftSettings, model: str, version: str = ""
) -> dict[str, Any]:
    """Every monitored version of ``model`` (or only ``version``) as JSON-ready data."""
    versions = [
        v for v in stats.versions if v.model == model and (not version or str(v.version) == version)
    ]
    if not versions:
        which = f"'{model}' version {version}" if version else f"'{model}'"
        raise NotFoundError(
            f"no drift monitoring for model {which}: it is not serving, or its version folder "
            "has no drift_profile.json (see `inferd monitor profile`)"
        )
    return {
        "model": model,
        "versions": [_version(v, settings) for v in sorted(versions, key=lambda v: v.version)],
        "settings": asdict(settings),
        "queue": {"queued": stats.queued, "dropped": stats.dropped, "failed": stats.failures},
    }


def _version(v: VersionDrift, settings: DriftSettings) -> dict[str, Any]:
    return {
        "version": str(v.version),
        "profile_rows": v.profile_rows,
        "rows": v.rows,
        "requests": v.requests,
        "window_rows": v.window_rows,
        "evaluations": v.evaluations,
        "tests": v.tests,
        "ks_level": settings.alpha / max(1, v.tests),
        "alerts": [f.feature for f in v.features if f.alert],
        "missing": dict(v.missing),
        "features": [
            {key: value for key, value in asdict(f).items() if value is not None}
            for f in v.features
        ],
    }
