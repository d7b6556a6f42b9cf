"""``sequence_batching`` parsed into its typed view, with Triton's checks and messages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.sequence_spec import ControlKind, execution_spec
from inferd.errors import ConfigError
from inferd.scheduling.state import ControlFiller, StateStore, initial_value

BASE = """
name: "seq" max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

FULL = """
sequence_batching {
  oldest { max_candidate_sequences: 8 preferred_batch_size: [ 4, 2 ] }
  control_input [
    { name: "S" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ -1, 1 ] } ] },
    { name: "E" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
    { name: "R" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 7 ] } ] },
    { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
  state [ { input_name: "SI" output_name: "SO" data_type: TYPE_FP32 dims: [ -1, 2 ]
            initial_state { name: "f" data_type: TYPE_FP32 dims: [ 3, 2 ] data_file: "init" } } ]
}
"""


def _spec(text: str) -> object:
    return spec_from_proto(parse_pbtxt(BASE + text, "seq/config.pbtxt"))


def test_every_control_kind_and_state_are_read(tmp_path: Path) -> None:
    spec = _spec(FULL)
    seq = spec.sequence_batching  # type: ignore[attr-defined]
    assert seq.strategy == "oldest"
    assert seq.max_candidate_sequences == 8
    assert seq.preferred_batch_sizes == (2, 4)
    kinds = [c.kind for c in seq.controls]
    assert kinds == [ControlKind.START, ControlKind.END, ControlKind.READY, ControlKind.CORRID]
    executed = execution_spec(spec)  # type: ignore[arg-type]
    assert [t.name for t in executed.inputs] == ["INPUT", "S", "E", "R", "C", "SI"]
    assert [t.name for t in executed.outputs] == ["OUTPUT", "SO"]
    filler = ControlFiller(seq, "seq", batched=True)
    tensors = filler.fill("42", start=True, end=False)
    assert tensors["S"].tolist() == [[1.0]]
    assert tensors["E"].tolist() == [[False]]
    assert tensors["R"].tolist() == [[7]]
    assert tensors["C"].tolist() == [[b"42"]]
    (tmp_path / "initial_state").mkdir()
    data = np.arange(6, dtype=np.float32)
    (tmp_path / "initial_state" / "init").write_bytes(data.tobytes())
    assert initial_value(seq.states[0], tmp_path, batched=True).shape == (1, 3, 2)
    store = StateStore(seq, "seq", tmp_path, batched=True)
    assert store.inputs_for("a", start=True)["SI"].ravel().tolist() == data.tolist()
    store.update("a", {"SO": np.ones((1, 1, 2), np.float32)})
    assert store.inputs_for("a", start=False)["SI"].shape == (1, 1, 2)
    assert store.inputs_for("a", start=True)["SI"].shape == (1, 3, 2)  # a restart


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START } ] } ]',
            "must specify either 'int32_false_true'",
        ),
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
            "int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ] } ] } ]",
            "specifies more than one from",
        ),
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_END '
            "int32_false_true: [ 1 ] } ] } ]",
            "'int32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_END",
        ),
        (
            'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
            "data_type: TYPE_FP32 } ] } ]",
            "must have a data_type of",
        ),
        (
            'control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_START '
            'int32_false_true: [ 0, 1 ] } ] }, { name: "B" control [ { kind: '
            "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]",
            "specifies multiple CONTROL_SEQUENCE_START tensors",
        ),
        (
            'control_input [ { name: "INPUT" control [ { kind: CONTROL_SEQUENCE_START '
            "int32_false_true: [ 0, 1 ] } ] } ]",
            "also listed as a model input",
        ),
        (
            'state [ { input_name: "i" output_name: "o" data_type: TYPE_FP32 dims: [ 2 ] '
            'initial_state { name: "z" data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } ]',
            "does not match the state data type",
        ),
        (
            'state [ { input_name: "i" output_name: "o" data_type: TYPE_FP32 dims: [ 2 ] '
            'initial_state { name: "z" data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } ]',
            "doesn't match 'state' dim description. 3 != 2",
        ),
        (
            'state [ { input_name: "i" output_name: "o" data_type: TYPE_FP32 dims: [ 2 ] '
            "initial_state { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } ]",
            "Field 'name' must be set",
        ),
        ("direct { minimum_slot_utilization: 1.5 }", "must be in \\[0, 1\\]"),
    ],
)
def test_bad_sections_are_refused_with_a_reason(section: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _spec(f"sequence_batching {{ {section} }}")


def test_initial_state_file_must_stay_in_its_folder(tmp_path: Path) -> None:
    spec = _spec(FULL.replace('data_file: "init"', 'data_file: "../config.pbtxt"'))
    seq = spec.sequence_batching  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="must name a file inside"):
        initial_value(seq.states[0], tmp_path, batched=False)
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "short").write_bytes(b"\0" * 8)
    short = _spec(FULL.replace('data_file: "init"', 'data_file: "short"'))
    with pytest.raises(ConfigError, match="expects 24 bytes, but the data provided"):
        initial_value(short.sequence_batching.states[0], tmp_path, batched=False)  # type: ignore[attr-defined]
