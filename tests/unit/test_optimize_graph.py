"""Graph candidates: ONNX Runtime's offline optimizations and the transformer fusions, each
served by inferd's onnxruntime backend and compared with its source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from opt_graph_models import (
    BERT_HEADS,
    BERT_HIDDEN,
    BERT_LAYERS,
    attention_block,
    bert_inputs,
    conv_net,
    mlp,
    rng,
    save,
    serve,
    tiny_bert,
)

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import CandidateSkipped
from inferd.tools.optimize.encoder import find_encoder
from inferd.tools.optimize.graph import ORT_LEVELS, build_ort_optimized, build_transformer_fused
from inferd.tools.optimize.verify import onnx_session, run_onnx

Array = np.ndarray[Any, Any]


def _reference(path: Path, feeds: dict[str, Array]) -> dict[str, Array]:
    return run_onnx(onnx_session(path), feeds)


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return tiny_bert(tmp_path_factory.mktemp("bert") / "bert.onnx")


@pytest.mark.parametrize("level", ORT_LEVELS)
def test_each_level_serves_and_answers_like_the_source(tmp_path: Path, level: str) -> None:
    source = save(mlp(), tmp_path / "mlp.onnx")
    x = rng("x").standard_normal((6, 32)).astype(np.float32)
    candidate = build_ort_optimized(source, tmp_path / "out", sample={"x": x}, level=level)
    assert candidate.name == f"graph-{level}"
    assert candidate.kind == "graph"
    assert candidate.path == tmp_path / "out" / f"graph-{level}" / "model.onnx"
    served = serve(candidate, tmp_path, {"x": x})
    np.testing.assert_allclose(served["probs"], _reference(source, {"x": x})["probs"], atol=1e-5)
    assert any("load time" in note for note in candidate.notes)


def test_the_all_level_leaves_out_the_cpu_specific_layout(tmp_path: Path) -> None:
    source = save(conv_net(), tmp_path / "cnn.onnx")
    image = rng("image").uniform(0, 16, (4, 1, 8, 8)).astype(np.float32)
    candidate = build_ort_optimized(source, tmp_path / "out", sample={"image": image})
    saved = onnx.load(str(candidate.path))
    domains = {node.domain for node in saved.graph.node}
    assert "com.microsoft.nchwc" not in domains
    assert candidate.recipe["disabled_optimizers"] == ["NchwcTransformer"]
    # the convolutions were still fused (Conv + Relu): ONNX Runtime's own operator
    assert "FusedConv" in {node.op_type for node in saved.graph.node}
    assert any("ONNX Runtime only" in note for note in candidate.notes)
    served = serve(candidate, tmp_path, {"image": image})
    want = _reference(source, {"image": image})["scores"]
    np.testing.assert_allclose(served["scores"], want, rtol=1e-4, atol=1e-4)


def test_an_unknown_level_is_refused(tmp_path: Path) -> None:
    source = save(mlp(), tmp_path / "mlp.onnx")
    with pytest.raises(InvalidArgumentError, match="use one of basic, extended, all"):
        build_ort_optimized(source, tmp_path, sample={"x": np.ones((1, 32))}, level="max")


def test_encoder_shape_is_read_from_exported_bert(bert: Path) -> None:
    shape = find_encoder(onnx.load(str(bert)))
    assert shape is not None
    assert (shape.attention_blocks, shape.num_heads, shape.hidden_size) == (
        BERT_LAYERS,
        BERT_HEADS,
        BERT_HIDDEN,
    )


@pytest.mark.parametrize("split", [-1, 2])
def test_encoder_shape_of_a_hand_built_attention_block(split: int) -> None:
    shape = find_encoder(attention_block(heads=2, head_size=4, split=split))
    assert shape is not None
    assert (shape.attention_blocks, shape.num_heads, shape.hidden_size) == (1, 2, 8)


def test_graphs_without_attention_are_not_encoders() -> None:
    assert find_encoder(mlp()) is None  # a Softmax, but after a MatMul with a weight
    assert find_encoder(conv_net()) is None


def test_transformer_fusions_fuse_every_attention_block(bert: Path, tmp_path: Path) -> None:
    sample = bert_inputs(8)
    candidate = build_transformer_fused(bert, tmp_path / "out", sample=sample)
    assert candidate.kind == "transformer"
    fused = candidate.recipe["fused"]
    assert isinstance(fused, dict)
    assert fused["Attention"] == BERT_LAYERS
    assert (candidate.recipe["num_heads"], candidate.recipe["hidden_size"]) == (4, 32)
    ops = {node.op_type for node in onnx.load(str(candidate.path)).graph.node}
    assert {"Attention", "SkipLayerNormalization"} <= ops
    assert "Softmax" not in ops
    served = serve(candidate, tmp_path, sample)
    want = _reference(bert, sample)["last_hidden_state"]
    np.testing.assert_allclose(served["last_hidden_state"], want, atol=1e-4)


def test_transformer_fusions_skip_models_that_are_not_encoders(tmp_path: Path) -> None:
    source = save(conv_net(), tmp_path / "cnn.onnx")
    image = np.zeros((1, 1, 8, 8), np.float32)
    with pytest.raises(CandidateSkipped, match="not a transformer encoder"):
        build_transformer_fused(source, tmp_path / "out", sample={"image": image})


def test_attention_left_unfused_is_reported(bert: Path, tmp_path: Path) -> None:
    # told a head count that does not fit its reshapes, the optimizer fuses no attention
    sample = bert_inputs(4)
    candidate = build_transformer_fused(bert, tmp_path / "out", sample=sample, num_heads=2)
    fused = candidate.recipe["fused"]
    assert isinstance(fused, dict)
    assert "Attention" not in fused
    assert any(f"Only 0 of {BERT_LAYERS} attention blocks" in note for note in candidate.notes)
    want = _reference(bert, sample)["last_hidden_state"]
    got = _reference(candidate.path, sample)["last_hidden_state"]
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_a_head_count_that_does_not_divide_the_hidden_size_is_refused(
    bert: Path, tmp_path: Path
) -> None:
    with pytest.raises(InvalidArgumentError, match="32 cannot be split into 3 attention heads"):
        build_transformer_fused(bert, tmp_path / "out", sample=bert_inputs(2), num_heads=3)
