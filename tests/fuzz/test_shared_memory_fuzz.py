"""Offsets and byte sizes fuzzed against REAL shared-memory regions of a live ``inferd serve``.

The test creates two POSIX shared-memory objects (``/dev/shm``), fills one with known INT32
values and the other with a guard byte, and registers a window of each (at an offset that is not
a page boundary) with a server started with ``--allow-shared-memory=true``. Hypothesis then
sends, over HTTP and gRPC:

- registrations of new regions on those objects with offsets and byte sizes inside, at and past
  the object's end, zero, negative and huge; a registration that succeeds is read back through
  an inference (its first 64 bytes as ``simple``'s input) and unregistered;
- inferences on ``simple`` whose inputs are read from the input window and whose output is
  written to the output window at fuzzed offsets and byte sizes (in bounds, unaligned, at the
  end, past it, too small, too large, negative, huge), or name a region that does not exist.

Each answer is compared with what the rules predict (a window inside its region and, for an
input, exactly the tensor's 64 bytes; for an output, at least 64): an answer that should succeed
must be 200 / OK with the right sums, anything else a 4xx / a status that blames the client.
After every call the objects are checked byte by byte: the input object never changes, and the
output object changes only in the 64 bytes the answer was to go to (nothing at all when the
request was refused): the server never reads or writes out of bounds. Afterwards the server is
alive, its memory grew within the bound and its log holds no traceback.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import grpc
import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.testing import ServerProcess
from tests.fuzz.conftest import Tally, assert_server_healthy, rss_bytes

pytestmark = pytest.mark.timeout(300)

#: cases per family
EXAMPLES = {"register": 200, "infer": 600}
OBJECT_BYTES = 8192
IN_OFFSET, IN_BYTES = 100, 4096  # the registered input window (not page-aligned)
OUT_OFFSET, OUT_BYTES = 300, 4096
TENSOR_BYTES = 64  # simple: INT32 [1, 16]
GUARD = 0xA5
DEADLINE_S = 15.0
PREFIX = f"inferd-fuzz-{os.getpid()}"


@dataclass
class Objects:
    """The test's two shared-memory objects and what they must hold."""

    inputs: shared_memory.SharedMemory
    outputs: shared_memory.SharedMemory
    values: bytes  # the input object's content

    def input_at(self, object_offset: int) -> np.ndarray[Any, Any]:
        raw = self.values[object_offset : object_offset + TENSOR_BYTES]
        return np.frombuffer(raw, dtype="<i4").reshape(1, 16)

    def check_untouched(self, written: tuple[int, int] | None, expected: bytes | None) -> None:
        """The input object is as filled; the output object holds the guard byte everywhere
        but ``written`` (object offsets [start, end)), which must hold ``expected``."""
        assert bytes(self.inputs.buf) == self.values, "the input object was changed"
        out = bytes(self.outputs.buf)
        if written is None:
            assert out == bytes([GUARD]) * OBJECT_BYTES, "a refused request wrote output bytes"
            return
        start, end = written
        assert out[:start] == bytes([GUARD]) * start, "bytes written before the output window"
        assert out[end:] == bytes([GUARD]) * (OBJECT_BYTES - end), "bytes written past it"
        assert out[start:end] == expected, "the output holds the wrong values"
        self.outputs.buf[start:end] = bytes([GUARD]) * (end - start)


@pytest.fixture
def objects() -> Iterator[Objects]:
    made = [
        shared_memory.SharedMemory(name=f"{PREFIX}-{role}", create=True, size=OBJECT_BYTES)
        for role in ("in", "out")
    ]
    values = np.arange(OBJECT_BYTES // 4, dtype="<i4") * 7 - 1000
    made[0].buf[:OBJECT_BYTES] = values.tobytes()
    made[1].buf[:OBJECT_BYTES] = bytes([GUARD]) * OBJECT_BYTES
    try:
        yield Objects(made[0], made[1], values.tobytes())
    finally:
        for item in made:
            item.close()
            item.unlink()


# -- the cases ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    region: str
    offset: int
    byte_size: int


@dataclass(frozen=True)
class InferCase:
    protocol: str
    inputs: tuple[Window, Window]
    output: Window | None  # None: the output comes back in the answer


@dataclass(frozen=True)
class RegisterCase:
    protocol: str
    obj: str  # "in" or "out"
    offset: int
    byte_size: int


def _numbers(limit: int, protocol: str) -> st.SearchStrategy[int]:
    """Offsets or sizes around a window of ``limit`` bytes: inside, at the edges, past them,
    unaligned, negative and huge (gRPC carries int64, JSON any integer)."""
    huge = [2**31, 2**32 + 4, 2**63 - 1]
    if protocol == "http":
        huge += [2**64, 2**64 + 64]
    return st.one_of(
        st.integers(0, limit // 4).map(lambda n: n * 4),
        st.integers(0, limit),
        st.integers(limit - 2 * TENSOR_BYTES, limit + 8),
        st.sampled_from([0, 1, 3, 60, 63, 64, 65, 68, limit, -1, -4, -(2**63), *huge]),
    )


def _sizes(limit: int, protocol: str) -> st.SearchStrategy[int]:
    # mostly the right size, so that most requests get as far as their offsets
    return st.integers(0, 4).flatmap(
        lambda pick: _numbers(limit, protocol) if pick == 0 else st.just(TENSOR_BYTES)
    )


@st.composite
def infer_cases(draw: st.DrawFn) -> InferCase:
    protocol = draw(st.sampled_from(["http", "grpc"]))
    inputs = []
    for _ in range(2):
        region = draw(st.sampled_from(["fz_in"] * 12 + ["fz_out", "nowhere"]))
        aligned = st.integers(0, (IN_BYTES - TENSOR_BYTES) // 4).map(lambda n: n * 4)
        offset = draw(aligned if draw(st.integers(0, 3)) else _numbers(IN_BYTES, protocol))
        inputs.append(Window(region, offset, draw(_sizes(IN_BYTES, protocol))))
    output = None
    if draw(st.integers(0, 5)):
        # (never the input window: writing there is allowed, and would change the inputs)
        region = draw(st.sampled_from(["fz_out"] * 12 + ["nowhere"]))
        inside = st.integers(0, OUT_BYTES - TENSOR_BYTES)
        offset = draw(inside if draw(st.integers(0, 2)) else _numbers(OUT_BYTES, protocol))
        output = Window(region, offset, draw(_sizes(OUT_BYTES, protocol)))
    return InferCase(protocol, (inputs[0], inputs[1]), output)


@st.composite
def register_cases(draw: st.DrawFn) -> RegisterCase:
    protocol = draw(st.sampled_from(["http", "grpc"]))
    offset = draw(_numbers(OBJECT_BYTES, protocol))
    return RegisterCase(
        protocol,
        draw(st.sampled_from(["in", "out"])),
        offset,
        draw(st.one_of(st.integers(1, OBJECT_BYTES), _numbers(OBJECT_BYTES, protocol))),
    )


# -- sending ------------------------------------------------------------------------------------


class Client:
    """One keep-alive HTTP connection and one gRPC channel to the server."""

    def __init__(self, server: ServerProcess) -> None:
        host, port = server.http_url.rsplit(":", 1)
        self._http = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_S)
        self._channel = grpc.insecure_channel(server.grpc_url)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)

    def close(self) -> None:
        self._http.close()
        self._channel.close()

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        self._http.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = self._http.getresponse()
        data = reply.read()
        return reply.status, json.loads(data) if data else None

    def grpc(self, method: str, request: Any) -> tuple[grpc.StatusCode, Any]:
        try:
            return grpc.StatusCode.OK, getattr(self.stub, method)(request, timeout=DEADLINE_S)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()


def _param(value: int) -> service_pb2.InferParameter:
    return service_pb2.InferParameter(int64_param=value)


def _infer(client: Client, case: InferCase) -> tuple[bool, np.ndarray[Any, Any] | None, str]:
    """Send ``case``; (succeeded, OUTPUT0 when it came back in the answer, the outcome)."""
    if case.protocol == "http":
        body: dict[str, Any] = {
            "inputs": [
                {
                    "name": name,
                    "datatype": "INT32",
                    "shape": [1, 16],
                    "parameters": {
                        "shared_memory_region": w.region,
                        "shared_memory_offset": w.offset,
                        "shared_memory_byte_size": w.byte_size,
                    },
                }
                for name, w in zip(("INPUT0", "INPUT1"), case.inputs, strict=True)
            ],
            "outputs": [{"name": "OUTPUT0"}],
        }
        if case.output is not None:
            body["outputs"][0]["parameters"] = {
                "shared_memory_region": case.output.region,
                "shared_memory_offset": case.output.offset,
                "shared_memory_byte_size": case.output.byte_size,
            }
        status, answer = client.post("/v2/models/simple/infer", body)
        assert status == 200 or 400 <= status < 500, f"HTTP {status} {answer} for {case}"
        if status != 200:
            return False, None, f"http {status}"
        (out,) = answer["outputs"]
        data = None if case.output is not None else np.array(out["data"], np.int32)
        return True, data, "http 200"
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name, w in zip(("INPUT0", "INPUT1"), case.inputs, strict=True):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.parameters["shared_memory_region"].string_param = w.region
        tensor.parameters["shared_memory_offset"].CopyFrom(_param(w.offset))
        tensor.parameters["shared_memory_byte_size"].CopyFrom(_param(w.byte_size))
    wanted = request.outputs.add(name="OUTPUT0")
    if case.output is not None:
        wanted.parameters["shared_memory_region"].string_param = case.output.region
        wanted.parameters["shared_memory_offset"].CopyFrom(_param(case.output.offset))
        wanted.parameters["shared_memory_byte_size"].CopyFrom(_param(case.output.byte_size))
    code, reply = client.grpc("ModelInfer", request)
    assert code in (
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.OUT_OF_RANGE,
    ), f"gRPC {code.name} {reply!r} for {case}"
    if code is not grpc.StatusCode.OK:
        return False, None, f"grpc {code.name}"
    data = None
    if case.output is None:
        data = np.frombuffer(reply.raw_output_contents[0], dtype="<i4")
    return True, data, "grpc OK"


def _input_ok(w: Window) -> bool:
    return (
        w.region == "fz_in"
        and w.offset >= 0
        and w.byte_size == TENSOR_BYTES
        and (w.offset + w.byte_size <= IN_BYTES)
    )


def _output_ok(w: Window | None) -> bool:
    return w is None or (
        w.region == "fz_out"
        and w.offset >= 0
        and w.byte_size >= TENSOR_BYTES
        and w.offset + w.byte_size <= OUT_BYTES
    )


def _input_ok_anywhere(w: Window) -> bool:
    """An input from the output window (holding guard bytes) is valid as well."""
    limit = {"fz_in": IN_BYTES, "fz_out": OUT_BYTES}.get(w.region)
    return (
        limit is not None
        and w.offset >= 0
        and w.byte_size == TENSOR_BYTES
        and w.offset + w.byte_size <= limit
    )


def check_infer(client: Client, objects: Objects, case: InferCase, tally: Tally) -> None:
    predicted = all(_input_ok_anywhere(w) for w in case.inputs) and _output_ok(case.output)
    succeeded, data, outcome = _infer(client, case)
    tally.record(outcome)
    assert succeeded == predicted, f"{outcome}, predicted {'success' if predicted else 'refusal'}"
    if not succeeded:
        objects.check_untouched(None, None)
        return
    a, b = (
        objects.input_at(IN_OFFSET + w.offset)
        if w.region == "fz_in"
        else np.full((1, 16), np.frombuffer(bytes([GUARD]) * 4, "<i4")[0])
        for w in case.inputs
    )
    expected = (a + b).astype("<i4")
    if case.output is None:
        assert data is not None
        np.testing.assert_array_equal(data.reshape(1, 16), expected, err_msg=repr(case))
        objects.check_untouched(None, None)
    else:
        start = OUT_OFFSET + case.output.offset
        objects.check_untouched((start, start + TENSOR_BYTES), expected.tobytes())


def check_register(client: Client, objects: Objects, case: RegisterCase, tally: Tally) -> None:
    key = f"/{PREFIX}-{case.obj}"
    predicted = (
        case.offset >= 0 and case.byte_size > 0 and case.offset + case.byte_size <= (OBJECT_BYTES)
    )
    if case.protocol == "http":
        status, answer = client.post(
            "/v2/systemsharedmemory/region/fz_new/register",
            {"key": key, "offset": case.offset, "byte_size": case.byte_size},
        )
        assert status == 200 or 400 <= status < 500, f"HTTP {status} {answer} for {case}"
        succeeded = status == 200
        tally.record(f"register http {status}")
    else:
        if not (0 <= case.offset < 2**64 and 0 <= case.byte_size < 2**64):
            return  # uint64 fields: the client cannot send these
        code, reply = client.grpc(
            "SystemSharedMemoryRegister",
            service_pb2.SystemSharedMemoryRegisterRequest(
                name="fz_new", key=key, offset=case.offset, byte_size=case.byte_size
            ),
        )
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), (code, reply)
        succeeded = code is grpc.StatusCode.OK
        tally.record(f"register grpc {code.name}")
    assert succeeded == predicted, f"register {case}: predicted {predicted}"
    if not succeeded:
        objects.check_untouched(None, None)
        return
    try:
        if case.byte_size >= TENSOR_BYTES:  # read the new region's first 64 bytes back
            body = {
                "inputs": [
                    {
                        "name": name,
                        "datatype": "INT32",
                        "shape": [1, 16],
                        "parameters": {
                            "shared_memory_region": "fz_new",
                            "shared_memory_byte_size": TENSOR_BYTES,
                        },
                    }
                    for name in ("INPUT0", "INPUT1")
                ],
                "outputs": [{"name": "OUTPUT1"}],  # INPUT0 - INPUT1: zero
            }
            status, answer = client.post("/v2/models/simple/infer", body)
            assert status == 200, answer
            got = client.post(
                "/v2/models/simple/infer", {**body, "outputs": [{"name": "OUTPUT0"}]}
            )[1]["outputs"][0]["data"]
            if case.obj == "in":
                raw = objects.input_at(case.offset)
            else:
                raw = np.frombuffer(bytes([GUARD]) * TENSOR_BYTES, "<i4").reshape(1, 16)
            assert got == (raw * 2).astype("<i4").ravel().tolist(), "read the wrong bytes"
        objects.check_untouched(None, None)
    finally:
        status, answer = client.post("/v2/systemsharedmemory/region/fz_new/unregister", {})
        assert status == 200, answer


# -- the test -----------------------------------------------------------------------------------


def _run(examples: int, strategy: st.SearchStrategy[Any], check: Any) -> list[str]:
    @hypothesis.settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink],
        report_multiple_bugs=False,
    )
    @hypothesis.given(case=strategy)
    def run(case: Any) -> None:
        check(case)

    try:
        run()
    except Exception as exc:
        notes = "\n".join(getattr(exc, "__notes__", ()))
        return [f"{str(exc)[:3000]}\n{notes[:3000]}"]
    return []


def test_offsets_and_sizes_against_real_regions(
    fuzz_server: ServerProcess, objects: Objects
) -> None:
    client = Client(fuzz_server)
    log_start = len(fuzz_server.log())
    try:
        for name, obj, offset, size in (
            ("fz_in", "in", IN_OFFSET, IN_BYTES),
            ("fz_out", "out", OUT_OFFSET, OUT_BYTES),
        ):
            status, answer = client.post(
                f"/v2/systemsharedmemory/region/{name}/register",
                {"key": f"/{PREFIX}-{obj}", "offset": offset, "byte_size": size},
            )
            assert status == 200, answer
        warm = Tally("warm-up")
        valid = Window("fz_in", 0, TENSOR_BYTES)
        for protocol in ("http", "grpc") * 10:
            check_infer(client, objects, InferCase(protocol, (valid, valid), None), warm)
        rss_before = rss_bytes(fuzz_server.process.pid)
        started = time.monotonic()
        tally = Tally("shared-memory fuzz")
        problems = _run(
            EXAMPLES["register"],
            register_cases(),
            lambda case: check_register(client, objects, case, tally),
        )
        problems += _run(
            EXAMPLES["infer"], infer_cases(), lambda case: check_infer(client, objects, case, tally)
        )
        elapsed = time.monotonic() - started
        growth = assert_server_healthy(fuzz_server, rss_before)
        log = fuzz_server.log()[log_start:]
        problems += [f"server log: {line}" for line in log.splitlines() if "Traceback" in line]
        tally.failures = problems
        print("\n" + tally.report(elapsed, growth))
        assert not problems, "\n".join(problems)
    finally:
        client.post("/v2/systemsharedmemory/unregister", {})
        client.close()
