"""Malformed gRPC requests, message by message and byte by byte, against a live ``inferd serve``.

Hypothesis builds requests that tritonclient would never send, over a real ``grpc`` channel to
the port the server reports:

- ``ModelInfer`` requests to the served models with one or more flaws: model names and versions
  that cannot be, unknown datatypes, shapes that are negative, huge, zero or of 65 dims, raw
  contents of the wrong length or count, typed contents in the wrong field, raw and typed data
  mixed, parameters of every type under known and unknown keys, outputs that do not exist,
  classification requests, BYTES elements whose length prefixes lie, payloads of megabytes;
- ``ModelStreamInfer`` streams carrying several such requests (and bytes that do not parse),
  with and without ``triton_grpc_error`` (errors as the stream's status);
- the metadata, configuration, readiness, statistics and repository RPCs (and the unsupported
  shared-memory, trace and logging ones, and ``grpc.health.v1.Health``) with names such as
  ``..``, ``/``, NUL, 300 characters or odd unicode, odd versions, and load and unload
  parameters of every kind, configuration overrides included;
- bytes that are not a valid protobuf message, through a generic call with no serializer, so
  that the server's own parsing is fuzzed.

The cases are built in :mod:`tests.fuzz.grpc_cases`.

Every answer must be OK or a status that blames the client: INVALID_ARGUMENT, NOT_FOUND,
UNAVAILABLE (a model that is not loaded), OUT_OF_RANGE or RESOURCE_EXHAUSTED (size limits), or
UNIMPLEMENTED for the features the server says it does not support (and grpc's own answer to a
method that does not exist); never INTERNAL or UNKNOWN, never a traceback in the details or in
the server's log, never a call left without an answer (each call has a deadline). Afterwards the
server is alive (``ServerLive``) and its memory grew within the bound of ``conftest.py``.

Generation is derandomized, so every CI run sends the same requests.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import grpc
import hypothesis
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.testing import ServerProcess
from tests.fuzz.conftest import (
    FUZZ_MODELS,
    Tally,
    assert_server_healthy,
    rss_bytes,
)
from tests.fuzz.grpc_cases import FAMILIES, MODELS, GrpcCase, valid_request

pytestmark = pytest.mark.timeout(300)

#: requests per family (a stream case sends several messages, each counted)
EXAMPLES_PER_FAMILY = {"infer": 1000, "stream": 180, "repository": 700, "bytes": 500}
#: a call without an answer within this time is a hang
DEADLINE_S = 15.0
_MAX_MESSAGE = 2**31 - 1  # what tritonclient sets on its channels

#: statuses that put the blame on the client (or on what the server was asked to do)
CLIENT_STATUSES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
#: UNIMPLEMENTED is accepted only for features the server names as unsupported
_UNSUPPORTED = re.compile(r"not supported|not implemented|unsupported", re.IGNORECASE)
_LEAKS = re.compile(r"Traceback|File \"|internal error|Exception|Error\(", re.IGNORECASE)


# -- sending and judging ------------------------------------------------------------------------


def open_channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(
        target,
        options=[
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
        ],
    )


def _serialize(item: Any) -> bytes:
    return item if isinstance(item, bytes) else item.SerializeToString()


def _judge(case: GrpcCase, code: grpc.StatusCode, details: str) -> None:
    """Raise ``AssertionError`` unless ``code``/``details`` blame the client, or succeed."""
    if code is grpc.StatusCode.OK:
        return
    assert details, f"{code.name} with empty details to {case!r}"
    assert not _LEAKS.search(details), f"{code.name} {details[:1000]!r} to {case!r}"
    if code is grpc.StatusCode.UNIMPLEMENTED:
        if case.unknown_method:
            return
        assert _UNSUPPORTED.search(details), f"UNIMPLEMENTED {details[:500]!r} to {case!r}"
        return
    assert code in CLIENT_STATUSES, f"{code.name} {details[:1000]!r} to {case!r}"


def send(channel: grpc.Channel, case: GrpcCase, tally: Tally) -> None:
    """Make the call, record its outcome(s) in ``tally`` and check them."""
    if case.family == "stream":
        _send_stream(channel, case, tally)
        return
    try:
        if case.server_streaming:
            call = channel.unary_stream(
                case.path, request_serializer=_serialize, response_deserializer=None
            )
            for _ in call(case.request, timeout=DEADLINE_S, metadata=case.metadata):
                pass
        else:
            unary = channel.unary_unary(
                case.path, request_serializer=_serialize, response_deserializer=None
            )
            unary(case.request, timeout=DEADLINE_S, metadata=case.metadata)
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
    else:
        code, details = grpc.StatusCode.OK, ""
    tally.record(code.name)
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        raise AssertionError(f"no answer within {DEADLINE_S} s to {case!r}")
    _judge(case, code, details)


def _send_stream(channel: grpc.Channel, case: GrpcCase, tally: Tally) -> None:
    call = channel.stream_stream(
        case.path,
        request_serializer=_serialize,
        response_deserializer=service_pb2.ModelStreamInferResponse.FromString,
    )
    responses: list[Any] = []
    try:
        for response in call(iter(case.request), timeout=DEADLINE_S, metadata=case.metadata):
            responses.append(response)
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
    else:
        code, details = grpc.StatusCode.OK, ""
    for response in responses:
        failed = bool(response.error_message)
        tally.record("stream error" if failed else "stream OK")
        if failed:
            assert not _LEAKS.search(response.error_message), (
                f"stream error {response.error_message[:1000]!r} to {case!r}"
            )
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        tally.record(code.name)
        raise AssertionError(f"the stream did not end within {DEADLINE_S} s: {case!r}")
    if code is not grpc.StatusCode.OK or case.metadata:
        tally.record(f"stream {code.name}")
    _judge(case, code, details)
    if not case.metadata:  # errors in band: one response per request, the stream ends OK
        assert code is grpc.StatusCode.OK, f"stream ended {code.name} {details!r}: {case!r}"
        assert len(responses) == len(case.request), f"{len(responses)} responses to {case!r}"


def server_live(channel: grpc.Channel) -> bool:
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    reply = stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=DEADLINE_S)
    return bool(reply.live)


def reload_fuzz_models(channel: grpc.Channel) -> None:
    """Load the fuzz models again (the repository family may have unloaded or replaced them)."""
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    for name in FUZZ_MODELS:
        stub.RepositoryModelLoad(
            service_pb2.RepositoryModelLoadRequest(model_name=name), timeout=60
        )


def run_family(channel: grpc.Channel, family: str, examples: int, tally: Tally) -> list[str]:
    """Send ``examples`` generated cases of ``family``; return the failures (shrunk)."""

    @hypothesis.settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink],
        report_multiple_bugs=False,
    )
    @hypothesis.given(case=FAMILIES[family]())
    def run(case: GrpcCase) -> None:
        send(channel, case, tally)

    try:
        run()
    except Exception as exc:
        notes = "\n".join(getattr(exc, "__notes__", ()))
        return [f"{family}: {str(exc)[:3000]}\n{notes[:3000]}"]
    return []


def warm_up(channel: grpc.Channel, tally: Tally) -> None:
    """A few valid calls of each kind, so that the memory baseline includes what the first
    requests allocate once (codecs, the models' first runs, grpc's buffers)."""
    for model in FUZZ_MODELS:
        for rows in (1, MODELS[model].max_batch):
            send(channel, GrpcCase("infer", "ModelInfer", valid_request(model, rows)), tally)
        send(channel, GrpcCase("stream", "ModelStreamInfer", [valid_request(model)] * 3), tally)
    for family in FAMILIES:
        run_family(channel, family, 25, tally)
    reload_fuzz_models(channel)


@pytest.fixture
def channel(fuzz_server: ServerProcess) -> Iterator[grpc.Channel]:
    with open_channel(fuzz_server.grpc_url) as chan:
        yield chan


def test_grpc_fuzz(fuzz_server: ServerProcess, channel: grpc.Channel) -> None:
    log_start = len(fuzz_server.log())
    warm_up(channel, Tally("warm-up"))
    rss_before = rss_bytes(fuzz_server.process.pid)
    started = time.monotonic()
    problems: list[str] = []
    lines = []
    total = Tally("gRPC fuzz")
    for family, examples in EXAMPLES_PER_FAMILY.items():
        tally = Tally(f"gRPC fuzz, {family}")
        family_started = time.monotonic()
        problems += run_family(channel, family, examples, tally)
        lines.append(tally.report(time.monotonic() - family_started))
        total.statuses.update(tally.statuses)
    reload_fuzz_models(channel)
    elapsed = time.monotonic() - started

    assert server_live(channel)
    growth = assert_server_healthy(fuzz_server, rss_before)
    # grpc logs what escapes a handler with its traceback; inferd logs an unexpected error so
    log = fuzz_server.log()[log_start:]
    problems += [f"server log: {line}" for line in _log_problems(log)]
    total.failures = problems
    print("\n" + "\n".join([*lines, total.report(elapsed, growth)]))
    assert not problems, "\n".join(problems)


def _log_problems(log: str) -> list[str]:
    lines = log.splitlines()
    return [
        "\n".join(lines[max(0, i - 2) : i + 12])
        for i, line in enumerate(lines)
        if line.startswith("Traceback") or "unexpected error" in line
    ]


# -- found by the fuzz ---------------------------------------------------------------------------
# Load overrides the fuzz found answered wrongly (fixed since), each with the answer it is owed.


def _load(channel: grpc.Channel, name: str, config: str) -> tuple[grpc.StatusCode, str]:
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = service_pb2.RepositoryModelLoadRequest(model_name=name)
    request.parameters["config"].string_param = config
    try:
        stub.RepositoryModelLoad(request, timeout=60)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def test_load_config_nested_too_deeply_is_invalid(channel: grpc.Channel) -> None:
    code, details = _load(channel, "simple", "[" * 5000 + "]" * 5000)
    assert code is grpc.StatusCode.INVALID_ARGUMENT, (code, details)


def test_load_config_file_names_are_checked_before_use(channel: grpc.Channel) -> None:
    code, details = _load(
        channel, "simple", json.dumps({"default_model_filename": "../../../../../etc/hostname"})
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    assert "must not contain empty, '.' or '..' parts" in details, details
    assert "model 'simple': default_model_filename" in details, details


def test_load_config_naming_absent_versions_is_invalid(channel: grpc.Channel) -> None:
    config = json.dumps({"version_policy": {"specific": {"versions": [99]}}})
    code, details = _load(channel, "simple", config)
    assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), (code, details)
