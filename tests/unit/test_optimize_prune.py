"""Pruning candidates: the 2:4 pattern exactly on every pruned weight, channel pruning that
shrinks the network and keeps its ONNX interface, and fine-tuning that lowers the loss."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")
pytest.importorskip("torch_pruning")

from inferd.errors import InvalidArgumentError  # noqa: E402
from inferd.tools.optimize.candidate import CandidateSkipped  # noqa: E402
from inferd.tools.optimize.data import Dataset  # noqa: E402
from inferd.tools.optimize.finetune import FineTuning  # noqa: E402
from inferd.tools.optimize.prune import (  # noqa: E402
    CPU_SPARSITY_NOTE,
    is_2of4,
    prune_2of4,
    prune_channels,
    sparse_weights,
)

RNG = np.random.default_rng(3)
QUICK = FineTuning(epochs=3, max_steps=60, batch_size=64)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Layers this small train fastest on one thread; the setting is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    return images.astype(np.float32), labels.astype(np.int64)


def _export(module: torch.nn.Module, example: torch.Tensor, path: Path) -> Path:
    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (example,),
            str(path),
            input_names=["images"],
            output_names=["probabilities"],
            dynamic_axes={"images": {0: "N"}, "probabilities": {0: "N"}},
            opset_version=17,
            dynamo=False,
        )
    return path


class _Cnn(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.classify = nn.Linear(16 * 4 * 4, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.classify(self.features(images / 16.0)), dim=1)


def _mlp() -> torch.nn.Module:
    nn = torch.nn
    return nn.Sequential(
        nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 10)
    )


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return _export(_Cnn(), torch.rand(2, 1, 8, 8) * 16, tmp_path_factory.mktemp("cnn") / "m.onnx")


@pytest.fixture(scope="module")
def mlp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(1)
    return _export(_mlp(), torch.rand(2, 64), tmp_path_factory.mktemp("mlp") / "m.onnx")


def _weights(path: Path) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def _mixed_graph(path: Path) -> Path:
    """A weight of every layout 2:4 knows, and two it must leave alone."""

    def init(name: str, *shape: int) -> onnx.TensorProto:  # no zeros: every zero is pruning's
        values = RNG.uniform(0.1, 1.0, shape) * RNG.choice([-1.0, 1.0], shape)
        return numpy_helper.from_array(values.astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "c_first"], ["c1"], pads=[1, 1, 1, 1]),  # C=1: left
        helper.make_node("Conv", ["c1", "c_mid"], ["c2"], pads=[1, 1, 1, 1]),  # C=8
        helper.make_node("Flatten", ["c2"], ["f"]),
        helper.make_node("Gemm", ["f", "g_nk"], ["h1"], transB=1),  # [N, K]
        helper.make_node("Gemm", ["h1", "g_kn"], ["h2"]),  # [K, N]
        helper.make_node("MatMul", ["h2", "m_kn"], ["h3"]),  # [K, N]
        helper.make_node("MatMul", ["h3", "m_odd"], ["y"]),  # K=6: left
    ]
    inits = [
        init("c_first", 8, 1, 3, 3),
        init("c_mid", 4, 8, 3, 3),
        init("g_nk", 12, 64),
        init("g_kn", 12, 8),
        init("m_kn", 8, 6),
        init("m_odd", 6, 3),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def _groups(name: str, weight: np.ndarray) -> np.ndarray:
    """[groups, 4]: runs of 4 weights along each weight's reduction dimension."""
    if weight.ndim == 4:  # Conv [M, C, kh, kw]: along C
        rows = np.moveaxis(weight, 1, -1).reshape(-1, weight.shape[1])
    elif name == "g_nk":  # Gemm with transB: [N, K]
        rows = weight
    else:  # [K, N]
        rows = weight.T
    return rows.reshape(-1, 4)


# ---------------------------------------------------------------------------------------------
# 2:4


def test_2of4_zeroes_exactly_the_two_smallest_of_every_four(tmp_path: Path) -> None:
    path = _mixed_graph(tmp_path / "mixed.onnx")
    before = _weights(path)
    candidate = prune_2of4(path, tmp_path / "out")
    after = _weights(candidate.path)

    assert candidate.kind == "prune-2of4"
    assert candidate.recipe["tensors"] == 4
    assert sorted(str(s).split()[0] for s in candidate.recipe["skipped"]) == ["c_first", "m_odd"]
    for name in ("c_first", "m_odd"):
        np.testing.assert_array_equal(after[name], before[name])
    for name in ("c_mid", "g_nk", "g_kn", "m_kn"):
        old, new = _groups(name, before[name]), _groups(name, after[name])
        assert np.all(np.count_nonzero(new, axis=1) == 2), name
        largest = np.sort(np.argsort(-np.abs(old), axis=1)[:, :2], axis=1)
        kept = np.sort(np.argsort(new == 0, axis=1, kind="stable")[:, :2], axis=1)
        np.testing.assert_array_equal(kept, largest, err_msg=name)
        np.testing.assert_array_equal(new[new != 0], old[new != 0])  # the kept ones unchanged
    assert candidate.recipe["zero_fraction"] == 0.5
    assert CPU_SPARSITY_NOTE in candidate.notes
    assert "saves no time or memory" in CPU_SPARSITY_NOTE


def test_2of4_model_still_runs_with_its_interface(tmp_path: Path) -> None:
    path = _mixed_graph(tmp_path / "mixed.onnx")
    candidate = prune_2of4(path, tmp_path / "out")
    session = ort.InferenceSession(str(candidate.path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"x": RNG.standard_normal((5, 1, 4, 4)).astype(np.float32)})
    assert out.shape == (5, 3)


def test_sparse_weights_reports_why_it_leaves_a_weight(tmp_path: Path) -> None:
    model = onnx.load(str(_mixed_graph(tmp_path / "mixed.onnx")))
    chosen, skipped = sparse_weights(model)
    assert {(w.initializer, w.layout) for w in chosen} == {
        ("c_mid", "conv"),
        ("g_nk", "nk"),
        ("g_kn", "kn"),
        ("m_kn", "kn"),
    }
    assert "c_first (reduction dimension 1 is not a multiple of 4)" in skipped
    assert "m_odd (reduction dimension 6 is not a multiple of 4)" in skipped


def test_2of4_with_labels_fine_tunes_keeps_the_pattern_and_lowers_the_loss(
    tmp_path: Path, cnn_path: Path
) -> None:
    images, labels = _digits()
    train = Dataset({"images": images[:600].reshape(-1, 1, 8, 8)}, labels[:600], "digits")
    candidate = prune_2of4(cnn_path, tmp_path / "out", train, tuning=QUICK)
    tuned = candidate.recipe["fine_tune"]
    assert isinstance(tuned, dict)
    assert tuned["objective"] == "cross-entropy on the labels"
    assert tuned["loss_after"] < tuned["loss_before"]
    assert 0 < tuned["steps"] <= QUICK.max_steps
    weights = _weights(candidate.path)
    for layout in sparse_weights(onnx.load(str(candidate.path)))[0]:
        assert is_2of4(layout.rows(weights[layout.initializer])), layout.initializer
    # the graph is the baseline's, only weights changed
    assert [n.op_type for n in onnx.load(str(candidate.path)).graph.node] == [
        n.op_type for n in onnx.load(str(cnn_path)).graph.node
    ]


def test_2of4_of_a_graph_torch_cannot_take_is_not_fine_tuned_and_says_so(tmp_path: Path) -> None:
    path = _mixed_graph(tmp_path / "mixed.onnx")
    # fine-tuning needs the graph in torch; give it an operator the conversion refuses
    model = onnx.load(str(path))
    model.graph.node[-1].output[0] = "y0"
    model.graph.node.append(helper.make_node("Selu", ["y0"], ["y"]))
    onnx.save(model, str(path))
    train = Dataset({"x": RNG.standard_normal((32, 1, 4, 4)).astype(np.float32)}, None, "rows")
    candidate = prune_2of4(path, tmp_path / "out", train)
    assert "fine_tune" not in candidate.recipe
    assert any("not fine-tuned" in n and "Selu" in n for n in candidate.notes)
    for layout in sparse_weights(onnx.load(str(candidate.path)))[0]:
        assert is_2of4(layout.rows(_weights(candidate.path)[layout.initializer]))


# ---------------------------------------------------------------------------------------------
# channels


def _params(path: Path) -> int:
    return sum(int(np.prod(i.dims)) for i in onnx.load(str(path)).graph.initializer)


def test_channel_pruning_shrinks_the_cnn_and_keeps_its_onnx_interface(
    tmp_path: Path, cnn_path: Path
) -> None:
    candidate = prune_channels(cnn_path, tmp_path / "out", ratio=0.5)
    assert candidate.kind == "prune-channels"
    recipe = candidate.recipe
    assert recipe["params_after"] < recipe["params_before"]  # type: ignore[operator]
    assert recipe["macs_after"] < recipe["macs_before"]  # type: ignore[operator]
    assert _params(candidate.path) < _params(cnn_path)
    assert any("not fine-tuned" in n for n in candidate.notes)

    base = ort.InferenceSession(str(cnn_path), providers=["CPUExecutionProvider"])
    pruned = ort.InferenceSession(str(candidate.path), providers=["CPUExecutionProvider"])
    for a, b in zip(base.get_inputs(), pruned.get_inputs(), strict=True):
        assert (a.name, a.shape, a.type) == (b.name, b.shape, b.type)
    for a, b in zip(base.get_outputs(), pruned.get_outputs(), strict=True):
        assert (a.name, a.shape, a.type) == (b.name, b.shape, b.type)
    for batch in (1, 7):
        images = RNG.uniform(0, 16, (batch, 1, 8, 8)).astype(np.float32)
        (probabilities,) = pruned.run(None, {"images": images})
        assert probabilities.shape == (batch, 10)
        np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    # the layer that gives the outputs keeps its 10 classes; the convolutions lost half
    shapes = sorted(tuple(i.dims) for i in onnx.load(str(candidate.path)).graph.initializer)
    assert (4, 1, 3, 3) in shapes
    assert (8, 4, 3, 3) in shapes
    assert (10, 128) in shapes


@pytest.mark.parametrize("labelled", [True, False])
def test_channel_pruning_fine_tunes_and_lowers_the_loss(
    tmp_path: Path, mlp_path: Path, labelled: bool
) -> None:
    images, labels = _digits()
    train = Dataset({"images": images[:600] / 16.0}, labels[:600] if labelled else None, "digits")
    candidate = prune_channels(mlp_path, tmp_path / "out", ratio=0.25, train=train, tuning=QUICK)
    tuned = candidate.recipe["fine_tune"]
    assert isinstance(tuned, dict)
    assert tuned["objective"] == (
        "cross-entropy on the labels"
        if labelled
        else "MSE to the baseline's output 'probabilities'"
    )
    assert tuned["loss_after"] < tuned["loss_before"]
    session = ort.InferenceSession(str(candidate.path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"images": images[600:610] / 16.0})
    assert out.shape == (10, 10)


def test_channel_pruning_refuses_a_bad_ratio_and_skips_graphs_it_cannot_convert(
    tmp_path: Path,
) -> None:
    path = _mixed_graph(tmp_path / "mixed.onnx")
    with pytest.raises(InvalidArgumentError, match="between 0 and 1"):
        prune_channels(path, tmp_path / "out", ratio=1.0)
    model = onnx.load(str(path))
    model.graph.node[-1].output[0] = "y0"
    model.graph.node.append(helper.make_node("Selu", ["y0"], ["y"]))
    onnx.save(model, str(path))
    with pytest.raises(CandidateSkipped, match="Selu"):
        prune_channels(path, tmp_path / "out", ratio=0.5)
