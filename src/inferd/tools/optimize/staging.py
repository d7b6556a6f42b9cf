"""A candidate laid out as a served model: its files in a version folder and a ``config.pbtxt``
made from the baseline's, so it is measured, checked and finally served the same way."""

from __future__ import annotations

import shutil
from pathlib import Path

from inferd.codecs.model_config import ModelConfig
from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import ONNX_PLATFORM, OPENVINO_PLATFORM, Candidate

TORCH_PLATFORM = "pytorch_libtorch"

__all__ = [
    "TORCH_PLATFORM",
    "candidate_config",
    "copy_model_files",
    "copy_sidecars",
    "model_filename",
    "platform_of",
    "stage",
]


def model_filename(candidate: Candidate) -> str:
    """The file name the candidate's runtime loads by default."""
    if candidate.platform == OPENVINO_PLATFORM:
        return "model.xml"
    if candidate.platform == ONNX_PLATFORM:
        return "model.onnx"
    if candidate.platform == TORCH_PLATFORM:
        return "model.pt"
    raise InvalidArgumentError(
        f"candidate '{candidate.name}': unknown platform {candidate.platform}"
    )


def platform_of(config: ModelConfig | ModelSpec) -> str:
    """The runtime a config (or a loaded model's spec) names, in the words candidates use:
    ``onnxruntime_onnx``, ``openvino``, ``pytorch_libtorch``, or the name the config gives."""
    if config.backend == "openvino":
        return OPENVINO_PLATFORM
    if config.platform == ONNX_PLATFORM or config.backend == "onnxruntime":
        return ONNX_PLATFORM
    if config.platform == TORCH_PLATFORM or config.backend == "pytorch":
        return TORCH_PLATFORM
    return str(config.platform or config.backend)


def candidate_config(baseline: ModelConfig, candidate: Candidate, name: str) -> ModelConfig:
    """The baseline's config with the candidate's runtime, file and parameters.

    Inputs, outputs, batching, instances and version policy carry over. When the runtime
    changes (a TorchScript model exported to ONNX, an ONNX model run by OpenVINO), the old
    runtime's parameters and file name are dropped, since the new runtime would refuse them.
    """
    config = ModelConfig()
    config.CopyFrom(baseline)
    config.name = name
    if platform_of(baseline) != candidate.platform:
        config.ClearField("parameters")
        config.ClearField("default_model_filename")
        config.ClearField("optimization")
    if candidate.platform == OPENVINO_PLATFORM:
        config.platform = ""
        config.backend = "openvino"
    elif candidate.platform == TORCH_PLATFORM:
        config.platform = TORCH_PLATFORM
        config.backend = ""
    else:
        config.platform = ONNX_PLATFORM
        config.backend = ""
    config.ClearField("default_model_filename")
    for key, value in candidate.parameters.items():
        config.parameters[key].string_value = value
    return config


def _external_files(path: Path) -> list[Path]:
    """The files an ONNX model keeps its large tensors in (beside it), if any."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    names = {ExternalDataInfo(t).location for t in model.graph.initializer if uses_external_data(t)}
    return [path.parent / name for name in sorted(names)]


def copy_model_files(candidate: Candidate, version_dir: Path) -> Path:
    """Copy the candidate's model file (renamed to its runtime's default) and the files it
    needs (ONNX external data, OpenVINO's ``.bin``) into ``version_dir``; the model file."""
    version_dir.mkdir(parents=True, exist_ok=True)
    source = candidate.path
    target = version_dir / model_filename(candidate)
    shutil.copy2(source, target)
    if candidate.platform == OPENVINO_PLATFORM:
        weights = source.with_suffix(".bin")
        if weights.is_file():
            shutil.copy2(weights, target.with_suffix(".bin"))
    elif candidate.platform == ONNX_PLATFORM:
        for extra in _external_files(source):
            shutil.copy2(extra, version_dir / extra.name)
    return target


def copy_sidecars(config: ModelConfig, baseline_dir: Path, model_dir: Path) -> None:
    """The files the config names beside the model: label files and warm-up data."""
    for tensor in config.output:
        if tensor.label_filename:
            source = baseline_dir / tensor.label_filename
            if source.is_file():
                shutil.copy2(source, model_dir / tensor.label_filename)
    warmup = baseline_dir / "warmup"
    if config.model_warmup and warmup.is_dir() and not (model_dir / "warmup").exists():
        shutil.copytree(warmup, model_dir / "warmup")


def stage(
    candidate: Candidate,
    baseline: ModelConfig,
    repository: Path,
    name: str,
    *,
    baseline_dir: Path | None = None,
    version: int = 1,
) -> Path:
    """Write ``repository/name/version/`` and ``repository/name/config.pbtxt`` (with the
    baseline's label and warm-up files); the model dir."""
    from google.protobuf import text_format

    model_dir = repository / name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    copy_model_files(candidate, model_dir / str(version))
    if baseline_dir is not None:
        copy_sidecars(baseline, baseline_dir, model_dir)
    config = candidate_config(baseline, candidate, name)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config), encoding="utf-8")
    return model_dir
