"""The OpenVINO backend (CPU): OpenVINO IR and ONNX files, selectable per model."""

from inferd.backends.openvino.backend import OpenVinoBackend, OpenVinoInstance, OpenVinoModel
from inferd.backends.openvino.settings import CompileSettings, parse_settings

__all__ = [
    "CompileSettings",
    "OpenVinoBackend",
    "OpenVinoInstance",
    "OpenVinoModel",
    "parse_settings",
]
