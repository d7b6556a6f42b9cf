"""``inferd perf`` request payloads: tensors on the wire, and gRPC requests serialised once with
per-call fields appended."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from inferd.codecs.raw_tensor import tensor_from_buffer
from inferd.core.datatypes import from_name
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.grpc_client import call_suffix
from inferd.tools.perf.payload import datatype_of, json_data, raw_bytes
from inferd.tools.perf.transport import SequenceFlags


def test_raw_bytes_read_back_with_the_servers_codec() -> None:
    numbers = np.arange(6, dtype=np.float32).reshape(2, 3)
    back = tensor_from_buffer(raw_bytes(numbers), from_name("FP32"), (2, 3), "x")
    np.testing.assert_array_equal(back, numbers)
    big_endian = numbers.astype(">f4")
    assert raw_bytes(big_endian) == raw_bytes(numbers)
    texts = np.array([b"ab", b"", b"xyz"], dtype=object)
    assert datatype_of(texts) == "BYTES"
    back = tensor_from_buffer(raw_bytes(texts), from_name("BYTES"), (3,), "x")
    assert back.tolist() == [b"ab", b"", b"xyz"]


def test_json_data_is_flat_and_refuses_what_json_cannot_carry() -> None:
    assert json_data(np.arange(4, dtype=np.int64).reshape(2, 2), "x") == [0, 1, 2, 3]
    assert json_data(np.array([b"1", b"2"], dtype=object), "x") == ["1", "2"]
    with pytest.raises(InvalidArgumentError, match=r"FP16.*http-binary"):
        json_data(np.zeros(2, np.float16), "x")
    with pytest.raises(InvalidArgumentError, match="not UTF-8"):
        json_data(np.array([b"\xff"], dtype=object), "x")


def test_grpc_call_fields_merge_into_the_prepared_request() -> None:
    prepared = service_pb2.ModelInferRequest(model_name="m", id="old")
    prepared.parameters["triton_enable_empty_final_response"].bool_param = True
    prepared.inputs.add(name="X", datatype="INT32", shape=[1])
    wire = prepared.SerializeToString()
    assert call_suffix(None, None) == b""
    merged = service_pb2.ModelInferRequest.FromString(
        wire + call_suffix("7", SequenceFlags(sequence_id=42, start=True, end=False))
    )
    assert merged.id == "7"
    assert merged.model_name == "m"
    assert [i.name for i in merged.inputs] == ["X"]
    params = merged.parameters
    assert params["triton_enable_empty_final_response"].bool_param
    assert params["sequence_id"].int64_param == 42
    assert params["sequence_start"].bool_param
    assert params.get("sequence_end") is not None
    assert not params["sequence_end"].bool_param
