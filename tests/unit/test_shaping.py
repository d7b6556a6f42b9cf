"""Shaping raw outputs into what a request asked for (``inferd.core.shaping``): the one rule
the engine, in-process calls, streams and runtimes share."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.classification import classify
from inferd.core.inference import InferRequest, RequestedOutput
from inferd.core.model_spec import ModelSpec
from inferd.core.shaping import requested_names, shape_outputs, union_outputs
from inferd.errors import InvalidArgumentError

CONFIG = """
name: "m"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [
  { name: "A" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 3 ] }
]
"""
RAW = {
    "B": np.array([[3.0, 1.0, 2.0]], dtype=np.float32),
    "A": np.array([[0.5, 0.25, 0.75]], dtype=np.float32),
}


def _spec() -> ModelSpec:
    return spec_from_proto(parse_pbtxt(CONFIG, "config.pbtxt"))


def _request(*outputs: RequestedOutput) -> InferRequest:
    return InferRequest("m", {}, outputs=list(outputs) or None)


def test_no_named_output_answers_every_configured_one_in_model_order() -> None:
    shaped = shape_outputs(_request(), _spec(), {**RAW, "EXTRA": RAW["A"]})
    assert list(shaped) == ["A", "B"]
    assert shaped["A"] is RAW["A"]  # no copy


def test_named_outputs_come_in_the_request_order_and_classified_as_asked() -> None:
    raw: dict[str, Any] = dict(RAW)
    shaped = shape_outputs(
        _request(RequestedOutput("B", classification=2), RequestedOutput("A")),
        _spec(),
        raw,
        {"B": ["x", "y", "z"]},
    )
    assert list(shaped) == ["B", "A"]
    np.testing.assert_array_equal(shaped["B"], [[b"3.000000:0:x", b"2.000000:2:z"]])
    # the raw outputs are left as they were
    assert all(raw[name] is RAW[name] for name in RAW)
    assert raw["B"].dtype == np.float32


def test_a_named_output_the_model_did_not_produce_is_refused_unless_lenient() -> None:
    request = _request(RequestedOutput("A"), RequestedOutput("B"))
    only_a = {"A": RAW["A"]}
    with pytest.raises(InvalidArgumentError, match="did not produce requested output 'B'"):
        shape_outputs(request, _spec(), only_a)
    assert list(shape_outputs(request, _spec(), only_a, strict=False)) == ["A"]


def test_the_names_a_runtime_computes() -> None:
    names = ["A", "B", "C"]
    one = _request(RequestedOutput("C"), RequestedOutput("A"))
    assert requested_names(one, names) == ["A", "C"]
    assert requested_names(_request(), names) == names
    assert union_outputs([one, _request(RequestedOutput("B"))], names) == names
    assert union_outputs([one], names) == ["A", "C"]
    assert union_outputs([one, _request()], names) == names


def test_classes_of_a_bfloat16_output_keep_their_fraction() -> None:
    scores = np.array([[0.5, 1.25, -2.0]], dtype=ml_dtypes.bfloat16)
    classes = classify(scores, 2, batched=True, labels=None)
    np.testing.assert_array_equal(classes, [[b"1.250000:1", b"0.500000:0"]])


def test_classes_of_every_row_with_ties_in_index_order() -> None:
    scores = np.array([[1, 3, 3, 0], [7, 7, 7, 7]], dtype=np.int32)
    classes = classify(scores, 3, batched=True, labels=["a", "b"])
    np.testing.assert_array_equal(
        classes, [[b"3:1:b", b"3:2", b"1:0:a"], [b"7:0:a", b"7:1:b", b"7:2"]]
    )
    single = classify(np.array([0.25, 0.75], dtype=np.float32), 5, batched=False, labels=None)
    np.testing.assert_array_equal(single, [b"0.750000:1", b"0.250000:0"])
