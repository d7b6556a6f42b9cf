"""``inferd serve``'s drift monitoring flags, and the settings they make."""

from __future__ import annotations

import argparse
import dataclasses

from inferd.cli.flag_values import parse_bool
from inferd.core.drift import DriftSettings
from inferd.errors import InferdError

__all__ = ["add_drift_flags", "drift_settings"]

_DEFAULTS = DriftSettings()

# flag dest -> DriftSettings field, the flag, its type, metavar, help
_OPTIONS: tuple[tuple[str, str, str, type, str, str], ...] = (
    (
        "drift_window_rows",
        "window_rows",
        "--drift-window-rows",
        int,
        "N",
        "the sliding window: the last N rows observed per version",
    ),
    (
        "drift_evaluate_every_rows",
        "evaluate_every_rows",
        "--drift-evaluate-every-rows",
        int,
        "N",
        "run the tests again after N new rows",
    ),
    (
        "drift_alpha",
        "alpha",
        "--drift-alpha",
        float,
        "P",
        "family-wise level of the KS and chi-square tests, split over a version's features "
        "(Bonferroni)",
    ),
    (
        "drift_psi_threshold",
        "psi_threshold",
        "--drift-psi-threshold",
        float,
        "X",
        "PSI above this is drift",
    ),
    (
        "drift_raise_after",
        "raise_after",
        "--drift-raise-after",
        int,
        "N",
        "drifting evaluations in a row before a feature's alert is raised",
    ),
    (
        "drift_clear_after",
        "clear_after",
        "--drift-clear-after",
        int,
        "N",
        "calm evaluations in a row before it clears",
    ),
    (
        "drift_queue_size",
        "queue_size",
        "--drift-queue-size",
        int,
        "N",
        "answered requests that may wait for the monitor's thread; beyond, they are skipped "
        "and counted (inferd_drift_dropped_requests_total)",
    ),
)


def add_drift_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "drift monitoring (see docs/monitoring.md)",
        "Compare live inputs and predictions of every version that has a drift_profile.json "
        "(written by `inferd monitor profile`) with that profile, on a thread of its own; "
        "metrics inferd_drift_* and inferd_data_quality_*, report at "
        "GET /v2/models/NAME/drift.",
    )
    group.add_argument(
        "--monitor-drift",
        type=parse_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="turn drift and data-quality monitoring on (default: false)",
    )
    for dest, field, flag, kind, metavar, text in _OPTIONS:
        group.add_argument(
            flag,
            dest=dest,
            type=kind,
            default=None,
            metavar=metavar,
            help=f"{text} (default: {getattr(_DEFAULTS, field)})",
        )


def drift_settings(args: argparse.Namespace) -> DriftSettings | None:
    """The monitor's settings, None when ``--monitor-drift`` is off (then every other
    ``--drift-*`` flag is refused: it would do nothing)."""
    values = {
        "window_rows": args.drift_window_rows,
        "evaluate_every_rows": args.drift_evaluate_every_rows,
        "alpha": args.drift_alpha,
        "psi_threshold": args.drift_psi_threshold,
        "raise_after": args.drift_raise_after,
        "clear_after": args.drift_clear_after,
        "queue_size": args.drift_queue_size,
    }
    given = {field: value for field, value in values.items() if value is not None}
    if not args.monitor_drift:
        if given:
            flag = next(f for _, field, f, *_ in _OPTIONS if field in given)
            raise InferdError(f"{flag} needs --monitor-drift")
        return None
    return dataclasses.replace(_DEFAULTS, **given)
