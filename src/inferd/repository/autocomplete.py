"""Fill what a partial (or missing) model configuration leaves out (PROTOCOL.md §5.7).

First the core step: find the backend, platform and model file name from the files in a version
directory. Then, when auto-complete is enabled, the backend completes inputs, outputs and
batching from the model file itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from inferd.backends.registry import BackendRegistry
from inferd.codecs.model_config import ModelConfig
from inferd.errors import ConfigError
from inferd.repository.paths import model_file_inside

ENSEMBLE_PLATFORM = "ensemble"


@dataclass(frozen=True, slots=True)
class _Detected:
    filename: str
    backend: str
    platform: str
    want_dir: bool | None  # True: directory only, False: file only, None: either


# Checked in this order; the first file found decides.
_DETECTION: tuple[_Detected, ...] = (
    _Detected("model.savedmodel", "tensorflow", "tensorflow_savedmodel", True),
    _Detected("model.graphdef", "tensorflow", "tensorflow_graphdef", False),
    _Detected("model.plan", "tensorrt", "tensorrt_plan", False),
    _Detected("model.onnx", "onnxruntime", "onnxruntime_onnx", None),
    _Detected("model.xml", "openvino", "", None),
    _Detected("model.pt", "pytorch", "pytorch_libtorch", False),
    _Detected("model.pt2", "pytorch", "torch_export", False),
    _Detected("model.py", "python", "", None),
    # not detected by Triton; inferd's tree and scikit-learn backends (FIL default file names)
    _Detected("xgboost.ubj", "fil", "", False),
    _Detected("xgboost.json", "fil", "", False),
    _Detected("xgboost.model", "fil", "", False),
    _Detected("checkpoint.tl", "fil", "", False),
    _Detected("model.skops", "sklearn", "", False),
)

# platform -> backend, for configs that name only a platform.
_PLATFORM_BACKEND = {d.platform: d.backend for d in _DETECTION if d.platform}
# backend -> platform, only where the backend has a single platform.
_BACKEND_PLATFORM = {"onnxruntime": "onnxruntime_onnx", "tensorrt": "tensorrt_plan"}


def _detect(version_dir: Path) -> _Detected | None:
    for candidate in _DETECTION:
        path = version_dir / candidate.filename
        if not path.exists():
            continue
        if candidate.want_dir is True and not path.is_dir():
            continue
        if candidate.want_dir is False and not path.is_file():
            continue
        return candidate
    return None


def _fill_backend_fields(
    config: ModelConfig, version_dir: Path | None, registry: BackendRegistry
) -> None:
    if config.platform == ENSEMBLE_PLATFORM:
        return
    if not config.backend and not config.platform and version_dir is not None:
        detected = _detect(version_dir)
        if detected is not None:
            config.backend = detected.backend
            config.platform = detected.platform
            if not config.default_model_filename:
                config.default_model_filename = detected.filename
    if config.platform and not config.backend:
        known = _PLATFORM_BACKEND.get(config.platform)
        config.backend = known or registry.backend_name_for_platform(config.platform) or ""
    if config.backend and not config.platform:
        config.platform = _BACKEND_PLATFORM.get(config.backend, "")
    if config.backend and config.platform:
        expected = _BACKEND_PLATFORM.get(config.backend)
        if expected is not None and config.platform != expected:
            raise ConfigError(
                f"backend '{config.backend}' does not accept platform '{config.platform}' "
                f"(expected '{expected}')"
            )


def complete_config(
    config: ModelConfig,
    model_dir: Path,
    versions: list[int],
    registry: BackendRegistry,
    *,
    auto_complete: bool,
    default_max_batch_size: int = 4,
    vet: Callable[[ModelConfig], None] | None = None,
) -> None:
    """Complete ``config`` (a ``ModelConfig`` message) in place.

    The backend fields are always filled when a model file identifies them (Triton does this
    even with auto-complete disabled); the backend's own completion runs only when
    ``auto_complete`` is true. The latest version directory is the one examined; its model file
    must lie inside it (a symlink out is refused). ``vet`` sees the config once the files have
    named its backend, before that backend is built or opens any file. Raises
    :class:`ConfigError` when no backend can be found or the backend is not available.
    """
    version_dir = model_dir / str(max(versions)) if versions else None
    _fill_backend_fields(config, version_dir, registry)
    if vet is not None:
        vet(config)
    if config.platform == ENSEMBLE_PLATFORM:
        return
    if not config.backend and not config.platform:
        where = f"in {version_dir}" if version_dir is not None else f"under {model_dir}"
        raise ConfigError(
            f"unable to determine the backend for model '{config.name or model_dir.name}': the "
            f"configuration names no backend or platform and no known model file was found "
            f"{where}; available backends: {', '.join(registry.names()) or '(none)'}"
        )
    backend = registry.for_config(config)
    if not config.backend:
        config.backend = backend.name
    if not config.default_model_filename and backend.default_model_filename:
        config.default_model_filename = backend.default_model_filename
    if auto_complete and version_dir is not None:
        model_path = (
            model_file_inside(
                version_dir,
                config.default_model_filename,
                f"model '{config.name or model_dir.name}': default_model_filename",
            )
            if config.default_model_filename
            else version_dir
        )
        backend.auto_complete(config, model_path, default_max_batch_size=default_max_batch_size)
