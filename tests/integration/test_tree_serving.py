"""Tree and scikit-learn models served end to end: repository manager + engine, and HTTP."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")
pytest.importorskip("sklearn")
sio = pytest.importorskip("skops.io")

from sklearn.datasets import load_breast_cancer, load_iris  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from inferd.backends.registry import default_registry  # noqa: E402
from inferd.core.inference import InferRequest  # noqa: E402
from inferd.engine import Engine  # noqa: E402
from inferd.errors import InvalidArgumentError  # noqa: E402
from inferd.repository.loader import LoadOptions  # noqa: E402
from inferd.repository.manager import ControlMode, RepositoryManager  # noqa: E402
from inferd.server.embedded import InferenceServer  # noqa: E402

Array = np.ndarray[Any, Any]

FRAUD_CONFIG = """
backend: "fil"
max_batch_size: 64
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 30 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
parameters { key: "model_type" value { string_value: "xgboost_json" } }
parameters { key: "predict_proba" value { string_value: "true" } }
"""
IRIS_CONFIG = """
backend: "sklearn"
max_batch_size: 16
parameters { key: "predict_proba" value { string_value: "true" } }
"""
PICKLED_CONFIG = """
backend: "sklearn"
max_batch_size: 16
default_model_filename: "model.pkl"
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "output__0" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""


class Models:
    def __init__(self, root: Path) -> None:
        x, y = load_breast_cancer(return_X_y=True)
        self.fraud_x = x.astype(np.float32)
        self.booster = xgb.train(
            {"objective": "binary:logistic", "max_depth": 3},
            xgb.DMatrix(self.fraud_x, label=y),
            num_boost_round=20,
        )
        ix, iy = load_iris(return_X_y=True)
        self.iris_x = ix.astype(np.float32)
        self.pipeline = Pipeline(
            [("scale", StandardScaler()), ("forest", RandomForestClassifier(10, random_state=0))]
        ).fit(self.iris_x, iy)
        self.root = root
        for name, config in (
            ("fraud", FRAUD_CONFIG),
            ("iris", IRIS_CONFIG),
            ("pickled", PICKLED_CONFIG),
        ):
            (root / name / "1").mkdir(parents=True)
            (root / name / "config.pbtxt").write_text(config)
        self.booster.save_model(str(root / "fraud" / "1" / "xgboost.json"))
        sio.dump(self.pipeline, root / "iris" / "1" / "model.skops")
        (root / "pickled" / "1" / "model.pkl").write_bytes(pickle.dumps(self.pipeline))

    def p_fraud(self, rows: Array) -> Array:
        out: Array = self.booster.inplace_predict(rows)
        return out


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    return Models(tmp_path_factory.mktemp("tree_repo"))


async def test_engine_serves_trees_and_pipelines_concurrently(models: Models) -> None:
    manager = RepositoryManager(
        [models.root], default_registry(), mode=ControlMode.NONE, options=LoadOptions()
    )
    failures = await manager.startup()
    try:
        assert set(failures) == {"pickled"}  # pickle is off unless the operator enables it
        assert "refusing to unpickle" in failures["pickled"]
        engine = Engine(manager, server_version="test")
        chunks = [models.fraud_x[i * 5 : i * 5 + 1 + i % 3] for i in range(16)]
        bad = InferRequest("fraud", {"input__0": models.fraud_x[:2, :29]})
        answers = await asyncio.gather(
            *(engine.infer(InferRequest("fraud", {"input__0": c})) for c in chunks),
            engine.infer(bad),
            return_exceptions=True,
        )
        assert isinstance(answers[-1], InvalidArgumentError)
        for chunk, answer in zip(chunks, answers[:-1], strict=True):
            assert not isinstance(answer, BaseException), answer
            np.testing.assert_allclose(
                answer.outputs["output__0"][:, 1], models.p_fraud(chunk), rtol=1e-5, atol=1e-6
            )
        iris = await engine.infer(InferRequest("iris", {"input__0": models.iris_x[:7]}))
        np.testing.assert_allclose(
            iris.outputs["output__0"], models.pipeline.predict_proba(models.iris_x[:7])
        )
        config = engine.model_config("iris")
        assert [t.dims for t in config.inputs] == [(4,)]
    finally:
        await manager.close()


def test_http_with_tritonclient(models: Models) -> None:
    httpclient = pytest.importorskip("tritonclient.http")
    with InferenceServer(models.root, http_port=0, exit_on_error=False) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.ports['http']}")
        try:
            rows = models.fraud_x[:10]
            tensor = httpclient.InferInput("input__0", list(rows.shape), "FP32")
            tensor.set_data_from_numpy(rows, binary_data=True)
            result = client.infer("fraud", [tensor])
            out = result.as_numpy("output__0")
            np.testing.assert_allclose(out[:, 1], models.p_fraud(rows), rtol=1e-5, atol=1e-6)
            metadata = client.get_model_metadata("iris")
            assert metadata["inputs"][0]["shape"] == [-1, 4]
            assert not client.is_model_ready("pickled")
        finally:
            client.close()


def test_operator_switch_allows_pickle_models(models: Models) -> None:
    with InferenceServer(models.root, allow_pickle_models=True) as server:
        rows = models.iris_x[40:56]
        out = server.infer("pickled", {"input__0": rows})["output__0"]
        np.testing.assert_array_equal(out[:, 0], models.pipeline.predict(rows))
