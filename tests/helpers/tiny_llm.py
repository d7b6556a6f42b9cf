"""The example language model ``tiny_llm`` for tests: built once per test session into the pytest
cache (``.pytest_cache/d/tiny_llm``, or a temporary folder when the cache plugin is off) and
reused while its marker (seed, recipe, corpus hash) still matches, so a rerun does not train it
again."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from inferd.examples.tiny_llm import LLM_MODEL_NAMES, build_tiny_llm, tiny_llm_is_built

MODEL = LLM_MODEL_NAMES[0]


def build_tiny_llm_repo(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model repository holding only ``tiny_llm``; skips without torch and transformers."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    store = getattr(config, "cache", None)  # absent under -p no:cacheprovider
    cache = store.mkdir("tiny_llm") if store is not None else tmp_path_factory.mktemp("tiny_llm")
    root = cache / "models"
    target = root / MODEL
    from tests.helpers.tiny_llama import warm_paged_attention

    warm_paged_attention()  # servers started on this repository load the kernel built here
    if tiny_llm_is_built(target):
        return root
    root.mkdir(parents=True, exist_ok=True)
    # staged in a folder of its own, so two sessions building at once never share files
    with tempfile.TemporaryDirectory(prefix=".staging-", dir=cache) as scratch:
        staged = Path(scratch) / MODEL
        build_tiny_llm(MODEL, staged)
        if not tiny_llm_is_built(target):  # another session may have finished first
            shutil.rmtree(target, ignore_errors=True)
            staged.rename(target)
    return root
