from __future__ import annotations

from pathlib import Path

import pytest

from inferd.examples.build import build_examples


@pytest.fixture(scope="session")
def example_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example repository, rebuilt once per test session with the project's own builder."""
    out = tmp_path_factory.mktemp("examples") / "models"
    build_examples(out, force=True, progress=False)
    return out
