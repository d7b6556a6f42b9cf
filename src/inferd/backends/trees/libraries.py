"""The tree libraries behind ``backend: "fil"``: reading a model file, and two ways to run it.

Every adapter reads one serialised format into a :class:`TreeFile` that knows the model's shape
(features, classes) and builds, per instance, a :class:`Scorer`: a function from an FP32 matrix
to *scores* — per-class probabilities ``(n, classes)`` for classifiers (a binary model gives
``[1 - p, p]``) or predicted values ``(n, targets)`` for regressors.

Two runtimes build scorers: ``native`` calls the library itself (XGBoost ``inplace_predict``,
LightGBM ``predict``, Treelite GTIL); ``onnx`` converts the model once with ``onnxmltools``
and runs the converted graph with ONNX Runtime. The libraries are imported only when a model
of their kind is loaded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import ModelLoadError, UnavailableError

log = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]
Scorer = Callable[[Array], Array]

#: ONNX operator set used for converted models (the highest onnxmltools' converters accept).
ONNX_OPSET = 15

XGBOOST_TYPES = ("xgboost", "xgboost_json", "xgboost_ubj")
MODEL_TYPES = (*XGBOOST_TYPES, "lightgbm", "treelite_checkpoint")


def _need(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UnavailableError(
            f"serving this model needs '{module}', which is not installed ({exc}); "
            f"to use it run: pip install 'inferd[{extra}]'"
        ) from exc


def _binary(p: Array) -> Array:
    p = np.asarray(p, dtype=np.float32).reshape(-1, 1)
    return np.concatenate([1.0 - p, p], axis=1)


def _as_matrix(values: Array) -> Array:
    values = np.asarray(values, dtype=np.float32)
    return values.reshape(values.shape[0], -1)


@dataclass(slots=True)
class TreeFile:
    """A loaded model file; ``classes`` is 0 for a regressor."""

    model_type: str
    path: Path
    features: int
    classes: int
    targets: int
    # the library object read with the file: the conversion's, then the first scorer's own
    # copy (later scorers read their own); None once a scorer took it
    handle: Any
    kind: str = ""  # library-specific detail (the objective)

    @property
    def columns(self) -> int:
        """Columns of the score matrix."""
        return self.classes if self.classes else self.targets

    def native_scorer(self, threads: int) -> Scorer:
        """A scorer on a copy of the model of its own: the first takes the one read with the
        file (a second copy would double what the model holds and what its load parses)."""
        handle, self.handle = self.handle, None
        if self.model_type in XGBOOST_TYPES:
            return _xgboost_scorer(self, threads, handle)
        if self.model_type == "lightgbm":
            return _lightgbm_scorer(self, threads, handle)
        return _treelite_scorer(self, threads, handle)

    def _library_object(self) -> Any:
        """The handle, or a copy read again where a scorer took it."""
        if self.handle is not None:
            return self.handle
        if self.model_type in XGBOOST_TYPES:
            return _xgboost_booster(self.path)
        return _lightgbm_booster(self.path)

    def to_onnx(self) -> bytes:
        """The model converted to ONNX (raises when the converter cannot express it)."""
        if self.model_type == "treelite_checkpoint":
            raise ModelLoadError("Treelite checkpoints have no ONNX converter; use runtime native")
        onnxmltools = _need("onnxmltools", "trees")
        from onnxmltools.convert.common.data_types import FloatTensorType

        inputs = [("input", FloatTensorType([None, self.features]))]
        if self.model_type == "lightgbm":
            model = onnxmltools.convert_lightgbm(
                self._library_object(),
                initial_types=inputs,
                target_opset=ONNX_OPSET,
                zipmap=False,
            )
        else:
            model = onnxmltools.convert_xgboost(
                self._library_object(), initial_types=inputs, target_opset=ONNX_OPSET
            )
        for output in model.graph.output:  # the converters give a fixed batch of 1
            dims = output.type.tensor_type.shape.dim
            if len(dims) > 0:
                dims[0].dim_param = "N"
        data: bytes = model.SerializeToString()
        return data


def onnx_scorer(tree: TreeFile, model: bytes, threads: int) -> Scorer:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # tree ensembles run in microseconds: spinning intra-op threads would only steal the cores
    # the server's own threads need between calls
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = ["probabilities"] if tree.classes and "probabilities" in names else [names[-1]]
    run = session.run

    def score(rows: Array) -> Array:
        out: Array = run(wanted, {"input": rows})[0]
        return out if out.ndim == 2 else out.reshape(out.shape[0], -1)

    return score


# -- XGBoost ------------------------------------------------------------------------------------

_XGB_BINARY = ("binary:logistic", "binary:logitraw", "binary:hinge")
_XGB_MULTI = ("multi:softprob", "multi:softmax")


def _xgboost_booster(path: Path) -> Any:
    """Load from the bytes: XGBoost tells JSON, UBJSON and legacy binary apart by content, and
    this way does not warn about file names it does not know (``xgboost.model``)."""
    xgb = _need("xgboost", "trees")
    return xgb.Booster(model_file=bytearray(path.read_bytes()))


def load_xgboost(path: Path, model_type: str) -> TreeFile:
    booster = _xgboost_booster(path)
    config = json.loads(booster.save_config())
    learner = config["learner"]
    objective = learner["objective"]["name"]
    params = learner["learner_model_param"]
    classes = 0
    if objective in _XGB_BINARY:
        classes = 2
    elif objective in _XGB_MULTI:
        classes = int(params.get("num_class", "0"))
    targets = max(1, int(params.get("num_target", "1")))
    return TreeFile(
        model_type, path, booster.num_features(), classes, targets, booster, kind=objective
    )


def _softmax(margin: Array) -> Array:
    shifted = margin - margin.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    out: Array = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
    return out


def _xgboost_scorer(tree: TreeFile, threads: int, booster: Any = None) -> Scorer:
    if booster is None:
        booster = _xgboost_booster(tree.path)
    booster.set_param({"nthread": threads})
    predict = booster.inplace_predict
    objective = tree.kind
    if objective == "binary:logitraw":
        return lambda rows: _binary(
            1.0 / (1.0 + np.exp(-predict(rows, predict_type="margin", validate_features=False)))
        )
    if objective == "multi:softmax":
        return lambda rows: _softmax(
            _as_matrix(predict(rows, predict_type="margin", validate_features=False))
        )
    if tree.classes == 2:
        return lambda rows: _binary(predict(rows, validate_features=False))
    return lambda rows: _as_matrix(predict(rows, validate_features=False))


# -- LightGBM -----------------------------------------------------------------------------------


def _lightgbm_objective(text: str) -> str:
    """The ``objective=`` line of a LightGBM text model (found without parsing the trees)."""
    for line in text[: text.find("\nTree=")].splitlines():
        if line.startswith("objective="):
            return line.partition("=")[2].strip()
    return ""


def _lightgbm_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="surrogateescape")


def _lightgbm_booster(path: Path, text: str | None = None) -> Any:
    """Parsed from the text, not from the path: LightGBM reads a file through a 16 MiB buffer
    that it fills with zeros, whatever the file's size; a half-megabyte model's load then
    peaks 16 MiB above what it keeps, and the freed buffer stays in the heap."""
    text = _lightgbm_text(path) if text is None else text
    try:
        return _need("lightgbm", "trees").Booster(model_str=text)
    except UnicodeEncodeError:  # not UTF-8: the library reads such a file as it is
        return _need("lightgbm", "trees").Booster(model_file=str(path))


def load_lightgbm(path: Path) -> TreeFile:
    text = _lightgbm_text(path)
    booster = _lightgbm_booster(path, text)
    objective = _lightgbm_objective(text)
    name = objective.split(" ")[0]
    classes = 0
    if name == "binary":
        classes = 2
    elif name in ("multiclass", "multiclassova", "softmax", "ova", "ovr"):
        classes = int(booster.num_model_per_iteration())
    return TreeFile("lightgbm", path, booster.num_feature(), classes, 1, booster, kind=objective)


def _lightgbm_scorer(tree: TreeFile, threads: int, booster: Any = None) -> Scorer:
    if booster is None:
        booster = _lightgbm_booster(tree.path)
    predict = booster.predict
    if tree.classes == 2:
        return lambda rows: _binary(predict(rows, num_threads=threads))
    return lambda rows: _as_matrix(predict(rows, num_threads=threads))


# -- Treelite -----------------------------------------------------------------------------------


def load_treelite(path: Path) -> TreeFile:
    treelite = _need("treelite", "trees")
    model = treelite.Model.deserialize(str(path))
    header = json.loads(model.dump_as_json())
    task = header.get("task_type", "")
    num_class = header.get("num_class", [1])
    classes = 0
    if task == "kBinaryClf":
        classes = 2
    elif task == "kMultiClf":
        classes = int(max(num_class))
    targets = int(header.get("num_target", 1))
    return TreeFile(
        "treelite_checkpoint", path, int(model.num_feature), classes, targets, model, kind=task
    )


def _treelite_scorer(tree: TreeFile, threads: int, model: Any = None) -> Scorer:
    treelite = _need("treelite", "trees")
    if model is None:
        model = treelite.Model.deserialize(str(tree.path))
    predict = treelite.gtil.predict
    try:  # GTIL refuses more threads than OpenMP allows in this process (-1: OpenMP's limit)
        predict(model, np.zeros((1, tree.features), dtype=np.float32), nthread=threads)
    except Exception:
        threads = -1
    if tree.classes == 2:
        return lambda rows: _binary(predict(model, rows, nthread=threads))
    return lambda rows: _as_matrix(predict(model, rows, nthread=threads))


def load_tree_file(path: Path, model_type: str) -> TreeFile:
    if model_type in XGBOOST_TYPES:
        return load_xgboost(path, model_type)
    if model_type == "lightgbm":
        return load_lightgbm(path)
    return load_treelite(path)
