"""The ``parameters`` of a ``backend: "fil"`` model, parsed once when it loads.

Keys and meanings follow Triton's FIL backend (``model_type``, ``output_class``,
``predict_proba``, ``threshold``, ``cpu_nthread``...). FIL's GPU tuning keys are accepted so
that Triton configurations load unchanged, and reported once as not applicable on the CPU.
Two keys are inferd's own: ``runtime`` (``native`` | ``onnx``) and ``thread_count``.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferd.backends.parameters import bool_param, check_keys, int_param
from inferd.backends.trees.libraries import MODEL_TYPES
from inferd.errors import ConfigError

#: Triton FIL's default file name for each ``model_type`` (PROTOCOL.md §6.1).
DEFAULT_FILES: dict[str, str] = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}

#: Used when a configuration gives no ``model_type`` and its file name does not tell (FIL's own).
DEFAULT_MODEL_TYPE = "xgboost"

_BY_SUFFIX = {
    ".json": "xgboost_json",
    ".ubj": "xgboost_ubj",
    ".model": "xgboost",
    ".txt": "lightgbm",
    ".tl": "treelite_checkpoint",
}

#: The runtime each model type uses unless ``runtime`` says otherwise: the faster one measured
#: by ``bench/trees.py`` at batch sizes 1 and 64 (ONNX Runtime's tree ensemble operator beat the
#: libraries' own predict for XGBoost and LightGBM; Treelite has no ONNX converter).
DEFAULT_RUNTIME: dict[str, str] = {
    "xgboost": "onnx",
    "xgboost_json": "onnx",
    "xgboost_ubj": "onnx",
    "lightgbm": "onnx",
    "treelite_checkpoint": "native",
}

RUNTIMES = ("native", "onnx")

#: FIL parameters that only tune its GPU kernels (or FIL's own CPU engine): accepted, not used.
NOT_APPLICABLE = (
    "algo",
    "storage_type",
    "threads_per_tree",
    "blocks_per_sm",
    "use_experimental_optimizations",
    "transfer_threshold",
    "xgboost_allow_unknown_field",
)

ACCEPTED = (
    "model_type",
    "output_class",
    "predict_proba",
    "threshold",
    "runtime",
    "cpu_nthread",
    "thread_count",
    *NOT_APPLICABLE,
)


@dataclass(frozen=True, slots=True)
class TreeSettings:
    model_type: str
    filename: str
    output_class: bool | None  # None: decided by the model (a classifier -> true)
    predict_proba: bool
    threshold: float
    runtime: str | None  # None: DEFAULT_RUNTIME[model_type]
    threads: int | None  # None: share the cores among instances
    not_applicable: tuple[str, ...]

    @property
    def chosen_runtime(self) -> str:
        return self.runtime or DEFAULT_RUNTIME[self.model_type]


def model_type_for(params: dict[str, str], filename: str) -> str:
    raw = params.get("model_type")
    if raw is not None:
        value = raw.strip()
        if value not in MODEL_TYPES:
            raise ConfigError(
                f"parameter 'model_type' must be one of {', '.join(MODEL_TYPES)}, got '{raw}'"
            )
        return value
    for suffix, model_type in _BY_SUFFIX.items():
        if filename.endswith(suffix):
            return model_type
    return DEFAULT_MODEL_TYPE


def parse_settings(params: dict[str, str], default_model_filename: str) -> TreeSettings:
    """Read the FIL parameters; raise :class:`ConfigError` on an unknown key or a bad value."""
    check_keys(params, ACCEPTED, "fil")
    model_type = model_type_for(params, default_model_filename)
    threshold = 0.5
    raw_threshold = params.get("threshold")
    if raw_threshold is not None:
        try:
            threshold = float(raw_threshold.strip())
        except ValueError:
            threshold = -1.0
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(
                f"parameter 'threshold' must be a number between 0 and 1, got '{raw_threshold}'"
            )
    runtime = params.get("runtime")
    if runtime is not None:
        runtime = runtime.strip().lower()
        if runtime not in RUNTIMES:
            raise ConfigError(
                f"parameter 'runtime' must be one of {', '.join(RUNTIMES)}, got '{runtime}'"
            )
        if runtime == "onnx" and model_type == "treelite_checkpoint":
            raise ConfigError(
                "parameter 'runtime' is 'onnx' but Treelite checkpoints can only run natively"
            )
    threads = int_param(params, "thread_count", minimum=1)
    if threads is None:
        threads = int_param(params, "cpu_nthread", minimum=-1)  # FIL: <= 0 means all
    output_class = bool_param(params, "output_class", None)
    predict_proba = bool(bool_param(params, "predict_proba", False))
    if predict_proba and output_class is False:
        raise ConfigError(
            "parameter 'predict_proba' is true but 'output_class' is false: class "
            "probabilities need a classifier"
        )
    return TreeSettings(
        model_type=model_type,
        filename=default_model_filename or DEFAULT_FILES[model_type],
        output_class=output_class,
        predict_proba=predict_proba,
        threshold=threshold,
        runtime=runtime,
        threads=threads if threads is not None and threads > 0 else None,
        not_applicable=tuple(k for k in NOT_APPLICABLE if k in params),
    )
