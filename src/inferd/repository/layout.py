"""Repository layout: which model directories exist and which version directories they hold."""

from __future__ import annotations

from pathlib import Path


def is_version_dirname(name: str) -> bool:
    """Triton's rule: a version directory name is all digits and does not start with "0"."""
    return name.isascii() and name.isdigit() and not name.startswith("0")


def list_versions(model_dir: Path) -> list[int]:
    """The model's version numbers, ascending; other entries are ignored."""
    try:
        entries = list(model_dir.iterdir())
    except OSError:
        return []
    return sorted(int(e.name) for e in entries if e.is_dir() and is_version_dirname(e.name))


def find_models(roots: list[Path]) -> dict[str, list[Path]]:
    """Every model directory per model name across the repository roots.

    A name with more than one path appears in several roots; Triton then marks the model
    UNAVAILABLE ("model appears in two or more repositories"), which is the manager's job.
    Hidden entries (names starting with ".") are skipped. A missing root is skipped here; the
    server checks roots when it starts.
    """
    found: dict[str, list[Path]] = {}
    for root in roots:
        try:
            entries = sorted(root.iterdir(), key=lambda p: p.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            found.setdefault(entry.name, []).append(entry)
    return found


def duplicated(models: dict[str, list[Path]]) -> dict[str, list[Path]]:
    """The subset of :func:`find_models`' result whose names appear in two or more roots."""
    return {name: paths for name, paths in models.items() if len(paths) > 1}
