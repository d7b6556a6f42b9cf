"""Bounds on what a client names, against a real ``inferd serve``: ids of 1 MiB are refused on
every wire and leave nothing behind, and a load request's config override cannot make the
server start thousands of threads (refused before anything is built; a load that fails after
its instances were built releases their threads).

The server's memory and threads are read from ``/proc/<pid>/status`` of its process.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.codecs.limits import MAX_ID_BYTES
from inferd.testing import ServerProcess, running_server

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status"),
]

MIB_ID = "i" * (1 << 20)
REQUESTS = 100  # per wire: 100 MiB of ids each
WARM_UP = 20  # requests per wire before measuring: gRPC's buffers grow ~15 MiB at first
RSS_SLACK = 16 << 20  # allocator noise (2-4 MiB measured); ids kept would be 100 MiB a wire
SETTLE_S = 20.0  # a bound against hanging while threads are joined, not a speed requirement

SIMPLE = {
    "name": "simple",
    "platform": "onnxruntime_onnx",
    "max_batch_size": 8,
    "input": [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("INPUT0", "INPUT1")],
    "output": [
        {"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")
    ],
}


@pytest.fixture(scope="module")
def server(example_repo: Path) -> Iterator[ServerProcess]:
    args = [
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
        "--load-model",
        "simple_string_dyna_sequence",
    ]
    with running_server([example_repo], args) as proc:
        yield proc


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def _rss_bytes(pid: int) -> int:
    return _status(pid, "VmRSS") * 1024


def _threads(pid: int) -> int:
    return _status(pid, "Threads")


def _settled_threads(pid: int, at_most: int) -> int:
    """The server's thread count once it is ``at_most`` or less (threads being joined may take
    a moment to leave), or what it still is after SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    count = _threads(pid)
    while count > at_most and time.monotonic() < deadline:
        time.sleep(0.05)
        count = _threads(pid)
    return count


def _simple_inputs(module: Any, binary: bool = True) -> list[Any]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        if module is httpclient:
            item.set_data_from_numpy(a, binary_data=binary)
        else:
            item.set_data_from_numpy(a)
    return inputs


def _refused(call: Callable[[], object], status: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == status, info.value
    return str(info.value.message())


# -- ids ----------------------------------------------------------------------------------------


def test_request_ids_of_a_mebibyte_are_refused_on_every_wire(server: ServerProcess) -> None:
    limit = f"at most {MAX_ID_BYTES} bytes are allowed"
    with (
        httpclient.InferenceServerClient(server.http_url) as http,
        grpcclient.InferenceServerClient(server.grpc_url) as grpc,
    ):
        calls: dict[str, tuple[Callable[[], object], str]] = {
            "json": (
                lambda: http.infer("simple", _simple_inputs(httpclient, False), request_id=MIB_ID),
                "400",
            ),
            "binary": (
                lambda: http.infer("simple", _simple_inputs(httpclient), request_id=MIB_ID),
                "400",
            ),
            "grpc": (
                lambda: grpc.infer("simple", _simple_inputs(grpcclient), request_id=MIB_ID),
                "StatusCode.INVALID_ARGUMENT",
            ),
        }
        for call, status in calls.values():  # the allocators' first growth is not a leak
            for _ in range(WARM_UP):
                _refused(call, status)
        before = _rss_bytes(server.pid)
        for wire, (call, status) in calls.items():
            for _ in range(REQUESTS):
                message = _refused(call, status)
                assert f"inference request 'id' is {1 << 20} bytes long; {limit}" in message, wire
        grown = _rss_bytes(server.pid) - before
        assert grown < RSS_SLACK, f"the server grew by {grown / 2**20:.1f} MiB"
        # an id at the bound is served and echoed
        result = grpc.infer("simple", _simple_inputs(grpcclient), request_id="r" * MAX_ID_BYTES)
        assert result.get_response().id == "r" * MAX_ID_BYTES


def test_string_sequence_ids_of_a_mebibyte_are_refused(server: ServerProcess) -> None:
    model = "simple_string_dyna_sequence"

    def start(module: Any, client: Any, sequence_id: str) -> Any:
        x = module.InferInput("INPUT", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[5]], dtype=np.int32))
        return client.infer(
            model, [x], sequence_id=sequence_id, sequence_start=True, sequence_end=True
        )

    message = f"parameter 'sequence_id' is {1 << 20} bytes long; at most {MAX_ID_BYTES} bytes"
    with (
        httpclient.InferenceServerClient(server.http_url) as http,
        grpcclient.InferenceServerClient(server.grpc_url) as grpc,
    ):
        for _ in range(WARM_UP):
            _refused(lambda: start(httpclient, http, MIB_ID), "400")
            _refused(lambda: start(grpcclient, grpc, MIB_ID), "StatusCode.INVALID_ARGUMENT")
        before = _rss_bytes(server.pid)
        for _ in range(REQUESTS):
            assert message in _refused(lambda: start(httpclient, http, MIB_ID), "400")
            got = _refused(lambda: start(grpcclient, grpc, MIB_ID), "StatusCode.INVALID_ARGUMENT")
            assert message in got
        grown = _rss_bytes(server.pid) - before
        assert grown < RSS_SLACK, f"the server grew by {grown / 2**20:.1f} MiB"
        # at the bound (the model reads its id as a number): a one-request sequence runs
        longest = "7".rjust(MAX_ID_BYTES, "0")
        assert start(httpclient, http, longest).as_numpy("OUTPUT") is not None
        assert start(grpcclient, grpc, longest).as_numpy("OUTPUT") is not None


# -- config overrides ---------------------------------------------------------------------------


def _override(count: int, threads: int, **extra: Any) -> str:
    config = dict(SIMPLE)
    config["instance_group"] = [{"count": count, "kind": "KIND_CPU"}]
    config["parameters"] = {"intra_op_thread_count": {"string_value": str(threads)}}
    config.update(extra)
    return json.dumps(config)


def test_a_thread_override_is_refused_before_any_thread_starts(server: ServerProcess) -> None:
    pid = server.pid
    huge = _override(2, 2000)
    with (
        httpclient.InferenceServerClient(server.http_url, network_timeout=120.0) as http,
        grpcclient.InferenceServerClient(server.grpc_url) as grpc,
    ):
        _refused(lambda: http.load_model("simple", config=huge), "400")  # warms the loader
        before = _threads(pid)
        message = _refused(lambda: http.load_model("simple", config=huge), "400")
        assert _threads(pid) <= before
        assert (
            "parameter 'intra_op_thread_count' asks for 2000 threads on each of 2 instance(s) "
            "(4000 in all), more than the " in message
        )
        assert "--model-max-threads" in message
        grpc_message = _refused(
            lambda: grpc.load_model("simple", config=huge), "StatusCode.INVALID_ARGUMENT"
        )
        assert "asks for 2000 threads" in grpc_message
        assert _threads(pid) <= before
        # the refused loads left the model serving as it was
        assert http.is_model_ready("simple")
        http.infer("simple", _simple_inputs(httpclient))


def test_a_load_failing_after_its_instances_were_built_releases_their_threads(
    server: ServerProcess,
) -> None:
    pid = server.pid
    # two instances of two intra-op threads each (within the ceiling on one core or more),
    # then a warm-up whose data file is missing: the instances exist when the load fails
    warmup = {
        "name": "w",
        "batch_size": 1,
        "inputs": {
            n: {"data_type": "TYPE_INT32", "dims": [16], "input_data_file": "missing.bin"}
            for n in ("INPUT0", "INPUT1")
        },
    }
    failing = _override(2, 2, model_warmup=[warmup])
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120.0) as http:
        _refused(lambda: http.load_model("simple", config=failing), "400")  # warms the loader
        before = _threads(pid)
        for _ in range(3):
            message = _refused(lambda: http.load_model("simple", config=failing), "400")
            assert "warmup 'w' cannot build its inputs" in message
            assert _settled_threads(pid, before) <= before
        assert http.is_model_ready("simple")

        # a load that succeeds, then an unload: the instances' threads leave with the model
        http.load_model("simple", config=_override(2, 2))
        try:
            assert http.is_model_ready("simple")
            http.infer("simple", _simple_inputs(httpclient))
        finally:
            http.unload_model("simple")
        assert not http.is_model_ready("simple")
        assert _settled_threads(pid, before) <= before
        http.load_model("simple")  # as the repository has it, for the other tests
        assert http.is_model_ready("simple")
