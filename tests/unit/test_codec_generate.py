"""The generate extension's JSON mapping (codecs/generate_json.py): pure, no server."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from inferd.codecs.generate_json import (
    decode_generate_request,
    encode_generate_response,
    generate_shape,
    sse_event,
)
from inferd.core.inference import InferResponse
from inferd.core.metadata import TensorMetadata
from inferd.errors import InvalidArgumentError, UnsupportedError

INPUTS = [
    TensorMetadata("text_input", "BYTES", [-1, 1]),
    TensorMetadata("max_tokens", "INT32", [-1, 1]),
    TensorMetadata("ids", "INT64", [-1]),
    TensorMetadata("pair", "FP32", [-1, 2]),
    TensorMetadata("flag", "BOOL", [1]),
]


def _decode(body: dict[str, Any]) -> Any:
    return decode_generate_request("m", "", body, INPUTS)


@pytest.mark.parametrize(
    ("count", "dims", "shape"),
    [
        (1, [-1, 1], (1, 1)),
        (5, [-1], (5,)),
        (6, [-1, 2], (3, 2)),
        (6, [-1, -1, 3], (1, 2, 3)),
        (16, [-1, 16], (1, 16)),
        (1, [1], (1,)),
        (0, [-1], (0,)),
        (1, [], ()),
    ],
)
def test_shapes_follow_the_model(count: int, dims: list[int], shape: tuple[int, ...]) -> None:
    assert generate_shape(count, dims, "x") == shape


@pytest.mark.parametrize(("count", "dims"), [(3, [-1, 2]), (2, [1]), (0, [4]), (2, [])])
def test_counts_that_do_not_fit_are_refused(count: int, dims: list[int]) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot shape"):
        generate_shape(count, dims, "x")


def test_inputs_by_name_and_the_rest_as_parameters() -> None:
    request = _decode(
        {
            "id": "42",
            "text_input": "hello",
            "ids": [1, 2, 3],
            "pair": [0.5, 1.5, 2.5, 3.5],
            "stream": False,
            "parameters": {"temperature": 0.25, "max_tokens": 8, "flag": True},
        }
    )
    assert request.id == "42"
    assert request.inputs["text_input"].tolist() == [[b"hello"]]
    assert request.inputs["ids"].dtype == np.int64
    assert request.inputs["ids"].tolist() == [1, 2, 3]
    assert request.inputs["pair"].shape == (2, 2)
    assert request.inputs["max_tokens"].tolist() == [[8]]  # an input, though inside parameters
    assert request.inputs["flag"].tolist() == [True]
    assert request.parameters == {"stream": False, "temperature": 0.25}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 1.5}, "whole numbers"),
        ({"max_tokens": "8"}, "must be JSON integers"),
        ({"flag": 1}, "true/false"),
        ({"ids": [[1], [2]]}, "flat JSON array"),
        ({"ids": {"a": 1}}, "not an object"),
        ({"ids": None}, "not null"),
        ({"pair": [1.0, 2.0, 3.0]}, "cannot shape the 3"),
        ({"other": [1, 2]}, "'other' of the generate request is not an input of model 'm'"),
        ({"parameters": {"x": {"y": 1}}}, "'x' of 'parameters' is not an input"),
        ({"parameters": []}, "'parameters' of a generate request must be a JSON object"),
        ({"triton_enable_empty_final_response": True}, "reserved"),
        ({"id": 7}, "'id' of a generate request must be a JSON string"),
        ({"ids": [1], "parameters": {"ids": [2]}}, "more than once"),
        ({"max_tokens": 2**40}, "does not fit datatype INT32"),
    ],
)
def test_bad_values_are_refused_by_name(body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        _decode(body)


def test_an_input_named_parameters_is_an_input() -> None:
    inputs = [TensorMetadata("parameters", "INT32", [-1])]
    request = decode_generate_request("m", "1", {"parameters": [1, 2]}, inputs)
    assert request.inputs["parameters"].tolist() == [1, 2]
    assert request.model_version == "1"


def test_responses_carry_names_scalars_and_arrays() -> None:
    response = InferResponse(
        model_name="m",
        model_version="3",
        outputs={
            "text_output": np.array([[b"caf\xc3\xa9"]], dtype=object),
            "scores": np.array([[0.5, 0.25]], dtype=np.float32),
            "count": np.array([7], dtype=np.int64),
            "half": np.array([1.5], dtype=np.float16),
            "bf": np.array([2.0, 3.0], dtype=ml_dtypes.bfloat16),
        },
        id="9",
        parameters={"finish_reason": "stop"},
    )
    assert encode_generate_response(response) == {
        "id": "9",
        "model_name": "m",
        "model_version": "3",
        "finish_reason": "stop",
        "text_output": "café",
        "scores": [0.5, 0.25],
        "count": 7,
        "half": 1.5,
        "bf": [2.0, 3.0],
    }
    without_id = InferResponse("m", "1", {"x": np.zeros((0,), dtype=np.int32)})
    assert encode_generate_response(without_id) == {
        "model_name": "m",
        "model_version": "1",
        "x": [],
    }


def test_bytes_that_are_not_text_are_refused() -> None:
    response = InferResponse("m", "1", {"raw": np.array([b"\xff\xfe"], dtype=object)})
    with pytest.raises(UnsupportedError, match="output 'raw'"):
        encode_generate_response(response)


def test_sse_event_framing() -> None:
    assert sse_event(b'{"a":1}') == b'data: {"a":1}\n\n'
