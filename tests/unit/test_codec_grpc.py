"""The gRPC codec against messages built and read by tritonclient itself."""

from __future__ import annotations

import contextlib
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

from inferd.codecs.limits import MAX_DIMS, MAX_ELEMENTS
from inferd.codecs.v2_grpc import decode_infer_request, encode_infer_response
from inferd.core import datatypes
from inferd.core.inference import InferRequest, InferResponse
from inferd.errors import InferdError, InvalidArgumentError, UnsupportedError

NUMERIC = [d.name for d in datatypes.ALL if not d.is_bytes]
TYPED = [d.name for d in datatypes.ALL if d.grpc_field is not None]

shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


@st.composite
def tensors(draw: st.DrawFn, name: str) -> np.ndarray[Any, Any]:
    """An array of the protocol datatype ``name`` (BF16 drawn as bit patterns)."""
    shape = draw(shapes)
    if name == "BYTES":
        count = int(np.prod(shape))
        items = draw(st.lists(st.binary(max_size=12), min_size=count, max_size=count))
        array = np.empty(count, dtype=object)
        array[:] = items
        return array.reshape(shape)
    if name == "BF16":
        bits = draw(hnp.arrays(np.uint16, shape))
        return bits.view(ml_dtypes.bfloat16)
    return draw(hnp.arrays(datatypes.from_name(name).dtype, shape))


def build_request(
    *arrays: tuple[str, str, np.ndarray[Any, Any]], **kwargs: Any
) -> service_pb2.ModelInferRequest:
    """A request exactly as tritonclient's ``infer`` builds it."""
    inputs = []
    for name, datatype, array in arrays:
        infer_input = grpcclient.InferInput(name, list(array.shape), datatype)
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    args: dict[str, Any] = {
        "model_name": "m",
        "inputs": inputs,
        "model_version": "",
        "request_id": "",
        "outputs": None,
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
        "priority": 0,
        "timeout": None,
        "parameters": None,
    }
    args.update(kwargs)
    return _get_inference_request(**args)


def assert_same(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        assert got.tobytes() == want.tobytes()  # bit-exact, NaNs included


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [d.name for d in datatypes.ALL])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_raw_request_round_trip(name: str, data: st.DataObject) -> None:
    array = data.draw(tensors(name))
    request = decode_infer_request(build_request(("X", name, array)))
    assert list(request.inputs) == ["X"]
    assert_same(request.inputs["X"], array)


@pytest.mark.parametrize("name", TYPED)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_typed_contents_round_trip(name: str, data: st.DataObject) -> None:
    array = data.draw(tensors(name))
    dtype = datatypes.from_name(name)
    msg = service_pb2.ModelInferRequest(model_name="m")
    tensor = msg.inputs.add(name="X", datatype=name, shape=array.shape)
    field = getattr(tensor.contents, str(dtype.grpc_field))
    field.extend(array.ravel().tolist())
    tensor.contents.SetInParent()  # an empty tensor still says "typed contents"
    request = decode_infer_request(msg)
    assert_same(request.inputs["X"], array)


@pytest.mark.parametrize("name", [d.name for d in datatypes.ALL])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_response_round_trip_through_infer_result(name: str, data: st.DataObject) -> None:
    first = data.draw(tensors(name))
    second = data.draw(tensors("INT32"))
    response = InferResponse("m", "3", {"A": first, "B": second}, id="req-7")
    msg = encode_infer_response(response)
    assert [o.name for o in msg.outputs] == ["A", "B"]
    assert len(msg.raw_output_contents) == 2
    assert not msg.outputs[0].HasField("contents")
    result = grpcclient.InferResult(msg)
    assert_same(result.as_numpy("A"), first)
    assert_same(result.as_numpy("B"), second)
    assert result.get_response().id == "req-7"
    assert result.get_response().model_version == "3"
    assert msg.outputs[0].datatype == name


def test_raw_inputs_map_in_order_and_are_zero_copy() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.array([[b"x", b""], [b"yz", b"\x00"]], dtype=object)
    c = np.ones((1,), dtype=np.float16)
    request = decode_infer_request(
        build_request(("A", "INT32", a), ("B", "BYTES", b), ("C", "FP16", c))
    )
    assert list(request.inputs) == ["A", "B", "C"]
    assert_same(request.inputs["A"], a)
    assert_same(request.inputs["B"], b)
    assert_same(request.inputs["C"], c)
    assert not request.inputs["A"].flags.owndata  # a view over the message bytes
    assert not request.inputs["A"].flags.writeable


def test_typed_input_may_precede_inputs_without_raw() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.add(name="A", datatype="INT8", shape=[3]).contents.int_contents.extend(
        [-128, 0, 127]
    )
    msg.inputs.add(name="B", datatype="BYTES", shape=[2]).contents.bytes_contents.extend(
        [b"p", b"q"]
    )
    request = decode_infer_request(msg)
    assert request.inputs["A"].dtype == np.int8
    assert request.inputs["A"].tolist() == [-128, 0, 127]
    assert request.inputs["B"].tolist() == [b"p", b"q"]


def test_request_fields_parameters_and_outputs() -> None:
    array = np.zeros((1, 2), dtype=np.float32)
    msg = build_request(
        ("X", "FP32", array),
        model_version="2",
        request_id="abc",
        outputs=[
            grpcclient.InferRequestedOutput("Y", class_count=3),
            grpcclient.InferRequestedOutput("Z"),
        ],
        sequence_id="corr-1",
        sequence_start=True,
        sequence_end=False,
        priority=2,
        timeout=5000,
        parameters={"s": "v", "b": True, "i": -4, "f": 0.5},
    )
    msg.parameters["triton_enable_empty_final_response"].bool_param = True
    request = decode_infer_request(msg)
    assert (request.model_name, request.model_version, request.id) == ("m", "2", "abc")
    assert request.outputs is not None
    assert [(o.name, o.classification) for o in request.outputs] == [("Y", 3), ("Z", 0)]
    assert request.parameters == {
        "sequence_id": "corr-1",
        "sequence_start": True,
        "sequence_end": False,
        "priority": 2,
        "timeout": 5000,
        "s": "v",
        "b": True,
        "i": -4,
        "f": 0.5,
        "triton_enable_empty_final_response": True,
    }


def test_integer_sequence_id_and_no_outputs() -> None:
    msg = build_request(("X", "INT32", np.zeros(1, np.int32)), sequence_id=1000)
    request = decode_infer_request(msg)
    assert request.parameters["sequence_id"] == 1000
    assert request.outputs is None


def test_response_parameters_are_encoded() -> None:
    response = InferResponse("m", "1", {}, parameters={"b": False, "i": 7, "f": 1.5, "s": "x"})
    msg = encode_infer_response(response)
    assert msg.parameters["b"].WhichOneof("parameter_choice") == "bool_param"
    assert msg.parameters["i"].int64_param == 7
    assert msg.parameters["f"].double_param == 1.5
    assert msg.parameters["s"].string_param == "x"


def test_response_accepts_str_and_fixed_width_byte_arrays() -> None:
    response = InferResponse(
        "m",
        "1",
        {
            "U": np.array(["héllo", ""]),
            "S": np.array([b"ab", b"c"]),
            "BE": np.arange(3, dtype=">i4"),
        },
    )
    result = grpcclient.InferResult(encode_infer_response(response))
    assert result.as_numpy("U").tolist() == ["héllo".encode(), b""]
    assert result.as_numpy("S").tolist() == [b"ab", b"c"]
    assert result.as_numpy("BE").tolist() == [0, 1, 2]


# -- malformed requests -------------------------------------------------------------------------


def _raw_msg(
    datatype: str, shape: list[int], raw: bytes, name: str = "X"
) -> service_pb2.ModelInferRequest:
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.add(name=name, datatype=datatype, shape=shape)
    msg.raw_input_contents.append(raw)
    return msg


def _decode_error(msg: service_pb2.ModelInferRequest) -> str:
    with pytest.raises(InvalidArgumentError) as info:
        decode_infer_request(msg)
    return str(info.value)


def test_mixing_typed_and_raw_uses_tritons_text() -> None:
    msg = build_request(("A", "INT32", np.zeros(2, np.int32)))
    msg.inputs.add(name="B", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    assert _decode_error(msg) == (
        "contents field must not be specified when using raw_input_contents for 'B' for model 'm'"
    )


def test_input_without_data_uses_tritons_text() -> None:
    msg = build_request(("A", "INT32", np.zeros(2, np.int32)))
    msg.inputs.add(name="B", datatype="INT32", shape=[1])
    assert (
        _decode_error(msg) == "unable to find data for input tensor 'B' for model 'm' in request."
    )


def test_leftover_raw_elements() -> None:
    msg = build_request(("A", "INT32", np.zeros(2, np.int32)))
    msg.raw_input_contents.append(b"\x00" * 4)
    assert "2 raw_input_contents element(s) but only 1 input(s)" in _decode_error(msg)


@pytest.mark.parametrize(
    ("datatype", "shape", "size"), [("INT32", [2, 2], 15), ("FP64", [1], 4), ("BOOL", [0], 1)]
)
def test_raw_size_mismatch_names_the_input(datatype: str, shape: list[int], size: int) -> None:
    text = _decode_error(_raw_msg(datatype, shape, b"\x01" * size))
    assert "input 'X' for model 'm'" in text
    assert f"got {size}" in text


@pytest.mark.parametrize(
    ("raw", "shape", "fragment"),
    [
        (b"\x01\x00", [1], "1 BYTES elements need at least 4 bytes, got 2"),
        (b"\x05\x00\x00\x00abc", [1], "element 0 claims 5 bytes but only 3 remain"),
        (b"\x01\x00\x00\x00a", [2], "2 BYTES elements need at least 8 bytes, got 5"),
        (b"\x01\x00\x00\x00a\x00\x00\x00", [2], "BYTES data ends after 1 of 2"),
        (b"\x01\x00\x00\x00a\x00\x00\x00\x00", [1], "4 bytes left after the 1 BYTES"),
    ],
)
def test_malformed_bytes_raw(raw: bytes, shape: list[int], fragment: str) -> None:
    text = _decode_error(_raw_msg("BYTES", shape, raw))
    assert fragment in text
    assert "input 'X' for model 'm'" in text


def test_typed_count_mismatch() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.add(name="X", datatype="FP32", shape=[3]).contents.fp32_contents.extend([1.0, 2.0])
    text = _decode_error(msg)
    assert "'fp32_contents' for input 'X' for model 'm'" in text
    assert "holds 3, got 2" in text


def test_typed_field_must_match_datatype() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.add(name="X", datatype="INT32", shape=[1]).contents.fp32_contents.append(1.0)
    assert "set 'fp32_contents'; expected 'int_contents'" in _decode_error(msg)


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_precision_is_raw_only(datatype: str) -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.add(name="X", datatype=datatype, shape=[1]).contents.fp32_contents.append(1.0)
    assert "must be sent in raw_input_contents" in _decode_error(msg)


@pytest.mark.parametrize(
    ("datatype", "value"), [("INT8", 128), ("INT16", -40000), ("UINT8", 256), ("UINT16", 70000)]
)
def test_typed_out_of_range(datatype: str, value: int) -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    tensor = msg.inputs.add(name="X", datatype=datatype, shape=[1])
    field = datatypes.from_name(datatype).grpc_field
    getattr(tensor.contents, str(field)).append(value)
    assert f"out of range for {datatype}" in _decode_error(msg)


def test_unknown_datatype_negative_dims_and_duplicates() -> None:
    assert "invalid datatype 'INT128' for input 'X'" in _decode_error(_raw_msg("INT128", [1], b""))
    assert "shape of input 'X' must be a list of non-negative integers, got [-1]" in (
        _decode_error(_raw_msg("INT32", [-1], b""))
    )
    msg = build_request(
        ("X", "INT32", np.zeros(1, np.int32)), ("X", "INT32", np.zeros(1, np.int32))
    )
    assert "input 'X' appears more than once in the request" in _decode_error(msg)
    msg = build_request(
        ("X", "INT32", np.zeros(1, np.int32)),
        outputs=[grpcclient.InferRequestedOutput("Y"), grpcclient.InferRequestedOutput("Y")],
    )
    assert "output 'Y' is requested more than once" in _decode_error(msg)


def test_shared_memory_without_a_registry_is_unsupported() -> None:
    infer_input = grpcclient.InferInput("X", [1], "INT32")
    infer_input.set_shared_memory("region", 4)
    msg = _get_inference_request("m", [infer_input], "", "", None, 0, False, False, 0, None, None)
    with pytest.raises(UnsupportedError, match="shared memory, which is not enabled"):
        decode_infer_request(msg)
    output = grpcclient.InferRequestedOutput("Y")
    output.set_shared_memory("region", 4)
    msg = build_request(("X", "INT32", np.zeros(1, np.int32)), outputs=[output])
    with pytest.raises(UnsupportedError, match="output 'Y' uses shared memory"):
        decode_infer_request(msg)


@pytest.mark.parametrize(
    ("key", "setter", "value", "fragment"),
    [
        ("sequence_id", "bool_param", True, "expected int64_param or string_param"),
        ("sequence_start", "int64_param", 1, "expected bool_param"),
        ("triton_enable_empty_final_response", "string_param", "yes", "expected bool_param"),
        ("priority", "int64_param", -1, "non-negative int64_param"),
        ("timeout", "string_param", "5", "non-negative int64_param"),
    ],
)
def test_bad_parameter_types(key: str, setter: str, value: Any, fragment: str) -> None:
    msg = build_request(("X", "INT32", np.zeros(1, np.int32)))
    setattr(msg.parameters[key], setter, value)
    text = _decode_error(msg)
    assert key in text
    assert fragment in text


def test_parameter_without_value() -> None:
    msg = build_request(("X", "INT32", np.zeros(1, np.int32)))
    msg.parameters["empty"].SetInParent()
    assert "parameter 'empty' carries no value" in _decode_error(msg)


@pytest.mark.parametrize(
    ("setter", "value"),
    [("int64_param", -2), ("string_param", "3"), ("bool_param", True)],
)
def test_bad_classification(setter: str, value: Any) -> None:
    output = service_pb2.ModelInferRequest.InferRequestedOutputTensor(name="Y")
    setattr(output.parameters["classification"], setter, value)
    msg = build_request(("X", "INT32", np.zeros(1, np.int32)))
    msg.outputs.append(output)
    assert "'classification' of output 'Y' must be a non-negative integer" in _decode_error(msg)


def test_request_mistakes_read_the_same_over_both_wires() -> None:
    """Duplicates and classification counts: one rule and one message for HTTP and gRPC."""
    import orjson

    from inferd.codecs import v2_http

    def http_error(body: dict[str, Any]) -> str:
        with pytest.raises(InvalidArgumentError) as info:
            v2_http.decode_infer_request("m", "", orjson.dumps(body), None)
        return str(info.value)

    x = {"name": "X", "datatype": "INT32", "shape": [1], "data": [0]}
    grpc_dup_in = build_request(
        ("X", "INT32", np.zeros(1, np.int32)), ("X", "INT32", np.zeros(1, np.int32))
    )
    assert http_error({"inputs": [x, x]}) == _decode_error(grpc_dup_in)
    grpc_dup_out = build_request(
        ("X", "INT32", np.zeros(1, np.int32)),
        outputs=[grpcclient.InferRequestedOutput("Y"), grpcclient.InferRequestedOutput("Y")],
    )
    assert http_error({"inputs": [x], "outputs": [{"name": "Y"}, {"name": "Y"}]}) == (
        _decode_error(grpc_dup_out)
    )
    bad = service_pb2.ModelInferRequest.InferRequestedOutputTensor(name="Y")
    bad.parameters["classification"].int64_param = -1
    grpc_bad = build_request(("X", "INT32", np.zeros(1, np.int32)))
    grpc_bad.outputs.append(bad)
    http_bad = {"inputs": [x], "outputs": [{"name": "Y", "parameters": {"classification": -1}}]}
    assert http_error(http_bad) == _decode_error(grpc_bad)
    # 0 means no classification on both
    zero = service_pb2.ModelInferRequest.InferRequestedOutputTensor(name="Y")
    zero.parameters["classification"].int64_param = 0
    grpc_zero = build_request(("X", "INT32", np.zeros(1, np.int32)))
    grpc_zero.outputs.append(zero)
    decoded = decode_infer_request(grpc_zero).outputs
    assert decoded is not None
    assert decoded[0].classification == 0


# -- limits shared with HTTP, model names, and arbitrary messages --------------------------------


def test_shape_limits_match_http() -> None:
    # the messages of inferd.codecs.limits.check_shape, which the HTTP codec applies too
    text = _decode_error(_raw_msg("INT32", [1] * 65, b"\0" * 4))
    assert text == f"shape of input 'X' has 65 dimensions; at most {MAX_DIMS} are allowed"
    huge = [2**20, 2**20, 2]
    text = _decode_error(_raw_msg("INT32", huge, b"\0" * 4))
    assert text == f"shape {huge} of input 'X' is too large (more than {MAX_ELEMENTS} elements)"
    assert decode_infer_request(_raw_msg("INT32", [1] * MAX_DIMS, b"\0" * 4)).inputs["X"].ndim == (
        MAX_DIMS
    )


def test_zero_sized_giant_shape_is_refused_before_numpy() -> None:
    text = _decode_error(_raw_msg("INT8", [0, 2**62, 2**62], b""))
    assert "is too large" in text


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "must not be empty"),
        ("../etc", "must not contain '/'"),
        ("..", "must not be '.' or '..'"),
        ("a\x00b", "control characters"),
        ("x" * 300, "at most 255"),
    ],
)
def test_model_name_is_checked(name: str, fragment: str) -> None:
    msg = _raw_msg("INT32", [1], b"\0" * 4)
    msg.model_name = name
    text = _decode_error(msg)
    assert text.startswith("invalid model name")
    assert fragment in text


def test_bytes_element_lengths_are_checked() -> None:
    text = _decode_error(_raw_msg("BYTES", [1], b"\xff\xff\xff\x7f" + b"ab"))
    assert "element 0 claims 2147483647 bytes but only 2 remain" in text
    text = _decode_error(_raw_msg("BYTES", [2**30], b"\0" * 8))
    assert f"{2**30} BYTES elements need at least {2**32} bytes, got 8" in text


_DATATYPES = [d.name for d in datatypes.ALL] + ["", "INT128", "int32", "BYTES\x00"]
_PARAMS = st.dictionaries(
    st.sampled_from(
        ["sequence_id", "sequence_start", "priority", "timeout", "classification", "binary_data"]
    )
    | st.text(max_size=8),
    st.one_of(
        st.builds(service_pb2.InferParameter, bool_param=st.booleans()),
        st.builds(service_pb2.InferParameter, int64_param=st.integers(-(2**63), 2**63 - 1)),
        st.builds(service_pb2.InferParameter, uint64_param=st.integers(0, 2**64 - 1)),
        st.builds(service_pb2.InferParameter, string_param=st.text(max_size=8)),
        st.builds(service_pb2.InferParameter, double_param=st.floats()),
        st.just(service_pb2.InferParameter()),
    ),
    max_size=3,
)
_CONTENT_FIELDS = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": st.integers(-(2**63), 2**63 - 1),
    "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": st.integers(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=8),
}


@st.composite
def infer_requests(draw: st.DrawFn) -> service_pb2.ModelInferRequest:
    """Any ModelInferRequest, mostly wrong: names, datatypes, shapes, contents, parameters."""
    msg = service_pb2.ModelInferRequest(
        model_name=draw(st.sampled_from(["m", "simple"]) | st.text(max_size=10)),
        model_version=draw(st.sampled_from(["", "1"]) | st.text(max_size=4)),
        id=draw(st.text(max_size=6)),
    )
    for key, param in draw(_PARAMS).items():
        msg.parameters[key].CopyFrom(param)
    small = st.integers(0, 4)
    dims = st.one_of(small, st.integers(-(2**63), 2**63 - 1), st.sampled_from([2**31, 2**62]))
    for _ in range(draw(st.integers(0, 3))):
        tensor = msg.inputs.add(
            name=draw(st.sampled_from(["X", "Y"]) | st.text(max_size=4)),
            datatype=draw(st.sampled_from(_DATATYPES)),
            shape=draw(
                st.lists(dims, max_size=3)
                | st.lists(st.sampled_from([1, 1, 1, 0]), min_size=30, max_size=70)
            ),
        )
        for key, param in draw(_PARAMS).items():
            tensor.parameters[key].CopyFrom(param)
        for field in draw(st.lists(st.sampled_from(sorted(_CONTENT_FIELDS)), max_size=2)):
            values = draw(st.lists(_CONTENT_FIELDS[field], max_size=6))
            getattr(tensor.contents, field).extend(values)
    for _ in range(draw(st.integers(0, 3))):
        msg.raw_input_contents.append(
            draw(
                st.binary(max_size=40)
                | st.sampled_from([b"", b"\0" * 4, b"\0" * 8, b"\1\0\0\0a", b"\xff\xff\xff\xff"])
            )
        )
    for _ in range(draw(st.integers(0, 2))):
        out = msg.outputs.add(name=draw(st.sampled_from(["Y", "Z"]) | st.text(max_size=3)))
        for key, param in draw(_PARAMS).items():
            out.parameters[key].CopyFrom(param)
    return msg


@settings(max_examples=600, deadline=None, derandomize=True)
@given(infer_requests())
def test_any_request_decodes_or_raises_an_inferd_error(msg: service_pb2.ModelInferRequest) -> None:
    try:
        request = decode_infer_request(msg)
    except InferdError:
        return
    assert isinstance(request, InferRequest)
    for array in request.inputs.values():
        assert array.ndim <= MAX_DIMS


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.data())
def test_mutated_wire_bytes_decode_or_raise_an_inferd_error(data: st.DataObject) -> None:
    wire = bytearray(data.draw(infer_requests()).SerializeToString())
    for _ in range(data.draw(st.integers(1, 4))):
        if not wire:
            break
        at = data.draw(st.integers(0, len(wire) - 1))
        wire[at] = data.draw(st.integers(0, 255))
    try:
        msg = service_pb2.ModelInferRequest.FromString(bytes(wire))
    except Exception:
        return  # does not parse: the server answers INVALID_ARGUMENT before decoding
    with contextlib.suppress(InferdError):
        decode_infer_request(msg)


def test_metadata_and_index_say_the_same_over_both_wires() -> None:
    from google.protobuf import json_format

    from inferd.codecs import v2_grpc, v2_http
    from inferd.core.metadata import IndexEntry, ModelMetadata, TensorMetadata

    meta = ModelMetadata(
        name="m",
        versions=["1", "3"],
        platform="onnxruntime_onnx",
        inputs=[TensorMetadata("X", "FP32", [-1, 4])],
        outputs=[TensorMetadata("Y", "INT64", [-1])],
    )
    over_grpc = json_format.MessageToDict(
        v2_grpc.model_metadata_response(meta), preserving_proto_field_name=True
    )
    for tensors in (over_grpc["inputs"], over_grpc["outputs"]):
        for t in tensors:
            t["shape"] = [int(d) for d in t["shape"]]  # int64 renders as strings
    assert over_grpc == v2_http.model_metadata_dict(meta)
    entries = [IndexEntry("a"), IndexEntry("b", "2", "UNAVAILABLE", "broken file")]
    rows = v2_grpc.repository_index_response(entries).models
    assert [(r.name, r.version, r.state, r.reason) for r in rows] == [
        ("a", "", "", ""),
        ("b", "2", "UNAVAILABLE", "broken file"),
    ]
    assert v2_http.repository_index_list(entries) == [
        {"name": "a"},
        {"name": "b", "version": "2", "state": "UNAVAILABLE", "reason": "broken file"},
    ]


def test_the_datatype_table_numbers_match_the_config_schema() -> None:
    from tritonclient.grpc import model_config_pb2

    from inferd.backends.python import triton_python_backend_utils as pb_utils
    from inferd.core.datatypes import ALL

    for d in ALL:
        assert model_config_pb2.DataType.Value(d.config_name) == d.config_code, d.name
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_to_numpy_type(model_config_pb2.TYPE_INT64) is np.int64
    assert pb_utils.numpy_to_triton_type(np.uint16) == model_config_pb2.TYPE_UINT16
    assert pb_utils.numpy_to_triton_type(np.dtype("S3")) == model_config_pb2.TYPE_STRING
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.triton_string_to_numpy("TYPE_BF16")
