"""What the gRPC fuzz sends: hypothesis strategies for calls that tritonclient would never make.

Four families, each a strategy of :class:`GrpcCase`: ``ModelInfer`` requests to the fuzz server's
models with one or more flaws (:data:`FLAWS`), ``ModelStreamInfer`` streams of such requests and
of bytes that do not parse, the RPCs that name a model, a region or a health service with odd
arguments (load overrides included), and bytes that are not a valid protobuf message. The
requests are built from the models' real inputs, so that most cases are wrong in one place only
and reach the check of that place.
"""

from __future__ import annotations

import importlib.util
import json
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2, service_pb2

from inferd.core import datatypes
from tests.fuzz.conftest import FUZZ_MODELS

SERVICE = "/inference.GRPCInferenceService/"
HEALTH = "/grpc.health.v1.Health/"
#: the server adds ``grpc.health.v1.Health`` when grpcio-health-checking is installed
HAS_HEALTH_SERVICE = importlib.util.find_spec("grpc_health") is not None


@dataclass(frozen=True)
class GrpcCase:
    """One call: an RPC and its request (a message, stream messages, or raw bytes)."""

    family: str
    method: str  # e.g. "ModelInfer", or "/grpc.health.v1.Health/Watch" outside the service
    request: Any  # a message or bytes; a list of them for a request stream
    metadata: tuple[tuple[str, str], ...] = ()
    server_streaming: bool = False  # a unary-stream RPC (health Watch)
    unknown_method: bool = False  # grpc's own UNIMPLEMENTED "Method not found!" is expected

    @property
    def path(self) -> str:
        return self.method if self.method.startswith("/") else SERVICE + self.method

    def __repr__(self) -> str:  # what a failure prints: enough to replay it
        def shown(item: Any) -> str:
            if isinstance(item, bytes):
                return repr(item if len(item) <= 400 else item[:400] + b"...")
            text = f"{type(item).__name__}({str(item)[:1500]})"
            return text.replace("\n", " ")

        body = (
            "[" + ", ".join(shown(m) for m in self.request) + "]"
            if isinstance(self.request, list)
            else shown(self.request)
        )
        return f"GrpcCase({self.family!r}, {self.path}, metadata={self.metadata}, {body})"


# -- building blocks ----------------------------------------------------------------------------


class Served(NamedTuple):
    """What a served model takes: every input is ``datatype`` of shape ``[rows, width]``."""

    datatype: str
    width: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    max_batch: int


MODELS = {
    "simple": Served("INT32", 16, ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1"), 8),
    "simple_int8": Served("INT8", 16, ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1"), 8),
    "simple_string": Served("BYTES", 16, ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1"), 8),
    "digits": Served("FP32", 64, ("input",), ("label", "probabilities"), 32),
}
assert set(MODELS) == set(FUZZ_MODELS)

_DATATYPES = [d.name for d in datatypes.ALL]
_ODD_DATATYPES = ["int32", "", "STRING", "TYPE_INT32", "FP8", "INT32\x00", "INT 32", "\u0130NT32"]
_ITEMSIZE = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2}
_ITEMSIZE |= {"UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8}
_CONTENT_FIELDS = [f.name for f in service_pb2.InferTensorContents.DESCRIPTOR.fields]

#: names that cannot be a model's, or that try to leave the repository
BAD_NAMES = [
    "",
    ".",
    "..",
    "/",
    "../simple",
    "simple/../digits",
    "simple/",
    "/etc/passwd",
    "a\\b",
    "simple\x00",
    "\x00",
    "sim\x00ple",
    "simple\n",
    "\x7f",
    " simple",
    "simple ",
    "a" * 255,
    "a" * 256,
    "a" * 300,
    "\u00e9" * 128,  # 128 characters, 256 bytes
    "\u202esimple",
    "\ufeffsimple",
    "\U0001f600",
    "\u0085",
    "\u2028",
    "simple\ud7ff",
    "%2e%2e",
    "~root",
    "CON",
    "-simple",
    "simple.",
    "nonexistent",
    "SIMPLE",
    "simple_identity",  # in the repository, not loaded
    "digits_cnn",
]
_NAMES = st.sampled_from(BAD_NAMES) | st.text(max_size=12) | st.sampled_from(FUZZ_MODELS)
VERSIONS = [
    "",
    "1",
    "2",
    "0",
    "-1",
    "abc",
    "1.5",
    " 1",
    "1 ",
    "+1",
    "0x1",
    "1_0",
    "\u0661",  # ARABIC-INDIC DIGIT ONE: int() reads it as 1
    "1\x00",
    "99999999999999999999",
    "9223372036854775808",
    "-9223372036854775809",
    "1e3",
]
_VERSIONS = st.sampled_from(VERSIONS) | st.text(max_size=6)

_INT64 = st.integers(-(2**63), 2**63 - 1)
_UINT64 = st.integers(0, 2**64 - 1)
_EDGE_INTS = st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)])
_TEXT = st.text(max_size=16) | st.sampled_from(["", "1", "true", "\x00", "\ud7ff" * 3, "x" * 500])

#: parameter keys the server reads somewhere, and some it does not
PARAM_KEYS = [
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
    "triton_enable_empty_final_response",
    "triton_final_response",
    "binary_data_output",
    "binary_data",
    "binary_data_size",
    "classification",
    "shared_memory_region",
    "shared_memory_byte_size",
    "shared_memory_offset",
    "headers",
    "max_tokens",
    "",
    "\x00",
]
_PARAM_KEYS = st.sampled_from(PARAM_KEYS) | st.text(max_size=8)


@st.composite
def infer_parameter(draw: st.DrawFn) -> service_pb2.InferParameter:
    """An ``InferParameter`` of any kind (or of none: the oneof left unset)."""
    param = service_pb2.InferParameter()
    kind = draw(st.integers(0, 5))
    if kind == 0:
        param.bool_param = draw(st.booleans())
    elif kind == 1:
        param.int64_param = draw(_EDGE_INTS | _INT64 | st.integers(-5, 20))
    elif kind == 2:
        param.uint64_param = draw(_UINT64 | st.integers(0, 20) | st.just(2**64 - 1))
    elif kind == 3:
        param.double_param = draw(st.floats() | st.sampled_from([math.nan, -math.inf, 3.0]))
    elif kind == 4:
        param.string_param = draw(_TEXT)
    return param


def fill_parameters(target: Any, params: dict[str, service_pb2.InferParameter]) -> None:
    for key, value in params.items():
        target[key].CopyFrom(value)


_PARAMS = st.dictionaries(_PARAM_KEYS, infer_parameter(), min_size=1, max_size=3)


def bytes_elements(items: Sequence[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def valid_request(model: str, rows: int = 1) -> service_pb2.ModelInferRequest:
    """A request the model accepts: raw contents, as tritonclient sends them."""
    datatype, width, inputs, _, _ = MODELS[model]
    msg = service_pb2.ModelInferRequest(model_name=model)
    for index, name in enumerate(inputs):
        msg.inputs.add(name=name, datatype=datatype, shape=[rows, width])  # data: raw contents
        count = rows * width
        if datatype == "BYTES":
            raw = bytes_elements([str(i + index).encode() for i in range(count)])
        else:
            raw = bytes(count * _ITEMSIZE[datatype])
        msg.raw_input_contents.append(raw)
    return msg


# -- ModelInfer requests ------------------------------------------------------------------------

#: sizes of the "large" payloads. Kept to a few MiB: glibc serves freed blocks of this size again
#: from its arenas rather than returning them at once, so larger payloads make the server's RSS
#: after a run depend on the allocator's high-water mark more than on what the server keeps.
LARGE_PAYLOAD_BYTES = (256 << 10, 1 << 20, 4 << 20)

FLAWS = [
    "none",
    "name",
    "version",
    "datatype",
    "shape",
    "raw length",
    "raw count",
    "contents",
    "mixed",
    "input names",
    "parameters",
    "input parameters",
    "outputs",
    "classification",
    "bytes prefixes",
    "large",
]


def _flaw_shape(draw: st.DrawFn, msg: Any, victim: Any, width: int, max_batch: int) -> None:
    choice = draw(st.integers(0, 7))
    if choice == 0:  # negative dims
        shape = draw(st.lists(st.integers(-(2**63), -1), min_size=1, max_size=3))
        shape += draw(st.lists(st.integers(0, 20), max_size=2))
        shape = draw(st.permutations(shape))
    elif choice == 1:  # huge dims (zero elements or not)
        shape = [draw(st.sampled_from([0, 1, 2])), draw(st.integers(2**31, 2**63 - 1))]
    elif choice == 2:  # 65 dims (numpy's limit is 64), or just over the server's limit
        ones = draw(st.sampled_from([33, 64, 65, 100]))
        shape = [1] * ones
    elif choice == 3:  # zero somewhere
        shape = draw(st.sampled_from([[0, width], [1, 0], [0], [0, 0, 0], [0, 2**62, 2**62]]))
    elif choice == 4:  # scalar, or rank off by one
        shape = draw(st.sampled_from([[], [width], [1, 1, width], [width, 1]]))
    elif choice == 5:  # more rows than max_batch_size, wrong width
        shape = draw(
            st.sampled_from([[max_batch + 1, width], [1, width + 1], [1, width - 1], [2, width]])
        )
    elif choice == 6:  # the product overflows int64
        shape = [2**32, 2**32, 2**32]
    else:
        shape = draw(st.lists(st.integers(-3, 70), max_size=6))
    del victim.shape[:]
    victim.shape.extend(shape)
    if draw(st.booleans()):  # keep the data consistent with the shape where it is small
        count = math.prod(shape) if all(0 <= d < 1000 for d in shape) else 0
        index = list(msg.inputs).index(victim)
        if index < len(msg.raw_input_contents) and count <= 100_000:
            size = _ITEMSIZE.get(victim.datatype, 4)
            if victim.datatype == "BYTES":
                msg.raw_input_contents[index] = bytes_elements([b"1"] * count)
            else:
                msg.raw_input_contents[index] = bytes(count * size)


def _flaw_contents(draw: st.DrawFn, msg: Any, model: str, mixed: bool) -> None:
    datatype, width, _, _, _ = MODELS[model]
    index = draw(st.integers(0, len(msg.inputs) - 1))
    victim = msg.inputs[index]
    if not mixed:
        del msg.raw_input_contents[:]
    field = draw(st.sampled_from(_CONTENT_FIELDS))
    count = draw(st.sampled_from([width, 0, 1, width - 1, width + 1, 3 * width]))
    if field == "bool_contents":
        values: list[Any] = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    elif field == "bytes_contents":
        values = draw(st.lists(st.binary(max_size=6), min_size=count, max_size=count))
    elif field in ("fp32_contents", "fp64_contents"):
        values = draw(st.lists(st.floats(width=32), min_size=count, max_size=count))
    elif field in ("int_contents",):
        values = draw(
            st.lists(
                st.integers(-(2**31), 2**31 - 1) | st.integers(-200, 300),
                min_size=count,
                max_size=count,
            )
        )
    elif field == "int64_contents":
        values = draw(st.lists(_INT64, min_size=count, max_size=count))
    elif field == "uint_contents":
        values = draw(st.lists(st.integers(0, 2**32 - 1), min_size=count, max_size=count))
    else:
        values = draw(st.lists(_UINT64, min_size=count, max_size=count))
    getattr(victim.contents, field).extend(values)
    if draw(st.integers(0, 3)) == 0:  # a second field as well
        other = draw(st.sampled_from(_CONTENT_FIELDS))
        if other != field and other != "bytes_contents" and other != "bool_contents":
            getattr(victim.contents, other).extend([1] * width)
    if not mixed and draw(st.booleans()):  # every input typed (valid for the right field)
        for tensor in msg.inputs:
            if tensor is not victim and datatype != "BYTES":
                tensor.contents.int_contents.extend([1] * width)


def _flaw_bytes_prefixes(draw: st.DrawFn, msg: Any, width: int) -> None:
    """BYTES elements whose 4-byte length prefixes do not match the data."""
    elements = [b"7"] * width
    blob = bytearray(bytes_elements(elements))
    choice = draw(st.integers(0, 5))
    if choice == 0:  # a prefix claims more than what remains
        at = 5 * draw(st.integers(0, width - 1))
        struct.pack_into("<I", blob, at, draw(st.sampled_from([2, 100, 2**31, 2**32 - 1])))
    elif choice == 1:  # cut inside a prefix or an element
        blob = blob[: draw(st.integers(0, len(blob) - 1))]
    elif choice == 2:  # bytes left over
        blob += draw(st.binary(min_size=1, max_size=7))
    elif choice == 3:  # fewer or more elements than the shape holds
        blob = bytearray(
            bytes_elements([b"7"] * draw(st.sampled_from([0, 1, width - 1, width + 1])))
        )
    elif choice == 4:  # zero-length and non-numeric elements (the model parses them as integers)
        blob = bytearray(
            bytes_elements(
                draw(
                    st.lists(
                        st.sampled_from([b"", b"x", b"\xff\xfe", b"-", b"99999999999", b" 1"]),
                        min_size=width,
                        max_size=width,
                    )
                )
            )
        )
    else:  # random bytes
        blob = bytearray(draw(st.binary(max_size=5 * width + 8)))
    index = draw(st.integers(0, len(msg.raw_input_contents) - 1))
    msg.raw_input_contents[index] = bytes(blob)


@st.composite
def infer_requests(draw: st.DrawFn) -> service_pb2.ModelInferRequest:
    """A ``ModelInferRequest`` to a served model with zero or more flaws."""
    model = draw(st.sampled_from(FUZZ_MODELS))
    datatype, width, _, output_names, max_batch = MODELS[model]
    msg = valid_request(model, rows=draw(st.sampled_from([1, 1, 2, max_batch])))
    msg.id = draw(st.sampled_from(["", "req-1", "\x00", "\U0001f600" * 3, "i" * 1000]))
    flaws = draw(st.lists(st.sampled_from(FLAWS), min_size=1, max_size=3, unique=True))
    if datatype == "BYTES" and "bytes prefixes" not in flaws and draw(st.integers(0, 3)) == 0:
        flaws.append("bytes prefixes")
    for flaw in flaws:
        victim = msg.inputs[draw(st.integers(0, len(msg.inputs) - 1))] if msg.inputs else None
        if flaw == "name":
            msg.model_name = draw(_NAMES)
        elif flaw == "version":
            msg.model_version = draw(_VERSIONS)
        elif flaw == "datatype" and victim is not None:
            victim.datatype = draw(
                st.sampled_from(_DATATYPES).filter(lambda d: d != datatype)
                | st.sampled_from(_ODD_DATATYPES)
            )
        elif flaw == "shape" and victim is not None:
            _flaw_shape(draw, msg, victim, width, max_batch)
        elif flaw == "raw length" and msg.raw_input_contents:
            index = draw(st.integers(0, len(msg.raw_input_contents) - 1))
            raw = msg.raw_input_contents[index]
            cut = draw(st.integers(-len(raw), 64).filter(lambda n: n != 0))
            msg.raw_input_contents[index] = raw[:cut] if cut < 0 else raw + bytes(cut)
        elif flaw == "raw count":
            choice = draw(st.integers(0, 2))
            if choice == 0:
                msg.raw_input_contents.append(draw(st.binary(max_size=64)))
            elif choice == 1 and msg.raw_input_contents:
                del msg.raw_input_contents[-1]
            else:
                del msg.raw_input_contents[:]
        elif flaw in ("contents", "mixed") and msg.inputs:
            _flaw_contents(draw, msg, model, mixed=flaw == "mixed")
        elif flaw == "input names":
            choice = draw(st.integers(0, 3))
            if choice == 0 and victim is not None:
                victim.name = draw(st.sampled_from(["", "INPUT2", "input0", "\x00", "x" * 300]))
            elif choice == 1 and victim is not None:  # the same input twice
                msg.inputs.add().CopyFrom(victim)
                if msg.raw_input_contents:
                    msg.raw_input_contents.append(msg.raw_input_contents[0])
            elif choice == 2 and msg.inputs:  # an input missing
                del msg.inputs[-1]
                if msg.raw_input_contents:
                    del msg.raw_input_contents[-1]
            else:  # no inputs at all
                del msg.inputs[:]
                if draw(st.booleans()):
                    del msg.raw_input_contents[:]
        elif flaw == "parameters":
            fill_parameters(msg.parameters, draw(_PARAMS))
        elif flaw == "input parameters" and victim is not None:
            fill_parameters(victim.parameters, draw(_PARAMS))
        elif flaw == "outputs":
            names = draw(
                st.lists(
                    st.sampled_from([*output_names, "OUTPUT2", "", "\x00", "label\x00", "x" * 300]),
                    min_size=1,
                    max_size=4,
                )
            )
            for name in names:
                out = msg.outputs.add(name=name)
                if draw(st.integers(0, 2)) == 0:
                    fill_parameters(out.parameters, draw(_PARAMS))
        elif flaw == "classification":
            out = msg.outputs.add(name=draw(st.sampled_from([*output_names, "nope"])))
            param = service_pb2.InferParameter()
            kind = draw(st.integers(0, 4))
            if kind == 0:
                param.int64_param = draw(st.sampled_from([1, 3, 10, 11, 0, -1, 2**63 - 1]))
            elif kind == 1:
                param.uint64_param = draw(st.sampled_from([1, 3, 2**63, 2**64 - 1]))
            elif kind == 2:
                param.string_param = draw(st.sampled_from(["3", "", "x"]))
            elif kind == 3:
                param.double_param = draw(st.sampled_from([2.0, 0.5, math.nan]))
            else:
                param.bool_param = True
            out.parameters["classification"].CopyFrom(param)
        elif flaw == "bytes prefixes" and msg.raw_input_contents:
            _flaw_bytes_prefixes(draw, msg, width)
        elif flaw == "large" and msg.inputs:
            # a payload in the megabytes, of the wrong size: refused, then freed
            size = draw(st.sampled_from(LARGE_PAYLOAD_BYTES)) + draw(st.integers(1, 7))
            if not msg.raw_input_contents:
                msg.raw_input_contents.append(b"")
            msg.raw_input_contents[0] = bytes(size)
    return msg


def infer_cases() -> st.SearchStrategy[GrpcCase]:
    return infer_requests().map(lambda msg: GrpcCase("infer", "ModelInfer", msg))


# -- streams ------------------------------------------------------------------------------------

_GARBAGE = st.binary(min_size=1, max_size=40).filter(lambda b: not _parses(b))


def _parses(data: bytes) -> bool:
    try:
        service_pb2.ModelInferRequest.FromString(data)
    except Exception:
        return False
    return True


@st.composite
def stream_cases(draw: st.DrawFn) -> GrpcCase:
    """Two to six requests on one stream: flawed or valid messages, and bytes that do not parse."""
    items: list[Any] = draw(
        st.lists(
            infer_requests() | st.sampled_from(FUZZ_MODELS).map(valid_request) | _GARBAGE,
            min_size=2,
            max_size=6,
        )
    )
    metadata = (("triton_grpc_error", "true"),) if draw(st.integers(0, 4)) == 0 else ()
    return GrpcCase("stream", "ModelStreamInfer", items, metadata)


# -- metadata, configuration, statistics and repository RPCs ------------------------------------


#: load overrides answered today as the client's error (or loaded): each reaches a different check
CONFIG_OVERRIDES = [
    "{}",
    "not json",
    "[]",
    "null",
    '"text"',
    '{"max_batch_size": -1}',
    '{"max_batch_size": 4}',
    '{"max_batch_size": 99999999999999999999}',
    '{"max_batch_size": 1e400}',
    '{"name": "other"}',
    '{"name": "simple\\u0000"}',
    '{"backend": "python"}',
    '{"platform": "x"}',
    '{"input": 5}',
    '{"input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}]}',
    '{"output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [-2]}]}',
    '{"parameters": {"x": {"string_value": 1}}}',
    '{"dynamic_batching": {"max_queue_delay_microseconds": 18446744073709551615}}',
    '{"optimization": {"priority": "PRIORITY_MAX"}}',
    '{"model_warmup": [{"name": "w", "batch_size": 100000000, "inputs": {"INPUT0": '
    '{"data_type": "TYPE_INT32", "dims": [1000000000], "zero_data": true}}}]}',
    "[" * 50 + "]" * 50,
    "[" * 5000 + "]" * 5000,
    '{"instance_group": [{"count": 100000}]}',
    '{"default_model_filename": "../../../../../etc/hostname"}',
    '{"version_policy": {"specific": {"versions": [-1, 99]}}}',
    '{"default_model_filename": "a\\u0000b"}',
    '{"output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16], '
    '"label_filename": "../../etc/passwd"}]}',
]
_CONFIG_FIELDS = [f.name for f in model_config_pb2.ModelConfig.DESCRIPTOR.fields]
_JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | _TEXT
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_CONFIG_JSON = st.one_of(
    st.sampled_from(CONFIG_OVERRIDES),
    st.dictionaries(st.sampled_from(_CONFIG_FIELDS), _JSON, min_size=1, max_size=3).map(json.dumps),
    _JSON.map(json.dumps),
    st.text(max_size=20),
)


def _repository_parameter(draw: st.DrawFn, key: str) -> service_pb2.ModelRepositoryParameter:
    """A parameter of any kind (or none); ``config`` mostly carries JSON text."""
    param = service_pb2.ModelRepositoryParameter()
    kind = draw(st.integers(0, 5))
    if key == "config" and kind < 4:
        param.string_param = draw(_CONFIG_JSON)
    elif kind == 0 or (key == "unload_dependents" and kind < 3):
        param.bool_param = draw(st.booleans())
    elif kind == 1:
        param.int64_param = draw(_EDGE_INTS)
    elif kind == 2:
        param.string_param = draw(_TEXT)
    elif kind == 3:
        param.bytes_param = draw(st.binary(max_size=64))
    return param


_LOAD_KEYS = st.sampled_from(
    [
        *["config"] * 3,
        *["unload_dependents"] * 2,
        *["file:1/model.onnx", "file:../x", "file:", "file:/etc/x", ""],
    ]
) | st.text(max_size=8)
#: names a load may name: the served models, and names that are no model's. The repository's
#: Python and PyTorch models are left out, to keep worker processes and PyTorch out of the run.
_LOAD_NAMES = st.one_of(
    *[st.sampled_from(FUZZ_MODELS)] * 3,
    st.sampled_from([n for n in BAD_NAMES if n not in ("simple_identity", "digits_cnn")]),
    st.text(max_size=12),
)

_REPOSITORY_METHODS = [
    *["ModelMetadata", "ModelConfig", "ModelReady", "ModelStatistics"] * 2,
    "RepositoryIndex",
    *["RepositoryModelLoad"] * 4,
    *["RepositoryModelUnload"] * 2,
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "TraceSetting",
    "LogSettings",
    "Check",
    "Watch",
]


@st.composite
def repository_cases(draw: st.DrawFn) -> GrpcCase:
    """The RPCs that name a model or a region, and the health service, with odd arguments."""
    method = draw(st.sampled_from(_REPOSITORY_METHODS))
    request: Any
    if method in ("ModelMetadata", "ModelConfig", "ModelReady", "ModelStatistics"):
        request = getattr(service_pb2, f"{method}Request")(
            name=draw(_NAMES), version=draw(_VERSIONS)
        )
    elif method == "RepositoryIndex":
        request = service_pb2.RepositoryIndexRequest(
            repository_name=draw(st.sampled_from(["", ".."]) | _NAMES), ready=draw(st.booleans())
        )
    elif method in ("RepositoryModelLoad", "RepositoryModelUnload"):
        request = getattr(service_pb2, f"{method}Request")(model_name=draw(_LOAD_NAMES))
        if draw(st.integers(0, 9)) == 0:
            request.repository_name = draw(st.sampled_from(["..", "models", "\x00"]))
        choice = draw(st.integers(0, 4))
        if method == "RepositoryModelLoad" and choice < 3:  # a configuration override
            keys = ["config"]
        elif method == "RepositoryModelUnload" and choice < 3:
            keys = ["unload_dependents"] if choice else []
        else:
            keys = draw(st.lists(_LOAD_KEYS, max_size=3, unique=True))
        for key in keys:
            request.parameters[key].CopyFrom(_repository_parameter(draw, key))
    elif method.startswith("SystemSharedMemory") or method.startswith("CudaSharedMemory"):
        request = getattr(service_pb2, f"{method}Request")(name=draw(_NAMES))
        if method == "SystemSharedMemoryRegister":
            request.key = draw(st.sampled_from(["/shm", "", "../x", "\x00"]))
            request.offset = draw(st.sampled_from([0, 2**64 - 1]))
            request.byte_size = draw(st.sampled_from([0, 64, 2**64 - 1]))
        elif method == "CudaSharedMemoryRegister":
            request.raw_handle = draw(st.binary(max_size=16))
            request.device_id = draw(_EDGE_INTS)
            request.byte_size = draw(st.sampled_from([0, 2**64 - 1]))
    elif method == "TraceSetting":
        request = service_pb2.TraceSettingRequest(model_name=draw(_NAMES))
        request.settings[draw(_TEXT)].value.extend(draw(st.lists(_TEXT, max_size=2)))
    elif method == "LogSettings":
        request = service_pb2.LogSettingsRequest()
        setting = request.settings[draw(_TEXT)]
        choice = draw(st.integers(0, 2))
        if choice == 0:
            setting.bool_param = draw(st.booleans())
        elif choice == 1:
            setting.uint32_param = draw(st.integers(0, 2**32 - 1))
        else:
            setting.string_param = draw(_TEXT)
    else:  # grpc.health.v1: Check, and Watch (a server stream, not supported)
        return GrpcCase(
            "repository",
            HEALTH + method,
            health_check_request(draw(_NAMES)),
            server_streaming=method == "Watch",
            unknown_method=not HAS_HEALTH_SERVICE,
        )
    return GrpcCase("repository", method, request)


# -- bytes that are not a valid message ---------------------------------------------------------

_UNARY_METHODS = [
    *[
        m.name
        for m in service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods
        if not (m.client_streaming or m.server_streaming)
    ],
    HEALTH + "Check",
]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def health_check_request(service: str) -> bytes:
    """``grpc.health.v1.HealthCheckRequest(service=...)``, encoded here: the health service
    is served only when grpcio-health-checking is installed, and the test does not need it."""
    data = service.encode("utf-8", "surrogatepass")
    return _tag(1, 2) + _varint(len(data)) + data if data else b""


@st.composite
def crafted_bytes(draw: st.DrawFn) -> bytes:
    """Protobuf framing that lies: lengths past the end, wrong wire types, runaway varints,
    invalid UTF-8 in string fields, groups nested past any recursion limit."""
    choice = draw(st.integers(0, 7))
    if choice == 0:  # a length-delimited field claiming more than what follows
        return _tag(draw(st.integers(1, 8)), 2) + _varint(draw(st.integers(5, 2**40))) + b"ab"
    if choice == 1:  # a string field as a varint, a fixed64 or a group
        return _tag(1, draw(st.sampled_from([0, 1, 3, 4, 5]))) + b"\x01" * 8
    if choice == 2:  # a varint that never ends, or runs past 10 bytes
        return _tag(draw(st.integers(1, 20)), 0) + b"\xff" * draw(st.integers(1, 20))
    if choice == 3:  # invalid UTF-8 in model_name / name (field 1)
        bad = draw(st.sampled_from([b"\xff", b"\xc0\xae", b"\xed\xa0\x80", b"a\x80b"]))
        return _tag(1, 2) + _varint(len(bad)) + bad
    if choice == 4:  # unknown groups nested deeply
        depth = draw(st.sampled_from([10, 99, 101, 1000, 20000]))
        return _tag(99, 3) * depth + _tag(99, 4) * depth
    if choice == 5:  # field number 0, or beyond the maximum
        return _varint(draw(st.sampled_from([0, 1, 2, 2**29 << 3, 2**35]))) + b"\x00"
    if choice == 6:  # nested messages (inputs, field 5) whose inner framing lies
        inner = _tag(3, 2) + _varint(50) + b"\x01"  # shape, packed, too long
        return _tag(5, 2) + _varint(len(inner)) + inner
    # a map entry (parameters, field 4) whose value is not an InferParameter
    entry = _tag(1, 2) + b"\x01k" + _tag(2, 2) + b"\x03\xff\xff\xff"
    return _tag(4, 2) + _varint(len(entry)) + entry


@st.composite
def mutated_message(draw: st.DrawFn) -> bytes:
    """A valid serialized request, cut short, with bytes flipped, or with junk appended."""
    data = bytearray(draw(infer_requests()).SerializeToString())
    choice = draw(st.integers(0, 2))
    if choice == 0 and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif choice == 1 and data:
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    else:
        data += draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@st.composite
def bytes_cases(draw: st.DrawFn) -> GrpcCase:
    data = draw(st.binary(max_size=200) | crafted_bytes() | mutated_message())
    choice = draw(st.integers(0, 19))
    if choice == 0:
        method = draw(st.sampled_from(["ModelInfer2", "modelinfer", "", "/grpc.health.v1.Health/"]))
        return GrpcCase("bytes", method, data, unknown_method=True)
    if choice == 1:
        return GrpcCase(
            "bytes",
            HEALTH + "Watch",
            data,
            server_streaming=True,
            unknown_method=not HAS_HEALTH_SERVICE,
        )
    method = draw(st.sampled_from(_UNARY_METHODS))
    unknown = method.startswith(HEALTH) and not HAS_HEALTH_SERVICE
    return GrpcCase("bytes", method, data, unknown_method=unknown)


FAMILIES: dict[str, Callable[[], st.SearchStrategy[GrpcCase]]] = {
    "infer": infer_cases,
    "stream": stream_cases,
    "repository": repository_cases,
    "bytes": bytes_cases,
}


__all__ = ["FAMILIES", "FLAWS", "HEALTH", "MODELS", "SERVICE", "GrpcCase", "valid_request"]
