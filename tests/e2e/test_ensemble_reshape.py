"""Ensembles across batching kinds, and classification labels through an ensemble, end to end.

The models are those Triton's QA builds for these cases: identity models with dims [-1], one
that batches and one that does not, behind an ensemble of the other kind. Triton adds a batch
dimension of 1 to an unbatched tensor going into a batching step and strips it coming out
(``EnsembleContext::ReshapeTensorDims``); the ensemble's classification looks its labels up
from the step model that produced the output.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto

from inferd.testing import ServerProcess, running_server
from tests.e2e.test_ensembles import write_ensemble
from tests.helpers.models import identity_model, write_model

IDENTITY = (
    'name: "{name}" platform: "onnxruntime_onnx" max_batch_size: MBS '
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ] '
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] LABELS } ]'
)


def identity_config(mbs: int, labels: str = "") -> str:
    extra = f'label_filename: "{labels}"' if labels else ""
    return IDENTITY.replace("MBS", str(mbs)).replace("LABELS", extra)


def ensemble(name: str, step_model: str, mbs: int, labels: str = "") -> str:
    extra = f'label_filename: "{labels}"' if labels else ""
    return (
        f'name: "{name}" platform: "ensemble" max_batch_size: {mbs} '
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ] '
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] {extra} }} ] '
        f'ensemble_scheduling {{ step [ {{ model_name: "{step_model}" model_version: -1 '
        'input_map { key: "INPUT0" value: "INPUT0" } '
        'output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }'
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ensemble_reshape")
    fp32 = [("INPUT0", "OUTPUT0", TensorProto.FLOAT)]
    write_model(root, "batching", identity_model(fp32, [None, None]), identity_config(8))
    write_model(root, "nobatch", identity_model(fp32, [None]), identity_config(0))
    labelled = write_model(
        root, "labelled", identity_model(fp32, [None, None]), identity_config(8, "labels.txt")
    )
    (labelled / "labels.txt").write_text("label0\nlabel1\nlabel2\nlabel3\n")
    # a non-batching ensemble over a batching step, and the reverse
    write_ensemble(root, "nobatch_ensemble", ensemble("nobatch_ensemble", "batching", 0))
    write_ensemble(root, "batch_ensemble", ensemble("batch_ensemble", "nobatch", 8))
    # classification: labels from the step model, or the ensemble's own label file first
    write_ensemble(root, "labels_ensemble", ensemble("labels_ensemble", "labelled", 8))
    write_ensemble(root, "own_labels", ensemble("own_labels", "labelled", 8, "mine.txt"))
    (root / "own_labels" / "mine.txt").write_text("mine0\nmine1\nmine2\nmine3\n")
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo]) as proc:
        yield proc


def _http(server: ServerProcess, model: str, data: np.ndarray, **out: int) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url)
    given = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    given.set_data_from_numpy(data)
    wanted = [httpclient.InferRequestedOutput("OUTPUT0", **out)]
    result = client.infer(model, [given], outputs=wanted).as_numpy("OUTPUT0")
    assert result is not None
    return result


def _grpc(server: ServerProcess, model: str, data: np.ndarray, **out: int) -> np.ndarray:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    given = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    given.set_data_from_numpy(data)
    wanted = [grpcclient.InferRequestedOutput("OUTPUT0", **out)]
    result = client.infer(model, [given], outputs=wanted).as_numpy("OUTPUT0")
    assert result is not None
    return result


@pytest.mark.parametrize("infer", [_http, _grpc], ids=["http", "grpc"])
def test_a_non_batching_ensemble_over_a_batching_step(server: ServerProcess, infer) -> None:  # type: ignore[no-untyped-def]
    data = np.arange(4, dtype=np.float32)
    result = infer(server, "nobatch_ensemble", data)
    # [4] went in as [1, 4] and came out as [4]
    assert result.shape == (4,)
    np.testing.assert_array_equal(result, data)


@pytest.mark.parametrize("infer", [_http, _grpc], ids=["http", "grpc"])
def test_a_batching_ensemble_over_a_non_batching_step(server: ServerProcess, infer) -> None:  # type: ignore[no-untyped-def]
    data = np.arange(5, dtype=np.float32).reshape(1, 5)
    result = infer(server, "batch_ensemble", data)
    # [1, 5] went in as [5] and came out as [1, 5]
    assert result.shape == (1, 5)
    np.testing.assert_array_equal(result, data)


def test_a_larger_batch_to_a_non_batching_step_goes_whole(server: ServerProcess) -> None:
    # Triton strips only a batch of 1: [2, 3] does not match dims [-1] and reaches the step as
    # it is, which refuses it naming the step and the shape
    data = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(Exception, match=r"step 0 \(model 'nobatch'\).*\[-1\]"):
        _http(server, "batch_ensemble", data)


@pytest.mark.parametrize("infer", [_http, _grpc], ids=["http", "grpc"])
def test_classification_through_an_ensemble_uses_the_step_models_labels(
    server: ServerProcess,
    infer,  # type: ignore[no-untyped-def]
) -> None:
    data = np.array([[0.0, 3.0, 1.0, 2.0]], dtype=np.float32)
    result = infer(server, "labels_ensemble", data, class_count=2)
    assert [v.decode() for v in result.ravel()] == ["3.000000:1:label1", "2.000000:3:label3"]
    zeros = infer(server, "labels_ensemble", np.zeros((1, 4), np.float32), class_count=1)
    assert zeros.ravel()[0].decode() == "0.000000:0:label0"


def test_an_ensembles_own_label_file_comes_first(server: ServerProcess) -> None:
    data = np.array([[0.0, 3.0, 1.0, 2.0]], dtype=np.float32)
    result = _http(server, "own_labels", data, class_count=1)
    assert result.ravel()[0].decode() == "3.000000:1:mine1"
