"""The v2 REST codec against tritonclient's own request builder and response parser."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import ml_dtypes
import numpy as np
import orjson
import pytest
import tritonclient.http as th
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.http._utils import _get_inference_request

from inferd.codecs import v2_http
from inferd.codecs.raw_tensor import serialize_bytes_elements
from inferd.core import datatypes
from inferd.core.inference import InferRequest, InferResponse, RequestedOutput
from inferd.core.metadata import IndexEntry, ModelMetadata, TensorMetadata
from inferd.errors import ErrorCode, InvalidArgumentError, UnsupportedError
from inferd.frontends.http.compression import (
    choose_response_coding,
    compress_response,
    decompress_request,
)
from inferd.frontends.http.errors import HTTP_STATUS, HttpStatusError
from inferd.frontends.http.routes import Endpoint, match_route

NUMERIC = [d for d in datatypes.ALL if not d.is_bytes]
SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)


def _arrays(dtype: datatypes.DataType, *, json_safe: bool) -> st.SearchStrategy[Any]:
    if dtype.name == "BF16":
        floats = st.floats(width=32, allow_nan=not json_safe, allow_infinity=not json_safe)
        return SHAPES.flatmap(
            lambda shape: (
                hnp.arrays(np.float32, shape, elements=floats)
                .map(lambda a: a.astype(ml_dtypes.bfloat16))
                .filter(lambda a: not json_safe or bool(np.isfinite(a.astype(np.float32)).all()))
            )
        )
    kind = dtype.dtype.kind
    elements = None
    if kind == "f":
        width = dtype.itemsize * 8
        elements = st.floats(width=width, allow_nan=not json_safe, allow_infinity=not json_safe)
    return hnp.arrays(dtype.dtype, SHAPES, elements=elements)


def _client_body(
    arrays: dict[str, np.ndarray[Any, Any]],
    *,
    binary: bool,
    outputs: list[Any] | None = None,
    request_id: str = "",
) -> tuple[bytes, int | None]:
    inputs = []
    for name, array in arrays.items():
        dt = datatypes.from_dtype(array.dtype).name
        infer_input = th.InferInput(name, list(array.shape), dt)
        infer_input.set_data_from_numpy(array, binary_data=binary)
        inputs.append(infer_input)
    body, header_length = _get_inference_request(
        inputs, request_id, outputs, 0, False, False, 0, None, None
    )
    return body, header_length


def _round_trip(request: InferRequest, outputs: dict[str, np.ndarray[Any, Any]]) -> th.InferResult:
    response = InferResponse(request.model_name, "3", outputs, id=request.id)
    header, blobs = v2_http.encode_infer_response(response, request)
    body = header + b"".join(blobs)
    return th.InferResult.from_response_body(body, header_length=len(header) if blobs else None)


def _same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> None:
    assert a.shape == b.shape
    assert a.dtype == b.dtype
    if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:  # NaN == NaN here
        np.testing.assert_array_equal(a.astype(np.float64), b.astype(np.float64))
    else:
        assert a.tolist() == b.tolist()


# -- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.name)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_binary_round_trip_every_numeric_datatype(dtype: datatypes.DataType, data: Any) -> None:
    array = data.draw(_arrays(dtype, json_safe=False))
    body, header_length = _client_body({"X": array}, binary=True)
    request = v2_http.decode_infer_request("m", "", body, header_length)
    decoded = request.inputs["X"]
    _same(decoded, array)
    assert request.binary_output_default  # the client asks for binary when outputs are omitted
    result = _round_trip(request, {"Y": decoded})
    _same(result.as_numpy("Y"), array)


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.name)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_json_round_trip_every_numeric_datatype(dtype: datatypes.DataType, data: Any) -> None:
    array = data.draw(_arrays(dtype, json_safe=True))
    wanted = [th.InferRequestedOutput("Y", binary_data=False)]
    if dtype.name in ("FP16", "BF16"):
        # not accepted as JSON input (Triton's rule); still returned as JSON numbers
        with pytest.raises(InvalidArgumentError, match="via JSON is not supported"):
            _decode_json_input(array, dtype.name)
        body, header_length = _client_body({"X": array}, binary=True, outputs=wanted)
    else:
        body, header_length = _client_body({"X": array}, binary=False, outputs=wanted)
        assert header_length is None
    request = v2_http.decode_infer_request("m", "", body, header_length)
    _same(request.inputs["X"], array)
    header, blobs = v2_http.encode_infer_response(
        InferResponse("m", "1", {"Y": request.inputs["X"]}), request
    )
    assert blobs == []
    (out,) = orjson.loads(header)["outputs"]
    assert "parameters" not in out
    result = _round_trip(request, {"Y": request.inputs["X"]})
    _same(result.as_numpy("Y"), array)


def _decode_json_input(array: np.ndarray[Any, Any], name: str) -> None:
    header = {
        "inputs": [
            {
                "name": "X",
                "datatype": name,
                "shape": list(array.shape),
                "data": array.astype(np.float64).reshape(-1).tolist(),
            }
        ]
    }
    v2_http.decode_infer_request("m", "", orjson.dumps(header), None)


BYTES_ELEMENTS = st.binary(max_size=12)
UTF8_ELEMENTS = st.text(max_size=6).map(str.encode)


@settings(max_examples=50, deadline=None)
@given(shape=SHAPES, data=st.data(), binary=st.booleans())
def test_bytes_round_trip(shape: tuple[int, ...], data: Any, binary: bool) -> None:
    count = int(np.prod(shape))
    elements = data.draw(
        st.lists(BYTES_ELEMENTS if binary else UTF8_ELEMENTS, min_size=count, max_size=count)
    )
    array = np.empty(count, dtype=object)
    array[:] = elements
    array = array.reshape(shape)
    wanted = [th.InferRequestedOutput("Y", binary_data=binary)]
    body, header_length = _client_body({"X": array}, binary=binary, outputs=wanted)
    request = v2_http.decode_infer_request("m", "", body, header_length)
    assert request.inputs["X"].tolist() == array.tolist()
    result = _round_trip(request, {"Y": request.inputs["X"]})
    got = result.as_numpy("Y")
    assert got is not None
    assert got.shape == shape
    assert [x if isinstance(x, bytes) else x.encode() for x in got.reshape(-1)] == elements


@pytest.mark.parametrize(
    "request_",
    [InferRequest("m", {}), InferRequest("m", {}, outputs=[RequestedOutput("Y")])],
    ids=["no outputs listed", "output listed without binary_data"],
)
def test_bytes_output_that_is_not_utf8_goes_binary_when_json_is_the_default(
    request_: InferRequest,
) -> None:
    out = np.array([b"ok", b"\xff\xfe"], dtype=object)
    header, blobs = v2_http.encode_infer_response(InferResponse("m", "1", {"Y": out}), request_)
    (entry,) = orjson.loads(header)["outputs"]
    assert entry["parameters"] == {"binary_data_size": len(blobs[0])}
    result = th.InferResult.from_response_body(header + blobs[0], header_length=len(header))
    assert result.as_numpy("Y").tolist() == [b"ok", b"\xff\xfe"]


def test_bytes_output_that_is_not_utf8_is_refused_when_json_is_asked_for() -> None:
    # binary_data false on the output is honoured or refused, never silently overridden
    request = InferRequest("m", {}, outputs=[RequestedOutput("Y", binary=False)])
    out = np.array([b"ok", b"\xff\xfe"], dtype=object)
    with pytest.raises(InvalidArgumentError, match="output 'Y' was requested with 'binary_data'"):
        v2_http.encode_infer_response(InferResponse("m", "1", {"Y": out}), request)
    fine = np.array([b"ok", "\u00e9".encode()], dtype=object)
    header, blobs = v2_http.encode_infer_response(InferResponse("m", "1", {"Y": fine}), request)
    assert orjson.loads(header)["outputs"][0]["data"] == ["ok", "\u00e9"]
    assert not blobs


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16])
def test_non_finite_floats_requested_as_json_go_binary(dtype: Any) -> None:
    values = np.array([np.nan, np.inf, -np.inf, 1.5], dtype=dtype)
    request = InferRequest("m", {}, outputs=[RequestedOutput("Y", binary=False)])
    header, blobs = v2_http.encode_infer_response(InferResponse("m", "1", {"Y": values}), request)
    (entry,) = orjson.loads(header)["outputs"]
    assert entry["parameters"] == {"binary_data_size": values.nbytes}
    result = th.InferResult.from_response_body(header + b"".join(blobs), header_length=len(header))
    _same(result.as_numpy("Y"), values)


def test_nested_json_data_and_mixed_binary_inputs() -> None:
    header = {
        "id": "abc",
        "inputs": [
            {"name": "A", "datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3, 4]]},
            {"name": "B", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}},
            {"name": "C", "datatype": "BOOL", "shape": [3], "data": [True, False, True]},
            {"name": "D", "datatype": "INT8", "shape": [1], "parameters": {"binary_data_size": 1}},
        ],
    }
    head = orjson.dumps(header)
    blob = np.array([1.5, -2], np.float32).tobytes() + b"\x07"
    request = v2_http.decode_infer_request("m", "2", head + blob, len(head))
    assert request.id == "abc"
    assert request.model_version == "2"
    assert request.inputs["A"].tolist() == [[1, 2], [3, 4]]
    assert request.inputs["B"].tolist() == [1.5, -2.0]
    assert request.inputs["C"].dtype == np.bool_
    assert request.inputs["D"].tolist() == [7]
    assert request.outputs is None


def test_binary_inputs_are_views_of_the_body() -> None:
    head = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "A",
                    "datatype": "FP32",
                    "shape": [4],
                    "parameters": {"binary_data_size": 16},
                }
            ]
        }
    )
    body = bytearray(head + np.arange(4, dtype=np.float32).tobytes())
    request = v2_http.decode_infer_request("m", "", body, len(head))
    body[len(head) : len(head) + 4] = np.float32(9).tobytes()
    assert request.inputs["A"][0] == 9  # shares memory: no copy was made


def test_request_parameters_and_outputs() -> None:
    header = {
        "inputs": [],
        "parameters": {
            "sequence_id": 7,
            "sequence_start": True,
            "sequence_end": False,
            "priority": 1,
            "timeout": 100,
            "binary_data_output": True,
            "custom": "x",
            "ratio": 0.5,
        },
        "outputs": [
            {"name": "A", "parameters": {"binary_data": False, "classification": 3}},
            {"name": "B"},
        ],
    }
    request = v2_http.decode_infer_request("m", "", orjson.dumps(header), None)
    assert request.binary_output_default is True
    assert "binary_data_output" not in request.parameters
    assert request.parameters["sequence_id"] == 7
    assert request.parameters["custom"] == "x"
    assert request.outputs == [
        RequestedOutput("A", binary=False, classification=3),
        RequestedOutput("B"),
    ]


# -- response encoding --------------------------------------------------------------------------


def test_output_format_precedence_and_header_fields() -> None:
    request = InferRequest(
        "m",
        {},
        outputs=[RequestedOutput("A", binary=False), RequestedOutput("B"), RequestedOutput("C")],
        binary_output_default=True,
    )
    outputs = {
        "A": np.arange(3, dtype=np.int32),
        "B": np.arange(3, dtype=np.int64),
        "C": np.zeros((0, 2), dtype=np.float32),
    }
    header, blobs = v2_http.encode_infer_response(
        InferResponse("m", "4", outputs, parameters={"p": 1}), request
    )
    parsed = orjson.loads(header)
    assert "id" not in parsed
    assert parsed["model_version"] == "4"
    assert parsed["parameters"] == {"p": 1}
    a, b, c = parsed["outputs"]
    assert a == {"name": "A", "datatype": "INT32", "shape": [3], "data": [0, 1, 2]}
    assert b["parameters"] == {"binary_data_size": 24}
    assert c["parameters"] == {"binary_data_size": 0}
    assert [len(x) for x in blobs] == [24, 0]


def test_binary_outputs_are_not_copied_when_contiguous() -> None:
    array = np.arange(12, dtype=np.float32)
    request = InferRequest("m", {}, binary_output_default=True)
    _, blobs = v2_http.encode_infer_response(InferResponse("m", "1", {"Y": array}), request)
    assert np.shares_memory(np.frombuffer(blobs[0], dtype=np.float32), array)


def test_non_contiguous_and_big_endian_outputs() -> None:
    array = np.arange(6, dtype=np.int32).reshape(2, 3).T
    big = np.arange(3, dtype=">f8")
    request = InferRequest("m", {}, binary_output_default=True)
    header, blobs = v2_http.encode_infer_response(
        InferResponse("m", "1", {"T": array, "B": big}), request
    )
    result = th.InferResult.from_response_body(header + b"".join(blobs), header_length=len(header))
    assert result.as_numpy("T").tolist() == array.tolist()
    assert result.as_numpy("B").tolist() == [0.0, 1.0, 2.0]


def test_metadata_helpers() -> None:
    meta = ModelMetadata("m", ["1"], "onnxruntime_onnx", [TensorMetadata("I", "FP32", [-1, 2])], [])
    assert v2_http.model_metadata_dict(meta)["inputs"] == [
        {"name": "I", "datatype": "FP32", "shape": [-1, 2]}
    ]
    rows = v2_http.repository_index_list(
        [IndexEntry("a"), IndexEntry("b", "1", "READY"), IndexEntry("c", "2", "UNAVAILABLE", "x")]
    )
    assert rows == [
        {"name": "a"},
        {"name": "b", "version": "1", "state": "READY"},
        {"name": "c", "version": "2", "state": "UNAVAILABLE", "reason": "x"},
    ]


# -- malformed requests -------------------------------------------------------------------------


def _inp(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "X", "datatype": "INT32", "shape": [2], "data": [1, 2]}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def _bin(name: str = "X", datatype: str = "INT32", shape: list[int] | None = None, size: int = 8):
    return {
        "name": name,
        "datatype": datatype,
        "shape": shape if shape is not None else [2],
        "parameters": {"binary_data_size": size},
    }


JSON_CASES: list[tuple[str, Any, str]] = [
    ("not an object", [], "must be an object"),
    ("no inputs", {}, "'inputs' array"),
    ("input not object", {"inputs": [1]}, "must be a JSON object"),
    ("no name", {"inputs": [_inp(name=None)]}, "string 'name'"),
    ("duplicate", {"inputs": [_inp(), _inp()]}, "more than once"),
    ("unknown datatype", {"inputs": [_inp(datatype="INT33")]}, "invalid datatype 'INT33'"),
    ("no shape", {"inputs": [_inp(shape=None)]}, "'shape' array"),
    ("negative dim", {"inputs": [_inp(shape=[-2])]}, "non-negative integers"),
    ("float dim", {"inputs": [_inp(shape=[2.0])]}, "non-negative integers"),
    ("bool dim", {"inputs": [_inp(shape=[True, 2])]}, "non-negative integers"),
    ("too many dims", {"inputs": [_inp(shape=[1] * 33)]}, "at most 32"),
    ("absurd shape", {"inputs": [_inp(shape=[2**40, 2**40])]}, "too large"),
    ("absurd zero shape", {"inputs": [_inp(shape=[0, 2**62], data=[])]}, "too large"),
    ("count mismatch", {"inputs": [_inp(shape=[3])]}, "shape [3] needs 3, got 2"),
    ("scalar data", {"inputs": [_inp(shape=[1], data=5)]}, "must be a JSON array"),
    ("string for int", {"inputs": [_inp(data=["1", "2"])]}, "must be JSON integers"),
    ("fraction for int", {"inputs": [_inp(data=[1.5, 2])]}, "must be whole numbers, got 1.5"),
    ("bool for int", {"inputs": [_inp(data=[True, 2])]}, "must be JSON integers"),
    ("null element", {"inputs": [_inp(data=[None, 2])]}, "must be JSON integers"),
    ("out of range", {"inputs": [_inp(datatype="UINT8", data=[300, 1])]}, "does not fit"),
    ("negative uint", {"inputs": [_inp(datatype="UINT32", data=[-1, 1])]}, "does not fit"),
    ("int for bool", {"inputs": [_inp(datatype="BOOL", data=[0, 1])]}, "true/false"),
    ("number for bytes", {"inputs": [_inp(datatype="BYTES", data=[1, 2])]}, "JSON strings"),
    ("ragged", {"inputs": [_inp(shape=[3], data=[[1, 2], [3, [4]]])]}, "needs 3, got 4"),
    ("fp16 json", {"inputs": [_inp(datatype="FP16", data=[1.0, 2.0])]}, "receiving FP16 data"),
    ("bf16 json", {"inputs": [_inp(datatype="BF16", data=[1.0, 2.0])]}, "receiving BF16 data"),
    ("no source", {"inputs": [_inp(data=None)]}, "none of them is set"),
    (
        "two sources",
        {"inputs": [_inp(parameters={"binary_data_size": 8})]},
        "more than one is set",
    ),
    (
        "bad size",
        {"inputs": [_inp(data=None, parameters={"binary_data_size": -1})]},
        "non-negative",
    ),
    ("id not string", {"id": 5, "inputs": []}, "'id' must be a string"),
    ("params not object", {"parameters": [], "inputs": []}, "'parameters' must be"),
    ("reserved param", {"parameters": {"triton_x": True}, "inputs": []}, "reserved"),
    ("bad bdo", {"parameters": {"binary_data_output": 1}, "inputs": []}, "must be a boolean"),
    ("bad seq id", {"parameters": {"sequence_id": 1.5}, "inputs": []}, "sequence_id"),
    ("bad priority", {"parameters": {"priority": -1}, "inputs": []}, "unsigned integer"),
    ("nested param", {"parameters": {"x": {"y": 1}}, "inputs": []}, "string, number or boolean"),
    ("outputs not list", {"inputs": [], "outputs": {}}, "'outputs' must be an array"),
    ("output no name", {"inputs": [], "outputs": [{}]}, "string 'name'"),
    (
        "bad classification",
        {"inputs": [], "outputs": [{"name": "Y", "parameters": {"classification": -1}}]},
        "classification",
    ),
    (
        "bad binary_data",
        {"inputs": [], "outputs": [{"name": "Y", "parameters": {"binary_data": "yes"}}]},
        "must be a boolean",
    ),
]


@pytest.mark.parametrize(
    ("header", "message"), [c[1:] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES]
)
def test_malformed_json_header_is_invalid_argument(header: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        v2_http.decode_infer_request("m", "", orjson.dumps(header), None)
    assert message in str(info.value)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"inputs": [', "failed to parse"),
        (b"", "failed to parse"),
        (b'{"inputs": [], "id": "\xff"}', "UTF-8"),
        (b'{"inputs": [], "id": "\\ud800"}', "surrogate"),
    ],
    ids=["truncated", "empty", "invalid utf-8", "lone surrogate"],
)
def test_bad_json_text(body: bytes, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        v2_http.decode_infer_request("m", "", body, None)


def _binary_case(inputs: list[dict[str, Any]], blob: bytes) -> tuple[bytes, int]:
    head = orjson.dumps({"inputs": inputs})
    return head + blob, len(head)


BINARY_CASES: list[tuple[str, list[dict[str, Any]], bytes, str]] = [
    ("size mismatch", [_bin(size=4)], b"\0" * 4, "expecting 8 bytes"),
    ("leftover bytes", [_bin()], b"\0" * 9, "unexpected additional input data for model 'm'"),
    ("missing bytes", [_bin(), _bin("Z")], b"\0" * 12, "only 4 bytes remain"),
    ("absurd binary shape", [_bin(shape=[10**9], size=8)], b"\0" * 8, "expecting 4000000000"),
    (
        "bytes truncated prefix",
        [_bin(datatype="BYTES", size=8)],
        b"\1\0\0\0a\0\0\0",
        "ends after 1",
    ),
    (
        "bytes element overflow",
        [_bin(datatype="BYTES", shape=[1], size=6)],
        b"\x09\0\0\0ab",
        "claims 9 bytes",
    ),
    (
        "bytes trailing",
        [_bin(datatype="BYTES", shape=[1], size=7)],
        b"\1\0\0\0abc",
        "2 bytes left",
    ),
    (
        "bytes absurd count",
        [_bin(datatype="BYTES", shape=[10**9], size=8)],
        b"\0" * 8,
        "need at least",
    ),
]


@pytest.mark.parametrize(
    ("inputs", "blob", "message"), [c[1:] for c in BINARY_CASES], ids=[c[0] for c in BINARY_CASES]
)
def test_malformed_binary_data(inputs: list[dict[str, Any]], blob: bytes, message: str) -> None:
    body, header_length = _binary_case(inputs, blob)
    with pytest.raises(InvalidArgumentError, match=message.replace("[", r"\[")):
        v2_http.decode_infer_request("m", "", body, header_length)


def test_binary_input_without_header_length_uses_tritons_message() -> None:
    body = orjson.dumps({"inputs": [_bin()]})
    with pytest.raises(
        InvalidArgumentError, match="must specify valid 'Infer-Header-Content-Length'"
    ):
        v2_http.decode_infer_request("m", "", body, None)


@pytest.mark.parametrize("header_length", [-1, 10_000])
def test_header_length_outside_body(header_length: int) -> None:
    with pytest.raises(InvalidArgumentError, match="outside the request body"):
        v2_http.decode_infer_request("m", "", b'{"inputs": []}', header_length)


def test_unsupported_features_are_unsupported_errors() -> None:
    with pytest.raises(UnsupportedError, match="raw binary"):
        v2_http.decode_infer_request("m", "", b"\0\0\0\0", 0)
    shm = {
        "name": "X",
        "datatype": "INT32",
        "shape": [1],
        "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 4},
    }
    # without a registry of regions (a server with the extension off)
    with pytest.raises(UnsupportedError, match="shared memory, which is not enabled"):
        v2_http.decode_infer_request("m", "", orjson.dumps({"inputs": [shm]}), None)
    params = {"shared_memory_region": "r", "shared_memory_byte_size": 4}
    out = {"inputs": [], "outputs": [{"name": "Y", "parameters": params}]}
    with pytest.raises(UnsupportedError, match="output 'Y' uses shared memory"):
        v2_http.decode_infer_request("m", "", orjson.dumps(out), None)


def test_empty_binary_bytes_tensor() -> None:
    body, header_length = _binary_case([_bin(datatype="BYTES", shape=[0], size=0)], b"")
    request = v2_http.decode_infer_request("m", "", body, header_length)
    assert request.inputs["X"].shape == (0,)
    assert serialize_bytes_elements([]) == b""


# -- HTTP edge helpers --------------------------------------------------------------------------


def test_every_error_code_has_an_http_status() -> None:
    assert set(HTTP_STATUS) == set(ErrorCode)
    assert HTTP_STATUS[ErrorCode.UNSUPPORTED] == 501
    assert HTTP_STATUS[ErrorCode.DEADLINE_EXCEEDED] == 504


@pytest.mark.parametrize(
    ("path", "endpoint", "model", "version"),
    [
        ("/v2", Endpoint.SERVER_METADATA, "", ""),
        ("/v2/health/live", Endpoint.HEALTH_LIVE, "", ""),
        ("/v2/models/stats", Endpoint.ALL_STATS, "", ""),
        ("/v2/models/simple", Endpoint.MODEL_METADATA, "simple", ""),
        ("/v2/models/simple/versions/12/infer", Endpoint.MODEL_INFER, "simple", "12"),
        ("/v2/models/a%20b/ready", Endpoint.MODEL_READY, "a b", ""),
        ("/v2/models/simple/config", Endpoint.MODEL_CONFIG, "simple", ""),
        ("/v2/repository/index", Endpoint.REPOSITORY_INDEX, "", ""),
        ("/v2/repository/models/x/unload", Endpoint.REPOSITORY_UNLOAD, "x", ""),
    ],
)
def test_routes(path: str, endpoint: Endpoint, model: str, version: str) -> None:
    route = match_route(path)
    assert route is not None
    assert (route.endpoint, route.model, route.version) == (endpoint, model, version)


@pytest.mark.parametrize(
    "path", ["/", "/v2/", "/v2/models", "/v2/models/m/versions/x", "/v2/models/m/infer/x", "/v1"]
)
def test_unknown_routes(path: str) -> None:
    assert match_route(path) is None


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        (None, "identity"),
        ("gzip, deflate", "gzip"),
        ("deflate, gzip", "deflate"),
        ("gzip;q=0.5, deflate", "deflate"),
        ("gzip;q=0, br", "identity"),
        ("br", "identity"),
        ("identity;q=0.9, gzip;q=0.8", "identity"),
        ("GZIP;q=bad, deflate;q=0.1", "deflate"),
    ],
)
def test_response_coding_choice(accept: str | None, coding: str) -> None:
    assert choose_response_coding(accept) == coding


def test_request_decompression_is_bounded() -> None:
    data = b"x" * 1000
    assert decompress_request(gzip.compress(data), "gzip", 1000) == data
    assert decompress_request(zlib.compress(data), "Deflate", 1000) == data
    assert decompress_request(data, "identity", 1000) == data
    with pytest.raises(HttpStatusError) as info:
        decompress_request(gzip.compress(data), "gzip", 999)
    assert info.value.status == 413
    with pytest.raises(InvalidArgumentError, match="'br'"):
        decompress_request(data, "br", 1000)
    with pytest.raises(InvalidArgumentError, match="decompress"):
        decompress_request(data, "gzip", 1000)
    with pytest.raises(InvalidArgumentError, match="truncated"):
        decompress_request(zlib.compress(data)[:-3], "deflate", 1000)
    assert gzip.decompress(compress_response(data, "gzip")) == data
    assert zlib.decompress(compress_response(data, "deflate")) == data
