"""PyTorch baselines exported to ONNX: the served names kept, the batch dimension free, and the
answers torch gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from opt_graph_models import rng, serve

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from inferd.examples.torch_models import build_digits_cnn_torch  # noqa: E402
from inferd.tools.optimize.candidate import CandidateSkipped  # noqa: E402
from inferd.tools.optimize.export import (  # noqa: E402
    build_onnx_baseline,
    forward_order,
    output_positions,
    returned_names,
)


def _dims(value: Any) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.fixture(scope="module")
def digits_cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model_dir = tmp_path_factory.mktemp("repo") / "digits_cnn_torch"
    build_digits_cnn_torch("digits_cnn_torch", model_dir)
    return model_dir / "1" / "model.pt"


def test_forward_order_follows_the_index_suffix() -> None:
    assert forward_order(["INPUT__1", "INPUT__0", "INPUT__2"]) == [
        "INPUT__0",
        "INPUT__1",
        "INPUT__2",
    ]
    assert forward_order(["ids", "mask"]) == ["ids", "mask"]
    assert forward_order(["INPUT__1", "mask"]) == ["INPUT__1", "mask"]


def test_output_positions_follow_the_index_suffix_or_the_order() -> None:
    assert output_positions(["OUTPUT__1", "OUTPUT__0"]) == [1, 0]
    assert output_positions(["scores", "labels"]) == [0, 1]


def test_the_torchscript_digits_cnn_exports_with_its_served_names(
    digits_cnn: Path, tmp_path: Path
) -> None:
    images = rng("images").uniform(0, 16, (8, 1, 8, 8)).astype(np.float32)
    candidate = build_onnx_baseline(
        digits_cnn, tmp_path / "out", sample={"INPUT__0": images}, output_names=["OUTPUT__0"]
    )
    assert (candidate.name, candidate.kind) == ("baseline-onnx", "baseline-onnx")
    assert candidate.recipe["method"] == "torch.onnx.export (torchscript)"
    model = onnx.load(str(candidate.path))
    assert [i.name for i in model.graph.input] == ["INPUT__0"]
    assert [o.name for o in model.graph.output] == ["OUTPUT__0"]
    assert isinstance(_dims(model.graph.input[0])[0], str)  # the batch dimension is free
    want = torch.jit.load(str(digits_cnn))(torch.from_numpy(images)).detach().numpy()
    served = serve(candidate, tmp_path, {"INPUT__0": images})
    np.testing.assert_allclose(served["OUTPUT__0"], want, atol=1e-5)


class TwoHeads(torch.nn.Module):
    """Two inputs, a dict of two outputs (the pytorch backend picks them by key)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 4)

    def forward(self, features: Any, offsets: Any) -> dict[str, Any]:
        hidden = self.linear(features)
        return {"scores": hidden + offsets, "total": hidden.sum(dim=1)}


def _two_heads_sample(rows: int) -> dict[str, np.ndarray]:
    return {
        "features": rng("features", rows).standard_normal((rows, 6)).astype(np.float32),
        "offsets": rng("offsets", rows).standard_normal((rows, 4)).astype(np.float32),
    }


def test_a_module_exports_through_torch_export_with_dict_outputs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = TwoHeads().eval()
    sample = _two_heads_sample(1)  # one row: the exporter still keeps the batch free
    candidate = build_onnx_baseline(
        module, tmp_path / "out", sample=sample, output_names=["total", "scores"]
    )
    assert candidate.recipe["method"] == "torch.onnx.export (torch.export)"
    model = onnx.load(str(candidate.path))
    assert [o.name for o in model.graph.output] == ["scores", "total"]  # as forward returns
    assert all(isinstance(_dims(i)[0], str) for i in model.graph.input)
    rows = _two_heads_sample(5)
    served = serve(candidate, tmp_path, rows)
    with torch.no_grad():
        want = module(*(torch.from_numpy(a) for a in rows.values()))
    # a [batch] output is served as [batch, 1], as Triton serves it
    np.testing.assert_allclose(served["total"].reshape(-1), want["total"].numpy(), atol=1e-5)
    np.testing.assert_allclose(served["scores"], want["scores"].numpy(), atol=1e-5)


def test_a_torch_export_program_file_exports(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.Tanh()).eval()
    batch = torch.export.Dim("batch")
    program = torch.export.export(
        module, (torch.zeros(2, 6),), dynamic_shapes=({0: batch},), strict=False
    )
    path = tmp_path / "model.pt2"
    torch.export.save(program, str(path))
    x = rng("x").standard_normal((4, 6)).astype(np.float32)
    candidate = build_onnx_baseline(
        path, tmp_path / "out", sample={"INPUT__0": x}, output_names=["OUTPUT__0"]
    )
    served = serve(candidate, tmp_path, {"INPUT__0": x})
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(served["OUTPUT__0"], want, atol=1e-5)


def test_a_file_torch_cannot_load_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(b"not a model")
    with pytest.raises(CandidateSkipped, match="PyTorch could not load"):
        build_onnx_baseline(
            path, tmp_path / "out", sample={"INPUT__0": np.ones((2, 3))}, output_names=["OUTPUT__0"]
        )


def test_outputs_that_do_not_exist_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CandidateSkipped, match="'missing' are not among what the model returns"):
        build_onnx_baseline(
            TwoHeads().eval(),
            tmp_path / "out",
            sample=_two_heads_sample(2),
            output_names=["missing"],
        )


def test_tuple_outputs_are_named_by_their_index_and_extras_kept_apart() -> None:
    pair = (torch.zeros(2, 1), torch.zeros(2, 3), torch.zeros(2))
    assert returned_names(pair, ["OUTPUT__2", "OUTPUT__0"]) == [
        "OUTPUT__0",
        "unserved__1",
        "OUTPUT__2",
    ]
    assert returned_names(torch.zeros(2), ["probs"]) == ["probs"]
    with pytest.raises(CandidateSkipped, match="returns one tensor but 2 outputs"):
        returned_names(torch.zeros(2), ["a", "b"])
    with pytest.raises(CandidateSkipped, match="nested values"):
        returned_names({"a": (torch.zeros(1),)}, ["a"])
