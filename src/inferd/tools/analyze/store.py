"""The results directory: one JSON line per measured configuration, written as each one finishes,
so a run stopped part way (Ctrl-C) resumes where it stopped.

``DIR/measurements.jsonl`` holds the lines; ``DIR/settings.json`` the measurement settings the
lines were taken with (load points, window, protocol). A rerun with other settings would mix
figures that do not compare, so it is refused with a message naming what differs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.objective import Measurement

__all__ = ["MEASUREMENTS_FILE", "SETTINGS_FILE", "ResultStore"]

MEASUREMENTS_FILE = "measurements.jsonl"
SETTINGS_FILE = "settings.json"


class ResultStore:
    """Measurements of earlier runs in ``directory`` plus the ones this run appends."""

    def __init__(self, directory: Path, settings: dict[str, Any]) -> None:
        self.directory = directory
        self.settings = settings
        self.skipped_lines = 0  # lines cut short by an interrupted write
        directory.mkdir(parents=True, exist_ok=True)
        settings_path = directory / SETTINGS_FILE
        if settings_path.is_file():
            try:
                before = json.loads(settings_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                before = None
            if isinstance(before, dict) and before != settings:
                differ = sorted(
                    key
                    for key in set(before) | set(settings)
                    if before.get(key) != settings.get(key)
                )
                raise InvalidArgumentError(
                    f"{directory} holds results measured with other settings "
                    f"({', '.join(differ)}); pass the same settings to resume, or use another "
                    "--results directory"
                )
        settings_path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        self._path = directory / MEASUREMENTS_FILE
        self._cut_short = False  # the file ends in a partial line: start on a new one
        self._measurements = self._read()

    def _read(self) -> list[Measurement]:
        if not self._path.is_file():
            return []
        text = self._path.read_text(encoding="utf-8")
        self._cut_short = bool(text) and not text.endswith("\n")
        found: list[Measurement] = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                found.append(Measurement.from_dict(json.loads(line)))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                self.skipped_lines += 1
        return found

    def measurements(self, model: str | None = None) -> list[Measurement]:
        """Every measurement kept (the last one per model, key and round), in the order taken."""
        latest: dict[tuple[str, str, int], Measurement] = {}
        for m in self._measurements:
            if model is None or m.model == model:
                latest.pop((m.model, m.key, m.repeat), None)
                latest[(m.model, m.key, m.repeat)] = m
        return list(latest.values())

    def get(self, model: str, key: str, repeat: int = 0) -> Measurement | None:
        for m in reversed(self._measurements):
            if m.model == model and m.key == key and m.repeat == repeat:
                return m
        return None

    def append(self, measurement: Measurement) -> None:
        """Write one line and make it durable before returning."""
        line = json.dumps(measurement.to_dict(), sort_keys=True)
        with self._path.open("a", encoding="utf-8") as out:
            out.write(("\n" if self._cut_short else "") + line + "\n")
            self._cut_short = False
            out.flush()
            os.fsync(out.fileno())
        self._measurements.append(measurement)
