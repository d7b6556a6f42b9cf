"""scikit-learn classifiers exported by skl2onnx with its defaults (probabilities through a ZipMap,
a ``seq(map(int64, float))`` output) are served by a real ``inferd serve``: the tensor outputs
answer, the ZipMap output is left out with a warning that says how to export without it, and a
configuration that lists it fails to load naming the output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.datasets import load_iris  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from inferd.backends.registry import default_registry  # noqa: E402
from inferd.repository.loader import LoadOptions  # noqa: E402
from inferd.repository.manager import ControlMode, RepositoryManager  # noqa: E402
from inferd.testing import ServerProcess, running_server  # noqa: E402

Array = np.ndarray[Any, Any]

LISTS_ZIPMAP = """
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "output_probability" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


class Iris:
    def __init__(self, root: Path) -> None:
        x, y = load_iris(return_X_y=True)
        self.x = x.astype(np.float32)
        self.model = LogisticRegression(max_iter=1000).fit(self.x, y)
        self.root = root
        defaults = skl2onnx.to_onnx(self.model, self.x[:1])
        no_zipmap = skl2onnx.to_onnx(
            self.model, self.x[:1], options={id(self.model): {"zipmap": False}}
        )
        for name, onx in (("iris", defaults), ("iris_tensor", no_zipmap)):
            (root / name / "1").mkdir(parents=True)
            (root / name / "1" / "model.onnx").write_bytes(onx.SerializeToString())


@pytest.fixture(scope="module")
def iris(tmp_path_factory: pytest.TempPathFactory) -> Iris:
    return Iris(tmp_path_factory.mktemp("zipmap_repo"))


@pytest.fixture(scope="module")
def server(iris: Iris) -> Iterator[ServerProcess]:
    with running_server([iris.root]) as proc:  # exits at start-up if a model fails to load
        yield proc


def _infer(client: Any, httpclient: Any, model: str, rows: Array, outputs: list[str]) -> Any:
    tensor = httpclient.InferInput("X", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows, binary_data=True)
    wanted = [httpclient.InferRequestedOutput(name) for name in outputs]
    return client.infer(model, [tensor], outputs=wanted)


def test_default_export_serves_its_label_and_warns_about_zipmap(
    iris: Iris, server: ServerProcess
) -> None:
    httpclient = pytest.importorskip("tritonclient.http")
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_model_ready("iris")
        metadata = client.get_model_metadata("iris")
        assert [o["name"] for o in metadata["outputs"]] == ["output_label"]
        rows = iris.x[[0, 60, 120, 149]]
        labels = _infer(client, httpclient, "iris", rows, ["output_label"]).as_numpy("output_label")
        np.testing.assert_array_equal(labels.reshape(-1), iris.model.predict(rows))
        # exported without ZipMap, the probabilities are a tensor and are served too
        result = _infer(client, httpclient, "iris_tensor", rows, ["label", "probabilities"])
    finally:
        client.close()
    np.testing.assert_array_equal(result.as_numpy("label").reshape(-1), iris.model.predict(rows))
    np.testing.assert_allclose(
        result.as_numpy("probabilities"), iris.model.predict_proba(rows), rtol=1e-4, atol=1e-5
    )
    log = server.log()
    assert "output 'output_probability' is a seq(map(int64,tensor(float)))" in log
    assert "options={id(model): {'zipmap': False}}" in log


async def test_config_listing_the_zipmap_output_fails_to_load_naming_it(iris: Iris) -> None:
    (iris.root / "iris" / "config.pbtxt").write_text(LISTS_ZIPMAP)
    manager = RepositoryManager(
        [iris.root], default_registry(), mode=ControlMode.NONE, options=LoadOptions()
    )
    try:
        failures = await manager.startup()
    finally:
        await manager.close()
        (iris.root / "iris" / "config.pbtxt").unlink()
    assert set(failures) == {"iris"}
    assert "output 'output_probability' is a seq(map(int64,tensor(float)))" in failures["iris"]
    assert "not a tensor" in failures["iris"]
    assert "'zipmap': False" in failures["iris"]
