"""``backend: "fil"``: XGBoost, LightGBM and Treelite tree ensembles on the CPU.

Configuration compatible with Triton's FIL backend: one FP32 input (``input__0``,
``[features]``) and one output (``output__0``) whose columns depend on the parameters:

============================  ==========================================================
``output_class`` false        the model's prediction: the value of a regressor, ``p`` of
                              a binary classifier, the class probabilities otherwise
``output_class`` true         the class index (binary: ``p > threshold``)
... and ``predict_proba``     one probability per class; a binary model gives
                              ``[1 - p, p]`` (or ``p`` alone when the output has dims [1])
============================  ==========================================================

The model runs either with the library's own predict or converted to ONNX and run with ONNX
Runtime (``runtime`` parameter; the default per model type is the faster one measured in
``bench/trees.py``). A conversion is checked against the library on probe rows when the model
loads; if the default runtime cannot be used the model falls back to the native one (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import LoadContext
from inferd.backends.tabular import (
    Array,
    TabularInstance,
    TabularIO,
    cast_output,
    complete_io,
    instance_threads,
    is_complete,
)
from inferd.backends.trees.libraries import Scorer, TreeFile, load_tree_file, onnx_scorer
from inferd.backends.trees.settings import DEFAULT_FILES, TreeSettings, parse_settings
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import ConfigError, InferdError, ModelLoadError

log = logging.getLogger(__name__)

Postprocess = Callable[[Array], Array]

_PROBE_ROWS = 64


def _postprocess(tree: TreeFile, settings: TreeSettings, columns: int) -> tuple[Postprocess, int]:
    """The function from scores to the output, and the number of output columns it gives."""
    output_class = settings.output_class if settings.output_class is not None else tree.classes > 0
    if tree.classes == 0 and output_class:
        raise ConfigError(
            f"parameter 'output_class' is true but the model is a regressor "
            f"(objective '{tree.kind}')"
        )
    if settings.predict_proba:
        if tree.classes == 0:
            raise ConfigError(
                f"parameter 'predict_proba' is true but the model is a regressor "
                f"(objective '{tree.kind}')"
            )
        if tree.classes == 2 and columns == 1:
            return (lambda s: s[:, 1:2]), 1
        return (lambda s: s), tree.classes
    if output_class:
        if tree.classes == 2:
            threshold = settings.threshold
            return (lambda s: (s[:, 1:2] > threshold).astype(np.float32)), 1
        return (lambda s: np.argmax(s, axis=1).reshape(-1, 1).astype(np.float32)), 1
    if tree.classes == 2:
        return (lambda s: s[:, 1:2]), 1
    return (lambda s: s), tree.columns


def _check_io(spec: ModelSpec, io: TabularIO, tree: TreeFile, columns: int) -> None:
    if io.input.datatype.name != "FP32":
        raise ConfigError(
            f"input '{io.input.name}' must be TYPE_FP32 (tree models take float32 features), "
            f"got {io.input.datatype.config_name}"
        )
    if io.features not in (-1, tree.features):
        raise ConfigError(
            f"input '{io.input.name}' has {io.features} features in the configuration but the "
            f"model was trained on {tree.features}"
        )
    if io.columns not in (-1, columns):
        raise ConfigError(
            f"output '{io.output.name}' has dims [{io.columns}] in the configuration but the "
            f"model gives {columns} value(s) per row with these parameters"
        )
    if io.output.datatype.is_bytes:
        raise ConfigError(f"output '{io.output.name}' must be numeric, not TYPE_STRING")


def _verified_onnx(tree: TreeFile) -> bytes:
    """Convert the model and check the conversion against the library on probe rows."""
    model = tree.to_onnx()
    rng = np.random.default_rng(0)
    probe = np.concatenate(
        [
            np.zeros((1, tree.features), dtype=np.float32),
            rng.normal(0.0, 3.0, size=(_PROBE_ROWS, tree.features)).astype(np.float32),
        ]
    )
    want = tree.native_scorer(1)(probe)
    got = onnx_scorer(tree, model, 1)(probe)
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-3, atol=1e-4):
        worst = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("nan")
        raise ModelLoadError(
            f"the ONNX conversion disagrees with {tree.model_type} (shapes {got.shape} and "
            f"{want.shape}, largest difference {worst})"
        )
    return model


class TreeModel:
    """A loaded tree model; each instance gets its own scorer and thread budget."""

    def __init__(
        self,
        spec: ModelSpec,
        io: TabularIO,
        tree: TreeFile,
        settings: TreeSettings,
        post: Postprocess,
        onnx_model: bytes | None,
    ) -> None:
        self._spec = spec
        self._io = io
        self._tree = tree
        self._settings = settings
        self._post = post
        self._onnx = onnx_model

    @property
    def runtime(self) -> str:
        """The runtime the instances use: ``onnx`` or ``native``."""
        return "onnx" if self._onnx is not None else "native"

    def scorer(self, threads: int) -> Scorer:
        if self._onnx is not None:
            return onnx_scorer(self._tree, self._onnx, threads)
        return self._tree.native_scorer(threads)

    def create_instance(self, group: InstanceGroupSpec, index: int) -> TabularInstance:
        if group.kind == "KIND_GPU":
            raise ModelLoadError(
                f"failed to load '{self._spec.name}': instance group '{group.name}' asks for "
                "KIND_GPU but the fil backend of inferd runs on the CPU; use KIND_CPU"
            )
        threads = instance_threads(self._spec, self._settings.threads)
        scorer = self.scorer(threads)
        post, output = self._post, self._io.output

        def predict(rows: Array) -> Array:
            return cast_output(post(scorer(rows)), output)

        runtime = "onnxruntime" if self._onnx is not None else self._tree.model_type.split("_")[0]
        return TabularInstance(
            self._spec.name, self._io, predict, num_features=self._tree.features, runtime=runtime
        )

    def close(self) -> None:
        self._onnx = None


def _params(config: Any) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


class TreeBackend:
    name = "fil"
    platforms: tuple[str, ...] = ()
    #: Depends on ``model_type``; resolved in :meth:`auto_complete` and :meth:`load`.
    default_model_filename = ""

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        """Name the model file from ``model_type``; fill input/output dims from the model."""
        settings = parse_settings(_params(config), config.default_model_filename)
        if not config.default_model_filename:
            config.default_model_filename = settings.filename
        if is_complete(config):
            return
        path = model_path if model_path.is_file() else model_path / settings.filename
        if not path.is_file():
            raise ConfigError(f"unable to auto-complete the configuration: {path} does not exist")
        try:
            tree = load_tree_file(path, settings.model_type)
        except InferdError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"unable to auto-complete the configuration from {path}: {exc}"
            ) from exc
        declared = config.output[0].dims[-1] if len(config.output) and config.output[0].dims else 0
        _, columns = _postprocess(tree, settings, declared)
        complete_io(
            config,
            features=tree.features,
            columns=columns,
            default_max_batch_size=default_max_batch_size,
        )

    def load(self, ctx: LoadContext) -> TreeModel:
        spec = ctx.spec
        where = f"failed to load '{spec.name}' version {ctx.version}"
        try:
            settings = parse_settings(spec.parameters, spec.default_model_filename)
            io = TabularIO.from_spec(spec, self.name)
        except ConfigError as exc:
            raise ModelLoadError(f"{where}: {exc}") from exc
        path = ctx.version_dir / settings.filename
        if not path.is_file():
            raise ModelLoadError(
                f"{where}: unable to find '{path}' (model_type '{settings.model_type}'; the "
                f"default file name is '{DEFAULT_FILES[settings.model_type]}', "
                "default_model_filename changes it)"
            )
        try:
            tree = load_tree_file(path, settings.model_type)
        except InferdError as exc:
            raise ModelLoadError(f"{where}: {exc}") from exc
        except Exception as exc:
            raise ModelLoadError(
                f"{where}: {path} is not a readable {settings.model_type} model: {exc}"
            ) from exc
        try:
            post, columns = _postprocess(tree, settings, io.columns)
            _check_io(spec, io, tree, columns)
        except ConfigError as exc:
            raise ModelLoadError(f"{where}: {exc}") from exc
        if settings.not_applicable:
            log.info(
                "model '%s': FIL parameter(s) %s tune FIL's own engine and do not apply to "
                "inferd's CPU runtimes; ignored",
                spec.name,
                ", ".join(settings.not_applicable),
            )
        onnx_model: bytes | None = None
        if settings.chosen_runtime == "onnx":
            try:
                onnx_model = _verified_onnx(tree)
            except Exception as exc:
                if settings.runtime == "onnx":
                    raise ModelLoadError(
                        f"{where}: parameter 'runtime' is 'onnx' but the model cannot be "
                        f"converted: {exc}"
                    ) from exc
                log.warning(
                    "model '%s': cannot run on ONNX Runtime (%s); using the native %s runtime",
                    spec.name,
                    exc,
                    settings.model_type,
                )
        log.info(
            "model '%s': %s %s with %d features, %s, on the %s runtime, %d thread(s) per "
            "instance (%s)",
            spec.name,
            settings.model_type,
            tree.kind or "model",
            tree.features,
            f"{tree.classes} classes" if tree.classes else "regression",
            "onnx" if onnx_model is not None else "native",
            instance_threads(spec, settings.threads),
            "configured" if settings.threads else "the cores shared by the instances",
        )
        return TreeModel(spec, io, tree, settings, post, onnx_model)
