"""``backend: "sklearn"``: scikit-learn estimators and pipelines, from a safe format first.

Model files, in ``<model>/<version>/``:

``model.skops`` (the default)
    Loaded with ``skops.io``. Before loading, every type the file would build that skops does
    not trust by itself is checked: types from ``sklearn`` and ``numpy`` are accepted, any other
    must be listed by the operator in the ``skops_trusted_types`` parameter (comma-separated,
    e.g. ``"scipy.sparse._csr.csr_matrix,mypkg.MyTransformer"``); otherwise the model is refused
    with the list of types to review. The parameter is read from the repository's
    ``config.pbtxt`` only: a client's load request may not set it (``backends/trust.py``).
``model.pkl`` / ``model.joblib``
    Unpickling runs code from the file, so these load only when the server was started with
    ``--allow-pickle-models`` (``ServerConfig.allow_pickle_models``); otherwise the load fails
    saying why and how to enable it.
ONNX (``skl2onnx``)
    An estimator converted with skl2onnx is an ordinary ONNX model: serve ``model.onnx`` with
    the ``onnxruntime`` backend, not this one.

One input (the feature matrix, any numeric type; ``[features]`` per row) and one output.
``predict`` is called unless the parameter ``predict_proba`` is true; the result is converted
to the output's configured data type (``TYPE_STRING`` for string class labels).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import LoadContext
from inferd.backends.parameters import bool_param, check_keys
from inferd.backends.tabular import (
    Array,
    TabularInstance,
    TabularIO,
    cast_output,
    complete_io,
    is_complete,
)
from inferd.backends.trust import TRUSTING_PARAMETERS
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import ConfigError, InferdError, ModelLoadError, UnavailableError

log = logging.getLogger(__name__)

SKOPS_FILE = "model.skops"
PICKLE_FILES = ("model.pkl", "model.joblib")
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")
#: Packages whose types a skops file may build without the operator listing them.
TRUSTED_PACKAGES = ("sklearn", "numpy")
(TRUSTED_TYPES_PARAMETER,) = TRUSTING_PARAMETERS["sklearn"]  # "skops_trusted_types"
ACCEPTED_PARAMETERS = ("predict_proba", TRUSTED_TYPES_PARAMETER)


def _trusted_list(params: dict[str, str]) -> frozenset[str]:
    raw = params.get(TRUSTED_TYPES_PARAMETER, "")
    return frozenset(t.strip() for t in raw.split(",") if t.strip())


def skops_untrusted_types(content: bytes) -> list[str]:
    """The types a skops file (its bytes) would build beyond skops' own safe set.

    Reads the file's schema only; nothing in it is built. Raises :class:`UnavailableError`
    without skops and :class:`ModelLoadError` for bytes that are not a skops file.
    """
    try:
        import skops.io as sio
    except ImportError as exc:
        raise UnavailableError(
            f"checking a skops file needs skops, which is not installed ({exc}); "
            "to use it run: pip install 'inferd[sklearn]'"
        ) from exc
    try:
        return sorted(sio.get_untrusted_types(data=content))
    except Exception as exc:
        raise ModelLoadError(f"not a readable skops file: {exc}") from exc


def refused_types(untrusted: Sequence[str], operator_trusted: frozenset[str]) -> list[str]:
    """The types of ``untrusted`` that neither the operator nor the package rule allows."""
    return sorted(
        t
        for t in untrusted
        if t not in operator_trusted and t.split(".", 1)[0] not in TRUSTED_PACKAGES
    )


def _load_skops(path: Path, params: dict[str, str]) -> Any:
    try:
        import skops.io as sio
    except ImportError as exc:
        raise UnavailableError(
            f"loading {path.name} needs skops, which is not installed ({exc}); "
            "to use it run: pip install 'inferd[sklearn]'"
        ) from exc
    try:
        untrusted: list[str] = list(sio.get_untrusted_types(file=path))
    except Exception as exc:
        raise ModelLoadError(f"{path} is not a readable skops file: {exc}") from exc
    refused = refused_types(untrusted, _trusted_list(params))
    if refused:
        raise ModelLoadError(
            f"{path.name} would build types that are not trusted: {', '.join(refused)}. Only "
            f"types from {', '.join(TRUSTED_PACKAGES)} are trusted by default; if you trust "
            "these, list them in the model's 'skops_trusted_types' parameter (comma-separated)"
        )
    try:
        return sio.load(path, trusted=untrusted)
    except Exception as exc:
        raise ModelLoadError(f"skops could not load {path}: {exc}") from exc


def _load_pickle(path: Path) -> Any:
    try:
        import joblib
    except ImportError as exc:
        raise UnavailableError(
            f"loading {path.name} needs joblib ({exc}); run: pip install 'inferd[sklearn]'"
        ) from exc
    try:
        return joblib.load(path)
    except Exception as exc:
        raise ModelLoadError(f"{path} could not be unpickled: {exc}") from exc


class SklearnModel:
    """A loaded estimator, shared by the instances (scikit-learn's predict only reads it)."""

    def __init__(self, spec: ModelSpec, io: TabularIO, estimator: Any, method: str) -> None:
        self._spec = spec
        self._io = io
        self._estimator: Any = estimator
        self._method = method
        features = getattr(estimator, "n_features_in_", None)
        self._features = int(features) if features is not None else io.features

    @property
    def estimator(self) -> Any:
        return self._estimator

    def create_instance(self, group: InstanceGroupSpec, index: int) -> TabularInstance:
        if group.kind == "KIND_GPU":
            raise ModelLoadError(
                f"failed to load '{self._spec.name}': instance group '{group.name}' asks for "
                "KIND_GPU but the sklearn backend runs on the CPU; use KIND_CPU"
            )
        method = getattr(self._estimator, self._method)
        output = self._io.output

        def predict(rows: Array) -> Array:
            result = np.asarray(method(rows))
            if result.ndim == 1:
                result = result.reshape(-1, 1)
            return cast_output(result, output)

        return TabularInstance(
            self._spec.name, self._io, predict, num_features=self._features, runtime="scikit-learn"
        )

    def close(self) -> None:
        self._estimator = None


def _output_columns(estimator: Any, method: str) -> int | None:
    if method == "predict_proba":
        classes = getattr(estimator, "classes_", None)
        return len(classes) if classes is not None else None
    outputs = getattr(estimator, "n_outputs_", None)
    return int(outputs) if outputs is not None else 1


class SklearnBackend:
    name = "sklearn"
    platforms: tuple[str, ...] = ()
    default_model_filename = SKOPS_FILE

    def __init__(self, *, allow_pickle: bool = False) -> None:
        self.allow_pickle = allow_pickle

    # -- reading the file ---------------------------------------------------------------------

    def _resolve(self, version_dir: Path, filename: str) -> Path:
        path = version_dir / (filename or SKOPS_FILE)
        if path.suffix == ".onnx":
            raise ModelLoadError(
                f"{path.name} is an ONNX model: serve it with backend 'onnxruntime' (an estimator "
                "converted with skl2onnx needs no scikit-learn at serving time)"
            )
        if path.is_file():
            return path
        if filename in ("", SKOPS_FILE):
            for candidate in PICKLE_FILES:
                if (version_dir / candidate).is_file():
                    return version_dir / candidate
        raise ModelLoadError(
            f"unable to find '{path}' (the sklearn backend reads {SKOPS_FILE}, or "
            f"{' / '.join(PICKLE_FILES)} when pickle models are allowed)"
        )

    def read_estimator(self, path: Path, params: dict[str, str]) -> Any:
        """Load the estimator in ``path`` under the safety rules (see the module docstring)."""
        if path.suffix in _PICKLE_SUFFIXES:
            if not self.allow_pickle:
                raise ModelLoadError(
                    f"refusing to unpickle {path.name}: loading a pickle runs any code stored in "
                    "the file. Save the model with skops (model.skops) or convert it to ONNX, "
                    "or, if you trust this repository, start the server with "
                    "--allow-pickle-models (ServerConfig.allow_pickle_models=True)"
                )
            log.warning("unpickling %s (pickle models are allowed by the operator)", path)
            return _load_pickle(path)
        if path.suffix == ".skops":
            return _load_skops(path, params)
        raise ModelLoadError(
            f"{path.name} is not a supported scikit-learn model file; use {SKOPS_FILE}"
        )

    # -- the Backend protocol -----------------------------------------------------------------

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        """Fill input/output dims (and batching) from the estimator when they are missing."""
        if is_complete(config):
            return
        params = {key: value.string_value for key, value in config.parameters.items()}
        check_keys(params, ACCEPTED_PARAMETERS, self.name)
        version_dir = model_path if model_path.is_dir() else model_path.parent
        try:
            path = self._resolve(version_dir, config.default_model_filename)
            estimator = self.read_estimator(path, params)
        except ModelLoadError as exc:
            raise ConfigError(f"unable to auto-complete the configuration: {exc}") from exc
        method = "predict_proba" if bool_param(params, "predict_proba", False) else "predict"
        features = getattr(estimator, "n_features_in_", None)
        columns = _output_columns(estimator, method)
        if features is None or columns is None:
            raise ConfigError(
                "unable to auto-complete the configuration: the estimator does not tell its "
                "number of features or outputs; list input and output dims in config.pbtxt"
            )
        output_type = "TYPE_FP32"
        if method == "predict":
            classes = getattr(estimator, "classes_", None)
            if classes is not None:
                kind = np.asarray(classes).dtype.kind
                output_type = "TYPE_INT64" if kind in "iub" else "TYPE_STRING"
        complete_io(
            config,
            features=int(features),
            columns=columns,
            output_type=output_type,
            default_max_batch_size=default_max_batch_size,
        )

    def load(self, ctx: LoadContext) -> SklearnModel:
        spec = ctx.spec
        where = f"failed to load '{spec.name}' version {ctx.version}"
        try:
            check_keys(spec.parameters, ACCEPTED_PARAMETERS, self.name)
            io = TabularIO.from_spec(spec, self.name)
            proba = bool_param(spec.parameters, "predict_proba", False)
            path = self._resolve(ctx.version_dir, spec.default_model_filename)
            estimator = self.read_estimator(path, spec.parameters)
        except InferdError as exc:
            raise ModelLoadError(f"{where}: {exc}") from exc
        method = "predict_proba" if proba else "predict"
        if not callable(getattr(estimator, method, None)):
            raise ModelLoadError(
                f"{where}: the {type(estimator).__name__} in {path.name} has no {method}()"
                + (" (parameter 'predict_proba' is true)" if proba else "")
            )
        features = getattr(estimator, "n_features_in_", None)
        if features is not None and io.features not in (-1, int(features)):
            raise ModelLoadError(
                f"{where}: input '{io.input.name}' has {io.features} features in the "
                f"configuration but the estimator was fitted on {int(features)}"
            )
        columns = _output_columns(estimator, method)
        if columns is not None and io.columns not in (-1, columns):
            raise ModelLoadError(
                f"{where}: output '{io.output.name}' has dims [{io.columns}] in the "
                f"configuration but {method}() gives {columns} value(s) per row"
            )
        log.info(
            "model '%s': %s from %s, serving %s()",
            spec.name,
            type(estimator).__name__,
            path.name,
            method,
        )
        return SklearnModel(spec, io, estimator, method)
