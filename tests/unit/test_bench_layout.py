"""No benchmark script may shadow a standard-library module.

Every script under bench/ runs with its own folder first on sys.path (``python bench/x.py``;
the MLServer runtimes get bench/servers on PYTHONPATH), so a file ``bench/profile.py`` replaces
the standard ``profile`` module for everything that script imports: torch imports ``cProfile``,
which imports ``profile``, and the MiniLM export broke. Any folder under bench/ can be such a
sys.path entry, so every module and folder name at any depth is checked.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
SKIPPED = {"__pycache__", "results"}  # caches and measured figures hold no importable code


def importable_names(root: Path) -> dict[str, Path]:
    """Top-level names each folder under ``root`` makes importable when it is on sys.path."""
    names: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root):
        # bench/.work holds built models and virtualenvs, not bench code: do not descend
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED)
        for name in dirs:
            names[name] = Path(folder, name)
        for name in files:
            if Path(name).suffix in {".py", ".pyc", ".so", ".pyd"} and not name.startswith("."):
                names[name.split(".", 1)[0]] = Path(folder, name)
    return names


def test_bench_has_scripts() -> None:
    names = importable_names(BENCH)
    assert "run" in names
    assert "models" in names


def test_no_bench_name_shadows_the_standard_library() -> None:
    clashes = {
        name: str(path.relative_to(BENCH.parent))
        for name, path in importable_names(BENCH).items()
        if name in sys.stdlib_module_names
    }
    assert not clashes, f"these bench/ names shadow standard-library modules: {clashes}"


def test_the_check_sees_a_clash(tmp_path: Path) -> None:
    (tmp_path / "servers").mkdir()
    (tmp_path / "servers" / "profile.py").write_text("")
    (tmp_path / "ok.py").write_text("")
    names = importable_names(tmp_path)
    assert set(names) == {"servers", "profile", "ok"}
    assert {n for n in names if n in sys.stdlib_module_names} == {"profile"}
