"""A sequence model's warm-up samples: the control and state inputs a sample leaves out are
filled as a whole one-request sequence per row, listed ones are kept, unknown names refused; and
the controls of a padding row (an idle slot of the direct strategy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import ConfigError
from inferd.repository.warmup import sequence_fill, warm_up
from inferd.scheduling.state import ControlFiller

MODEL = """
name: "seq" max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "S" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ -1, 1 ] } ] },
    { name: "E" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "R" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 7 ] } ] },
    { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
  state [ { input_name: "SI" output_name: "SO" data_type: TYPE_FP32 dims: [ 2 ]
            initial_state { name: "f" data_type: TYPE_FP32 dims: [ 2 ] data_file: "init" } } ]
}
"""

WARMUP = """
model_warmup [ { name: "w" batch_size: 3 count: 2
  inputs { key: "INPUT" value: { data_type: TYPE_INT32 dims: [ 1 ] random_data: true } }
  %s
} ]
"""


def _spec(corrid: str = "TYPE_UINT64", extra: str = "", batch: int = 4) -> ModelSpec:
    text = MODEL.replace("max_batch_size: 4", f"max_batch_size: {batch}") % corrid
    return spec_from_proto(parse_pbtxt(text + WARMUP % extra, "seq/config.pbtxt"))


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "init").write_bytes(np.array([2, 3], np.float32).tobytes())
    return tmp_path


class _Recorder:
    """An instance that records the requests it runs and answers each with its state output."""

    def __init__(self) -> None:
        self.batches: list[list[InferRequest]] = []

    def execute(self, requests: list[InferRequest]) -> list[Any]:
        self.batches.append(requests)
        return [{"OUTPUT": r.inputs["INPUT"], "SO": r.inputs["SI"]} for r in requests]

    def close(self) -> None:
        pass


def test_left_out_controls_and_state_make_whole_sequences(model_dir: Path) -> None:
    spec = _spec()
    filled = sequence_fill(spec, ["INPUT"], 3, model_dir)
    assert sorted(filled) == ["C", "E", "R", "S", "SI"]
    assert filled["S"].tolist() == [[1.0]] * 3
    assert filled["S"].dtype == np.float32
    assert filled["E"].tolist() == [[1]] * 3
    assert filled["R"].tolist() == [[7]] * 3  # the configured true value
    assert filled["C"].tolist() == [[1], [2], [3]]
    assert filled["C"].dtype == np.uint64
    assert filled["SI"].tolist() == [[2.0, 3.0]] * 3  # the initial state, one per row
    text = sequence_fill(_spec("TYPE_STRING"), ["INPUT"], 2, model_dir)
    assert text["C"].tolist() == [[b"1"], [b"2"]]
    unbatched = sequence_fill(_spec(batch=0), ["INPUT"], 1, model_dir)
    assert unbatched["S"].shape == (1,)
    assert unbatched["SI"].shape == (2,)


def test_listed_controls_are_kept_as_the_sample_gives_them(model_dir: Path) -> None:
    listed = 'inputs { key: "S" value: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } }'
    spec = _spec(extra=listed)
    recorder = _Recorder()
    warm_up(spec, [recorder], model_dir)  # type: ignore[list-item]
    assert len(recorder.batches) == 2  # count: 2
    (request,) = recorder.batches[0]
    assert request.inputs["S"].tolist() == [[0.0]] * 3  # as listed (Triton's way)
    assert request.inputs["R"].tolist() == [[7]] * 3
    assert request.inputs["INPUT"].shape == (3, 1)
    assert request.inputs["SI"].tolist() == [[2.0, 3.0]] * 3


def test_a_name_the_model_does_not_have_is_refused(model_dir: Path) -> None:
    unknown = 'inputs { key: "START" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }'
    with pytest.raises(ConfigError, match="gives input 'START', which the model does not have"):
        warm_up(_spec(extra=unknown), [_Recorder()], model_dir)  # type: ignore[list-item]


def test_other_models_get_nothing_added(model_dir: Path) -> None:
    spec = spec_from_proto(
        parse_pbtxt(
            'name: "m" max_batch_size: 2 input [ { name: "INPUT" data_type: TYPE_INT32 '
            'dims: [ 1 ] } ] output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]',
            "m/config.pbtxt",
        )
    )
    assert sequence_fill(spec, ["INPUT"], 2, model_dir) == {}


@pytest.mark.parametrize(("corrid", "zero"), [("TYPE_UINT64", 0), ("TYPE_STRING", b"")])
def test_a_padding_row_is_not_ready(corrid: str, zero: object) -> None:
    seq = _spec(corrid).sequence_batching
    assert seq is not None
    idle = ControlFiller(seq, "seq", batched=True).idle()
    assert idle["S"].tolist() == [[-1.0]]  # the configured false value
    assert idle["E"].tolist() == [[0]]
    assert idle["R"].tolist() == [[0]]
    assert idle["C"].tolist() == [[zero]]


def test_a_sample_of_batch_size_0_is_skipped_with_a_warning(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = MODEL % "TYPE_UINT64" + WARMUP.replace("batch_size: 3", "batch_size: 0") % ""
    spec = spec_from_proto(parse_pbtxt(text, "seq/config.pbtxt"))
    recorder = _Recorder()
    with caplog.at_level("WARNING", logger="inferd.repository"):
        warm_up(spec, [recorder], model_dir)  # type: ignore[list-item]
    assert recorder.batches == []  # as Triton: "Skipping batch 0 warmup sample"
    assert "has batch_size 0 and is skipped" in caplog.text
