"""Shared pieces of the example builders: errors, results, file and check helpers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from inferd.errors import InternalError

#: ONNX operator set of the default domain. 17 is served by every onnxruntime since 1.13.
OPSET = 17
#: IR version matching opset 17; newer onnx packages would otherwise stamp a version that older
#: onnxruntime releases refuse to load.
IR_VERSION = 8
#: Identifies our files in ONNX metadata. No version number on purpose: rebuilding with a newer
#: inferd must not change the bytes of an unchanged model.
PRODUCER = "inferd.examples"

#: Seed of the train/test split and of the classifier, so that rebuilds give the same model.
DIGITS_SEED = 0
#: Share of the 1797 digit images held out to measure accuracy.
DIGITS_TEST_SIZE = 0.25
#: The build fails if the exported classifier scores below this on the held-out images.
DIGITS_MIN_ACCURACY = 0.9


class ExampleBuildError(InternalError):
    """A freshly built example model gave a wrong answer, or could not be built at all."""


class ExampleSkipped(Exception):
    """A builder's optional runtime is not installed; the build goes on without that model."""


@dataclass(frozen=True)
class Built:
    """What a model builder reports back: the files it wrote and a line worth printing."""

    name: str
    note: str = ""


# --------------------------------------------------------------------------------------------
# helpers


def finish_model(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        producer_name=PRODUCER,
        doc_string=doc,
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def write_file(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)


def cpu_session(model_file: Path) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only; keep the build output readable
    return ort.InferenceSession(
        str(model_file), sess_options=options, providers=["CPUExecutionProvider"]
    )


def expect_equal(model: str, what: str, got: np.ndarray[Any, Any], want: Any) -> None:
    want_array = np.asarray(want)
    if got.shape != want_array.shape or not np.array_equal(got, want_array):
        raise ExampleBuildError(
            f"example model '{model}' failed its self-check on {what}: "
            f"expected {want_array.tolist()!r}, got {got.tolist()!r}"
        )


# --------------------------------------------------------------------------------------------
# simple, simple_int8, simple_string: two vectors in, their sum and difference out
