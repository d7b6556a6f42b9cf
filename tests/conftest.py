from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferd.examples.build import build_examples


@pytest.fixture(scope="session")
def example_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example repository, rebuilt once per test session with the project's own builder."""
    out = tmp_path_factory.mktemp("examples") / "models"
    build_examples(out, force=True, progress=False)
    return out


@pytest.fixture(scope="session")
def embedding_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository holding the example embedding model ``minilm_embeddings``, built once per
    session (tests/helpers/embeddings.py)."""
    from tests.helpers.embeddings import build_embedding_repo

    return build_embedding_repo(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_llm_repo(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository holding the example language model ``tiny_llm``, built once and cached in
    pytest's cache (tests/helpers/tiny_llm.py)."""
    from tests.helpers.tiny_llm import build_tiny_llm_repo

    return build_tiny_llm_repo(pytestconfig, tmp_path_factory)


@pytest.fixture(autouse=True)
def _fresh_module_generators(request: pytest.FixtureRequest) -> None:
    """A test module's random generators (``RNG = np.random.default_rng(seed)`` at module level)
    start from their seed again for every test, so the data a test draws does not depend on which
    tests ran before it, or whether it runs alone."""
    module = getattr(request, "module", None)
    if module is None:
        return
    for name, value in list(vars(module).items()):
        if isinstance(value, np.random.Generator):
            seed = value.bit_generator.seed_seq.entropy  # type: ignore[attr-defined]
            setattr(module, name, np.random.default_rng(seed))
