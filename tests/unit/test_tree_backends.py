"""The ``fil`` (XGBoost, LightGBM, Treelite) and ``sklearn`` backends on tiny models."""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")
pytest.importorskip("sklearn")
sio = pytest.importorskip("skops.io")

from sklearn.base import BaseEstimator, TransformerMixin  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from inferd.backends.base import LoadContext  # noqa: E402
from inferd.backends.registry import BackendRegistry, default_registry  # noqa: E402
from inferd.backends.sklearn import SklearnBackend  # noqa: E402
from inferd.backends.trees import TreeModel  # noqa: E402
from inferd.core.inference import InferRequest  # noqa: E402
from inferd.errors import InferdError, InvalidArgumentError, InvalidInputError, ModelLoadError  # noqa: E402
from inferd.repository.loader import LoadOptions, prepare  # noqa: E402

Array = np.ndarray[Any, Any]

BINARY = load_breast_cancer(return_X_y=True)
MULTI = load_iris(return_X_y=True)
REGRESSION = load_diabetes(return_X_y=True)


def rows(data: tuple[Array, Array], n: int = 40, start: int = 0) -> Array:
    return np.ascontiguousarray(data[0][start : start + n], dtype=np.float32)


def xgb_booster(data: tuple[Array, Array], params: dict[str, Any]) -> Any:
    x, y = data
    return xgb.train(
        {"max_depth": 3, "seed": 0, **params},
        xgb.DMatrix(x.astype(np.float32), label=y),
        num_boost_round=15,
    )


def lgb_booster(data: tuple[Array, Array], params: dict[str, Any]) -> Any:
    x, y = data
    return lgb.train(
        {"num_leaves": 8, "verbose": -1, "seed": 0, **params},
        lgb.Dataset(x.astype(np.float32), label=y),
        num_boost_round=15,
    )


def fil_config(params: dict[str, str], *, features: int | None = None, columns: int = 0) -> str:
    body = 'backend: "fil"\nmax_batch_size: 64\n'
    if features is not None:
        body += (
            f'input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]\n'
            f'output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {columns} ] }} ]\n'
        )
    for key, value in params.items():
        body += f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
    return body


class Served:
    """A model prepared like the server does, loaded, with one instance."""

    def __init__(
        self,
        tmp_path: Path,
        config: str,
        write: Callable[[Path], None],
        registry: BackendRegistry | None = None,
    ) -> None:
        registry = registry or default_registry(load_entry_points=False)
        model_dir = tmp_path / "model"
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "config.pbtxt").write_text(config)
        write(model_dir / "1")
        prepared = prepare("model", model_dir, registry, LoadOptions())
        self.spec = prepared.spec
        backend = registry.for_spec(self.spec)
        self.loaded = backend.load(LoadContext(self.spec, 1, model_dir, model_dir / "1"))
        self.instance = self.loaded.create_instance(self.spec.instance_groups[0], 0)

    def run(self, *batches: Array) -> list[Any]:
        name = self.spec.inputs[0].name
        requests = [InferRequest("model", {name: b}) for b in batches]
        return self.instance.execute(requests)

    def one(self, batch: Array) -> Array:
        [result] = self.run(batch)
        assert not isinstance(result, InferdError), result
        out: Array = result[self.spec.outputs[0].name]
        return out

    def close(self) -> None:
        self.instance.close()
        self.loaded.close()


@pytest.fixture
def serve(tmp_path: Path) -> Any:
    made: list[Served] = []
    attempts = iter(range(1000))

    def make(
        config: str, write: Callable[[Path], None], registry: BackendRegistry | None = None
    ) -> Served:
        served = Served(tmp_path / str(next(attempts)), config, write, registry)
        made.append(served)
        return served

    yield make
    for served in made:
        served.close()


# -- XGBoost ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_type", "filename"),
    [("xgboost_json", "xgboost.json"), ("xgboost_ubj", "xgboost.ubj"), ("xgboost", None)],
)
@pytest.mark.parametrize("runtime", ["native", "onnx"])
def test_xgboost_binary_probabilities(
    serve: Any, model_type: str, filename: str | None, runtime: str
) -> None:
    booster = xgb_booster(BINARY, {"objective": "binary:logistic"})

    def write(version: Path) -> None:
        if filename is not None:
            booster.save_model(str(version / filename))
        else:  # XGBoost 3 writes UBJSON; the FIL default name of the legacy type still loads
            (version / "xgboost.model").write_bytes(bytes(booster.save_raw("ubj")))

    params = {"model_type": model_type, "predict_proba": "true", "runtime": runtime}
    served = serve(fil_config(params), write)
    x = rows(BINARY)
    out = served.one(x)
    p = booster.inplace_predict(x)
    assert out.shape == (40, 2)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[:, 1], p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[:, 0], 1 - p, rtol=1e-5, atol=1e-6)
    assert isinstance(served.loaded, TreeModel)
    assert served.loaded.runtime == runtime


def test_autocomplete_fills_dims_and_default_runtime_is_onnx(serve: Any) -> None:
    booster = xgb_booster(BINARY, {"objective": "binary:logistic"})
    served = serve(
        fil_config({"model_type": "xgboost_json"}),
        lambda v: booster.save_model(str(v / "xgboost.json")),
    )
    spec = served.spec
    assert [(t.name, t.dims) for t in spec.inputs] == [("input__0", (30,))]
    assert [(t.name, t.dims) for t in spec.outputs] == [("output__0", (1,))]
    assert spec.default_model_filename == "xgboost.json"
    assert served.loaded.runtime == "onnx"
    x = rows(BINARY)  # output_class defaults to true for a classifier: class index
    np.testing.assert_array_equal(served.one(x)[:, 0], booster.inplace_predict(x) > 0.5)


def test_model_file_alone_is_detected(tmp_path: Path) -> None:
    booster = xgb_booster(BINARY, {"objective": "binary:logistic"})
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    booster.save_model(str(model_dir / "1" / "xgboost.ubj"))
    prepared = prepare("m", model_dir, default_registry(load_entry_points=False), LoadOptions())
    assert prepared.spec.backend == "fil"
    assert prepared.spec.inputs[0].dims == (30,)


@pytest.mark.parametrize("runtime", ["native", "onnx"])
def test_threshold_decides_binary_classes(serve: Any, runtime: str) -> None:
    booster = xgb_booster(BINARY, {"objective": "binary:logistic"})
    params = {"model_type": "xgboost_json", "output_class": "true", "threshold": "0.9"}
    served = serve(
        fil_config({**params, "runtime": runtime}, features=30, columns=1),
        lambda v: booster.save_model(str(v / "xgboost.json")),
    )
    x = rows(BINARY, 200)
    p = booster.inplace_predict(x)
    got = served.one(x)[:, 0]
    np.testing.assert_array_equal(got, (p > 0.9).astype(np.float32))
    assert 0 < got.sum() < (p > 0.5).sum()  # the threshold matters on this data


@pytest.mark.parametrize("runtime", ["native", "onnx"])
def test_xgboost_multiclass_classes_and_probabilities(serve: Any, runtime: str) -> None:
    booster = xgb_booster(MULTI, {"objective": "multi:softprob", "num_class": 3})
    save = lambda v: booster.save_model(str(v / "xgboost.json"))  # noqa: E731
    base = {"model_type": "xgboost_json", "runtime": runtime}
    x = rows(MULTI, 150)
    proba = serve(fil_config({**base, "predict_proba": "true"}), save).one(x)
    np.testing.assert_allclose(proba, booster.inplace_predict(x), rtol=1e-5, atol=1e-6)
    classes = serve(fil_config({**base, "output_class": "true"}), save).one(x)
    assert classes.shape == (150, 1)
    np.testing.assert_array_equal(classes[:, 0], np.argmax(proba, axis=1))


def test_xgboost_softmax_objective_gives_probabilities(serve: Any) -> None:
    booster = xgb_booster(MULTI, {"objective": "multi:softmax", "num_class": 3})
    served = serve(
        fil_config({"model_type": "xgboost_json", "predict_proba": "true", "runtime": "native"}),
        lambda v: booster.save_model(str(v / "xgboost.json")),
    )
    out = served.one(rows(MULTI, 150))
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(np.argmax(out, axis=1), booster.inplace_predict(rows(MULTI, 150)))


@pytest.mark.parametrize("runtime", ["native", "onnx"])
def test_regression(serve: Any, runtime: str) -> None:
    booster = xgb_booster(REGRESSION, {"objective": "reg:squarederror"})
    served = serve(
        fil_config({"model_type": "xgboost_json", "runtime": runtime}),
        lambda v: booster.save_model(str(v / "xgboost.json")),
    )
    x = rows(REGRESSION)
    out = served.one(x)
    assert out.shape == (40, 1)
    np.testing.assert_allclose(out[:, 0], booster.inplace_predict(x), rtol=1e-4)


def test_regressor_refuses_output_class(serve: Any) -> None:
    booster = xgb_booster(REGRESSION, {"objective": "reg:squarederror"})
    with pytest.raises(ModelLoadError, match="regressor"):
        serve(
            fil_config(
                {"model_type": "xgboost_json", "output_class": "true"}, features=10, columns=1
            ),
            lambda v: booster.save_model(str(v / "xgboost.json")),
        )


# -- LightGBM and Treelite ----------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["native", "onnx"])
def test_lightgbm_binary_and_regression(serve: Any, runtime: str) -> None:
    clf = lgb_booster(BINARY, {"objective": "binary"})
    served = serve(
        fil_config({"model_type": "lightgbm", "predict_proba": "true", "runtime": runtime}),
        lambda v: clf.save_model(str(v / "model.txt")),
    )
    x = rows(BINARY)
    np.testing.assert_allclose(served.one(x)[:, 1], clf.predict(x), rtol=1e-4, atol=1e-6)
    reg = lgb_booster(REGRESSION, {"objective": "regression"})
    served = serve(
        fil_config({"model_type": "lightgbm", "runtime": runtime}),
        lambda v: reg.save_model(str(v / "model.txt")),
    )
    x = rows(REGRESSION)
    np.testing.assert_allclose(served.one(x)[:, 0], reg.predict(x), rtol=1e-4)


def test_lightgbm_multiclass(serve: Any) -> None:
    clf = lgb_booster(MULTI, {"objective": "multiclass", "num_class": 3})
    served = serve(
        fil_config({"model_type": "lightgbm", "predict_proba": "true"}),
        lambda v: clf.save_model(str(v / "model.txt")),
    )
    assert served.spec.outputs[0].dims == (3,)
    x = rows(MULTI, 150)
    np.testing.assert_allclose(served.one(x), clf.predict(x), rtol=1e-4, atol=1e-6)


def test_treelite_checkpoint(serve: Any) -> None:
    treelite = pytest.importorskip("treelite")
    booster = xgb_booster(BINARY, {"objective": "binary:logistic"})

    def write(version: Path) -> None:
        treelite.frontend.from_xgboost(booster).serialize(str(version / "checkpoint.tl"))

    params = {"model_type": "treelite_checkpoint", "predict_proba": "true"}
    served = serve(fil_config(params), write)
    assert served.loaded.runtime == "native"
    x = rows(BINARY)
    np.testing.assert_allclose(served.one(x)[:, 1], booster.inplace_predict(x), rtol=1e-4)


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
@pytest.mark.parametrize("runtime", ["native", "onnx"])
def test_the_file_is_read_once_per_instance_not_once_more_for_the_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: str, runtime: str
) -> None:
    """The copy the load reads (for the model's shape, and for the ONNX conversion) is the
    first instance's own: a second copy doubled what a tree model holds and what its load
    parses. The ONNX runtime's check against the library keeps no copy either."""
    if library == "xgboost":
        module, filename = xgb, "xgboost.json"
        trained = xgb_booster(BINARY, {"objective": "binary:logistic"})
    else:
        module, filename = lgb, "model.txt"
        trained = lgb_booster(BINARY, {"objective": "binary"})
    model_type = "xgboost_json" if library == "xgboost" else "lightgbm"
    model_dir = tmp_path / "model"
    (model_dir / "1").mkdir(parents=True)
    params = {"model_type": model_type, "runtime": runtime, "predict_proba": "true"}
    (model_dir / "config.pbtxt").write_text(fil_config(params))
    trained.save_model(str(model_dir / "1" / filename))
    registry = default_registry(load_entry_points=False)
    spec = prepare("model", model_dir, registry, LoadOptions()).spec  # reads it for its shape
    reads = []

    class Counted(module.Booster):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            reads.append(bool(kwargs.get("model_file") or kwargs.get("model_str")))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(module, "Booster", Counted)
    loaded = registry.for_spec(spec).load(LoadContext(spec, 1, model_dir, model_dir / "1"))
    instances = [loaded.create_instance(spec.instance_groups[0], i) for i in range(2)]
    try:
        x = rows(BINARY)
        outs = [i.execute([InferRequest("model", {spec.inputs[0].name: x})])[0] for i in instances]
        name = spec.outputs[0].name
        np.testing.assert_allclose(outs[0][name], outs[1][name])
        np.testing.assert_allclose(
            outs[0][name][:, 1],
            trained.predict(xgb.DMatrix(x) if library == "xgboost" else x),
            rtol=1e-4,
            atol=1e-6,
        )
    finally:
        for instance in instances:
            instance.close()
        loaded.close()
    # native: the load's copy serves the first instance, the second reads its own; onnx: the
    # load's copy is converted and checked, and the instances run the conversion
    assert sum(reads) == (2 if runtime == "native" else 1)


_PEAK_OF_A_LOAD = """
import sys
from pathlib import Path
from inferd.backends.trees.libraries import load_tree_file
from inferd.repository.memory import PeakMeter
path = Path(sys.argv[1])
load_tree_file(path, "lightgbm")  # the library's own first-use allocations
meter = PeakMeter()
if not meter.reset():
    print(-1)
else:
    tree = load_tree_file(path, "lightgbm")
    print(meter.rise())
"""


def test_a_lightgbm_load_peaks_near_what_it_keeps(tmp_path: Path) -> None:
    """Read from a path, LightGBM touches a 16 MiB buffer whatever the file's size: a small
    model's load peaked 16 MiB above its start, and an on-demand loader reserves that peak
    at every load of it. Parsed from the file's text, it peaks at about the model's size."""
    path = tmp_path / "model.txt"
    lgb_booster(BINARY, {"objective": "binary"}).save_model(str(path))
    assert path.stat().st_size < 100_000
    run = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_A_LOAD, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    rise = int(run.stdout.split()[-1])
    if rise < 0:
        pytest.skip("the peak resident set cannot be reset here (/proc/self/clear_refs)")
    assert rise < 4 << 20, f"a {path.stat().st_size}-byte model's load peaked {rise} bytes up"


def test_a_lightgbm_file_that_is_not_utf8_still_loads(tmp_path: Path) -> None:
    from inferd.backends.trees.libraries import load_tree_file

    trained = lgb_booster(BINARY, {"objective": "binary"})
    text = trained.model_to_string().replace("Column_0", "caf\xe9", 1)
    path = tmp_path / "model.txt"
    path.write_bytes(text.encode("latin-1"))
    tree = load_tree_file(path, "lightgbm")
    assert tree.classes == 2
    assert tree.kind.startswith("binary")
    x = rows(BINARY)
    np.testing.assert_allclose(tree.native_scorer(1)(x)[:, 1], trained.predict(x), rtol=1e-5)


def test_a_conversion_after_a_scorer_took_the_loaded_copy_reads_the_file_again(
    tmp_path: Path,
) -> None:
    from inferd.backends.trees.libraries import load_tree_file, onnx_scorer

    trained = xgb_booster(BINARY, {"objective": "binary:logistic"})
    trained.save_model(str(tmp_path / "m.json"))
    tree = load_tree_file(tmp_path / "m.json", "xgboost_json")
    native = tree.native_scorer(1)
    assert tree.handle is None  # the scorer's now
    x = rows(BINARY)
    np.testing.assert_allclose(onnx_scorer(tree, tree.to_onnx(), 1)(x), native(x), atol=1e-5)


# -- parameters ---------------------------------------------------------------------------------


def _save_binary(version: Path) -> None:
    xgb_booster(BINARY, {"objective": "binary:logistic"}).save_model(str(version / "xgboost.json"))


def test_unknown_parameter_is_refused(serve: Any) -> None:
    with pytest.raises(
        InvalidArgumentError, match="unknown parameter 'predict_probability'"
    ) as info:
        serve(fil_config({"model_type": "xgboost_json", "predict_probability": "1"}), _save_binary)
    assert "predict_proba" in str(info.value)
    assert "model_type" in str(info.value)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"model_type": "catboost"}, "model_type"),
        ({"model_type": "xgboost_json", "threshold": "2"}, "threshold"),
        ({"model_type": "xgboost_json", "runtime": "gpu"}, "runtime"),
        ({"model_type": "xgboost_json", "output_class": "maybe"}, "output_class"),
        ({"model_type": "xgboost_json", "output_class": "false", "predict_proba": "1"}, "proba"),
    ],
)
def test_bad_parameter_values(serve: Any, params: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        serve(fil_config(params, features=30, columns=1), _save_binary)


def test_gpu_only_parameters_are_accepted_and_reported(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    params = {"model_type": "xgboost_json", "storage_type": "SPARSE", "threads_per_tree": "4"}
    with caplog.at_level(logging.INFO, logger="inferd.backends.trees"):
        served = serve(fil_config(params), _save_binary)
    assert served.one(rows(BINARY)).shape == (40, 1)
    assert "storage_type, threads_per_tree" in caplog.text
    assert "do not apply" in caplog.text


def test_config_dims_must_match_the_model(serve: Any) -> None:
    with pytest.raises(ModelLoadError, match="trained on 30"):
        serve(fil_config({"model_type": "xgboost_json"}, features=12, columns=1), _save_binary)
    with pytest.raises(ModelLoadError, match="output 'output__0'"):
        serve(fil_config({"model_type": "xgboost_json"}, features=30, columns=3), _save_binary)


def test_missing_file_names_the_default(serve: Any) -> None:
    with pytest.raises(ModelLoadError, match=r"xgboost\.ubj"):
        serve(fil_config({"model_type": "xgboost_ubj"}, features=30, columns=1), _save_binary)


# -- batches ------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["native", "onnx"])
def test_batch_is_one_call_and_a_bad_request_fails_alone(serve: Any, runtime: str) -> None:
    params = {"model_type": "xgboost_json", "predict_proba": "true", "runtime": runtime}
    served = serve(fil_config(params), _save_binary)
    first, last = rows(BINARY, 3), rows(BINARY, 5, start=10)
    bad = rows(BINARY, 2)[:, :29]  # one feature short
    wrong_type = rows(BINARY, 2).astype(np.float64)
    results = served.run(first, bad, last, wrong_type)
    assert isinstance(results[1], InvalidInputError)
    assert "30 features" in str(results[1])
    assert isinstance(results[3], InvalidInputError)
    assert "FP32" in str(results[3])
    np.testing.assert_array_equal(results[0]["output__0"], served.one(first))
    np.testing.assert_array_equal(results[2]["output__0"], served.one(last))
    assert results[2]["output__0"].shape == (5, 2)


def test_closed_instance_answers_with_an_error(serve: Any) -> None:
    served = serve(fil_config({"model_type": "xgboost_json"}), _save_binary)
    served.instance.close()
    [result] = served.run(rows(BINARY, 1))
    assert isinstance(result, InferdError)


# -- scikit-learn -------------------------------------------------------------------------------


class Doubler(TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """A user-defined step: skops does not trust it, nor does inferd unless told to."""

    def fit(self, x: Array, y: Any = None) -> Doubler:
        self.n_features_in_ = x.shape[1]
        return self

    def transform(self, x: Array) -> Array:
        return x * 2


def sk_config(params: dict[str, str] | None = None, *, filename: str = "") -> str:
    body = 'backend: "sklearn"\nmax_batch_size: 16\n'
    if filename:
        body += f'default_model_filename: "{filename}"\n'
    for key, value in (params or {}).items():
        body += f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
    return body


def iris_pipeline(*steps: Any) -> Any:
    x, y = MULTI
    model = Pipeline(
        [
            *steps,
            ("scale", StandardScaler()),
            ("forest", RandomForestClassifier(10, random_state=0)),
        ]
    )
    return model.fit(x.astype(np.float32), y)


def test_skops_pipeline_predict_and_proba(serve: Any) -> None:
    model = iris_pipeline()
    save = lambda v: sio.dump(model, v / "model.skops")  # noqa: E731
    x = rows(MULTI, 150)
    labels = serve(sk_config(), save)
    assert labels.spec.outputs[0].datatype.name == "INT64"  # auto-completed from classes_
    np.testing.assert_array_equal(labels.one(x)[:, 0], model.predict(x))
    proba = serve(sk_config({"predict_proba": "true"}), save)
    assert proba.spec.outputs[0].dims == (3,)
    np.testing.assert_allclose(proba.one(x), model.predict_proba(x), rtol=1e-6)


def test_skops_untrusted_types_are_refused_unless_listed(serve: Any) -> None:
    model = iris_pipeline(("double", Doubler()))
    save = lambda v: sio.dump(model, v / "model.skops")  # noqa: E731
    with pytest.raises(InvalidArgumentError, match=r"not trusted: .*test_tree_backends\.Doubler"):
        serve(sk_config(), save)
    trusted = f"{Doubler.__module__}.Doubler"
    served = serve(sk_config({"skops_trusted_types": trusted}), save)
    x = rows(MULTI, 20)
    np.testing.assert_array_equal(served.one(x)[:, 0], model.predict(x))


def test_sklearn_unknown_parameter(serve: Any) -> None:
    model = iris_pipeline()
    with pytest.raises(InvalidArgumentError, match="unknown parameter 'threshold'"):
        serve(sk_config({"threshold": "0.3"}), lambda v: sio.dump(model, v / "model.skops"))


@pytest.mark.parametrize("filename", ["model.pkl", "model.joblib"])
def test_pickle_refused_by_default_and_allowed_by_the_operator(serve: Any, filename: str) -> None:
    model = iris_pipeline()

    def write(version: Path) -> None:
        (version / filename).write_bytes(pickle.dumps(model))

    config = sk_config(filename=filename) + (
        'input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "output__0" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
    )
    with pytest.raises(ModelLoadError, match=r"refusing to unpickle.*--allow-pickle-models"):
        serve(config, write)
    allowed = default_registry(
        load_entry_points=False, backend_options={"sklearn": {"allow_pickle": True}}
    )
    served = serve(config, write, allowed)
    x = rows(MULTI, 30)
    np.testing.assert_array_equal(served.one(x)[:, 0], model.predict(x))


def test_pickle_found_next_to_a_missing_skops_file_is_still_refused(tmp_path: Path) -> None:
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.pkl").write_bytes(pickle.dumps(iris_pipeline()))
    with pytest.raises(ModelLoadError, match=r"refusing to unpickle model\.pkl"):
        SklearnBackend().read_estimator(SklearnBackend()._resolve(version, ""), {})


def test_onnx_file_points_to_the_onnxruntime_backend(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="backend 'onnxruntime'"):
        SklearnBackend()._resolve(tmp_path, "model.onnx")


# -- the conformance kit ------------------------------------------------------------------------

testing = pytest.importorskip("inferd.testing.conformance")


def _conformance_fil(version: Path) -> str:
    _save_binary(version)
    return fil_config({"model_type": "xgboost_json", "predict_proba": "true"})


def _conformance_sklearn(version: Path) -> str:
    sio.dump(iris_pipeline(), version / "model.skops")
    return sk_config({"predict_proba": "true"})


def _inputs(features: int) -> Callable[[np.random.Generator, int], dict[str, Array]]:
    def make(rng: np.random.Generator, n: int) -> dict[str, Array]:
        return {"input__0": rng.normal(0, 5, size=(n, features)).astype(np.float32)}

    return make


test_conformance = testing.conformance_tests(
    testing.ConformanceCase("fil_xgboost", _conformance_fil, _inputs(30)),
    testing.ConformanceCase("sklearn_skops", _conformance_sklearn, _inputs(4)),
)
