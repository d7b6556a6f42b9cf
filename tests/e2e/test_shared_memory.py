"""System shared memory end to end: ``inferd serve`` driven by tritonclient's shared-memory
utilities over HTTP and gRPC, Triton's own shm client examples run unmodified, every error the
extension names, CUDA shared memory as on a machine without GPUs, and the switch that turns the
extension off."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc as grpc_module
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import (
    InferenceServerException,
    serialize_byte_tensor,
    serialized_byte_size,
)

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import raw_request

pytestmark = pytest.mark.e2e

# Triton client repository, src/python/examples, commit 58a44caa (kept byte for byte)
TRITON_EXAMPLES = Path(__file__).parent / "triton_examples"
PREFIX = f"inferd-e2e-{os.getpid()}"


@pytest.fixture(scope="module")
def server(example_repo: Path) -> Iterator[ServerProcess]:
    """``inferd serve`` on the example repository with the extension turned on."""
    with running_server([example_repo], ["--allow-shared-memory=true"]) as proc:
        yield proc


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[Any]:
    if request.param == "http":
        made: Any = httpclient.InferenceServerClient(server.http_url)
    else:
        made = grpcclient.InferenceServerClient(server.grpc_url)
    made.unregister_system_shared_memory()
    yield made
    made.unregister_system_shared_memory()
    made.close()


@pytest.fixture
def regions() -> Iterator[Callable[[str, int], Any]]:
    """Create client regions (``/dev/shm/<PREFIX>-<name>``), destroyed after the test."""
    made: list[Any] = []

    def create(name: str, byte_size: int) -> Any:
        handle = shm.create_shared_memory_region(name, f"/{PREFIX}-{name}", byte_size)
        made.append(handle)
        return handle

    yield create
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def _module(client: Any) -> Any:
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def _status(client: Any) -> dict[str, tuple[str, int, int]]:
    """name -> (key, offset, byte_size), whichever protocol answered."""
    answer = client.get_system_shared_memory_status()
    if isinstance(answer, list):
        return {r["name"]: (r["key"], r["offset"], r["byte_size"]) for r in answer}
    return {n: (r.key, r.offset, r.byte_size) for n, r in answer.regions.items()}


def _error(call: Callable[[], object]) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    return str(info.value)


# -- Triton's examples ------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["simple_http_shm_client.py", "simple_grpc_shm_client.py"])
def test_triton_shm_examples_pass(server: ServerProcess, script: str) -> None:
    url = server.http_url if "_http_" in script else server.grpc_url
    done = subprocess.run(
        [sys.executable, str(TRITON_EXAMPLES / script), "-u", url],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "PASS: system shared memory" in done.stdout


# -- through tritonclient -----------------------------------------------------------------------


def test_metadata_lists_the_extensions(client: Any) -> None:
    meta = client.get_server_metadata()
    extensions = meta["extensions"] if isinstance(meta, dict) else list(meta.extensions)
    assert {"system_shared_memory", "cuda_shared_memory"} <= set(extensions)


def test_inputs_and_outputs_in_shared_memory(client: Any, regions: Any) -> None:
    mod = _module(client)
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 5, dtype=np.int32)
    ins, outs = regions("in", 256), regions("out", 512)
    shm.set_shared_memory_region(ins, [a, b])
    client.register_system_shared_memory("in", f"/{PREFIX}-in", 256)
    client.register_system_shared_memory("out", f"/{PREFIX}-out", 256, offset=256)
    assert _status(client) == {"in": (f"/{PREFIX}-in", 0, 256), "out": (f"/{PREFIX}-out", 256, 256)}

    inputs = [
        mod.InferInput("INPUT0", [2, 16], "INT32"),
        mod.InferInput("INPUT1", [2, 16], "INT32"),
    ]
    inputs[0].set_shared_memory("in", 128)
    inputs[1].set_shared_memory("in", 128, offset=128)
    out0 = mod.InferRequestedOutput("OUTPUT0")
    out0.set_shared_memory("out", 128, offset=128)
    out1 = mod.InferRequestedOutput("OUTPUT1")  # in the response, as usual
    result = client.infer("simple", inputs, outputs=[out0, out1])
    got = shm.get_contents_as_numpy(outs, np.int32, [2, 16], offset=256 + 128)
    np.testing.assert_array_equal(got, a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    entry = result.get_output("OUTPUT0")
    shape = entry["shape"] if isinstance(entry, dict) else list(entry.shape)
    assert shape == [2, 16]
    if isinstance(entry, dict):
        assert set(entry) == {"name", "datatype", "shape"}  # no data, no parameters

    client.unregister_system_shared_memory("out")
    assert list(_status(client)) == ["in"]


def test_bytes_tensors_in_shared_memory(client: Any, regions: Any) -> None:
    mod = _module(client)
    a = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    b = np.array([[b"2"] * 16], dtype=object)
    raw_a, raw_b = serialize_byte_tensor(a), serialize_byte_tensor(b)
    size_a, size_b = serialized_byte_size(raw_a), serialized_byte_size(raw_b)
    handle = regions("strings", 1024)
    shm.set_shared_memory_region(handle, [raw_a, raw_b])
    client.register_system_shared_memory("strings", f"/{PREFIX}-strings", 1024)
    inputs = [
        mod.InferInput("INPUT0", [1, 16], "BYTES"),
        mod.InferInput("INPUT1", [1, 16], "BYTES"),
    ]
    inputs[0].set_shared_memory("strings", size_a)
    inputs[1].set_shared_memory("strings", size_b, offset=size_a)
    out = mod.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory("strings", 512, offset=512)
    client.infer("simple_string", inputs, outputs=[out])
    got = shm.get_contents_as_numpy(handle, np.object_, [1, 16], offset=512)
    assert [v.decode() for v in got.reshape(-1)] == [str(i + 2) for i in range(16)]


def test_errors_are_precise(client: Any, regions: Any) -> None:
    mod = _module(client)
    regions("err", 128)
    key = f"/{PREFIX}-err"
    client.register_system_shared_memory("err", key, 128)
    assert "already in manager" in _error(
        lambda: client.register_system_shared_memory("err", key, 64)
    )
    assert "Unable to open shared memory region" in _error(
        lambda: client.register_system_shared_memory("x", f"/{PREFIX}-missing", 64)
    )
    assert "goes beyond the 128 bytes" in _error(
        lambda: client.register_system_shared_memory("x", key, 64, offset=100)
    )
    assert "invalid key" in _error(lambda: client.register_system_shared_memory("x", "/a/b", 8))

    def infer(
        region: str, byte_size: int, offset: int = 0, shape: tuple[int, ...] = (1, 16)
    ) -> Any:
        inputs = [mod.InferInput(n, list(shape), "INT32") for n in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_shared_memory(region, byte_size, offset=offset)
        return client.infer("simple", inputs)

    assert "Unable to find shared memory region: 'nope'" in _error(lambda: infer("nope", 64))
    assert "Invalid offset + byte size" in _error(lambda: infer("err", 64, offset=96))
    assert "Invalid offset for shared memory region" in _error(lambda: infer("err", 4, 128))
    assert "expecting 64 bytes" in _error(lambda: infer("err", 60))
    out = mod.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory("err", 32)
    inputs = [mod.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(np.zeros((1, 16), np.int32))
    assert "should be at least 64 bytes" in _error(
        lambda: client.infer("simple", inputs, outputs=[out])
    )
    assert client.is_server_live()


def test_cuda_shared_memory_without_gpus(client: Any) -> None:
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("anything")
    status = client.get_cuda_shared_memory_status()
    assert (status if isinstance(status, list) else list(status.regions)) == []
    text = _error(lambda: client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64))
    assert "GPUs not supported" in text


def test_raw_http_rules(server: ServerProcess, regions: Any) -> None:
    regions("raw", 64)
    url = server.http_url
    reply = raw_request(
        url,
        "POST",
        "/v2/systemsharedmemory/region/raw/register",
        b'{"key": "/../../etc/passwd", "byte_size": 8}',
    )
    assert reply.status == 400
    assert "invalid key" in reply.error
    reply = raw_request(url, "POST", "/v2/systemsharedmemory/region/raw/register", b'{"key": "/x"}')
    assert (reply.status, reply.error) == (
        400,
        "Shared memory register request has no 'byte_size' field",
    )
    body = f'{{"key": "/{PREFIX}-raw", "byte_size": 64}}'.encode()
    assert (
        raw_request(url, "POST", "/v2/systemsharedmemory/region/raw/register", body).status == 200
    )
    reply = raw_request(url, "GET", "/v2/systemsharedmemory/region/raw/status")
    assert reply.json() == [{"name": "raw", "key": f"/{PREFIX}-raw", "offset": 0, "byte_size": 64}]
    assert raw_request(url, "POST", "/v2/systemsharedmemory/status").status == 405
    both = (
        b'{"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [1], '
        b'"parameters": {"shared_memory_region": "raw", "shared_memory_byte_size": 4}}]}'
    )
    reply = raw_request(url, "POST", "/v2/models/simple/infer", both)
    assert reply.status == 400
    assert "Input must set only one of the following fields" in reply.error
    assert raw_request(url, "POST", "/v2/systemsharedmemory/unregister").status == 200
    assert raw_request(url, "GET", "/v2/systemsharedmemory/status").json() == []


# -- the switch -------------------------------------------------------------------------------


def test_the_extension_is_off_unless_enabled(example_repo: Path) -> None:
    with running_server([example_repo]) as off:
        http = httpclient.InferenceServerClient(off.http_url)
        grpc = grpcclient.InferenceServerClient(off.grpc_url)
        try:
            assert "system_shared_memory" not in http.get_server_metadata()["extensions"]
            assert "cuda_shared_memory" not in list(grpc.get_server_metadata().extensions)
            for call in (
                http.unregister_system_shared_memory,
                grpc.unregister_system_shared_memory,
                lambda: grpc.register_system_shared_memory("r", "/k", 8),
            ):
                assert "--allow-shared-memory=true" in _error(call)
            # as Triton: the status queries answer, for a server with no region
            assert http.get_system_shared_memory_status() == []
            assert http.get_cuda_shared_memory_status() == []
            assert len(grpc.get_system_shared_memory_status().regions) == 0
            assert len(grpc.get_cuda_shared_memory_status().regions) == 0
            missing = _error(lambda: http.get_system_shared_memory_status("r"))
            assert "Unable to find system shared memory region: 'r'" in missing
            for body in (
                b'{"key": "/k"}',  # a body missing a field
                b'{"key": ',  # not JSON
                b"[1, 2]",  # JSON, not an object
                b"{" + b" " * (9 * 2**20) + b"}",  # past the 8 MiB JSON body limit
            ):  # "off" wins: 501, never 400 or 413
                for path in ("region/r/register", "unregister", "region/r/unregister"):
                    url = f"/v2/systemsharedmemory/{path}"
                    reply = raw_request(off.http_url, "POST", url, body)
                    assert reply.status == 501, (path, body[:20], reply.body[:200])
                    assert "--allow-shared-memory=true" in reply.error
            # over gRPC, a message that does not parse gets the same answer
            with grpc_module.insecure_channel(off.grpc_url) as channel:
                for method in ("SystemSharedMemoryRegister", "CudaSharedMemoryRegister"):
                    call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
                    with pytest.raises(grpc_module.RpcError) as refused:
                        call(b"\x0a\xff\xff", timeout=10)  # a string field cut short
                    assert refused.value.code() is grpc_module.StatusCode.UNIMPLEMENTED
                    assert "--allow-shared-memory=true" in str(refused.value.details())
            item = httpclient.InferInput("INPUT0", [1, 16], "INT32")
            item.set_shared_memory("r", 64)
            assert "--allow-shared-memory=true" in _error(lambda: http.infer("simple", [item]))
        finally:
            http.close()
            grpc.close()
