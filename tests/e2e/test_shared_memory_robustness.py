"""Clients that misuse system shared memory cannot take the server down.

- A client truncates and re-extends its shared-memory object while requests read their inputs
  from it and write their outputs into it: the server never dies of ``SIGBUS``, every refused
  request is a 400 / ``INVALID_ARGUMENT`` naming the region, and health probes still answer.
- Registrations are bounded (``--shared-memory-max-regions``, ``--shared-memory-max-bytes``):
  past either bound a registration is refused with a message naming the flag to raise, a flood
  of registrations does not use up the server's file descriptors, and health probes answer.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import raw_request

pytestmark = pytest.mark.e2e

PREFIX = f"inferd-e2e-robust-{os.getpid()}"
SHM = Path("/dev/shm")
OBJECT_BYTES = 4096
REQUESTS = 1000


@pytest.fixture
def shm_object() -> Iterator[Callable[[str, int], tuple[str, int]]]:
    """Create POSIX shared-memory objects (``/dev/shm/<PREFIX>-<name>``), as a client does with
    ``shm_open`` + ``ftruncate``; return their key and a file descriptor the test keeps."""
    made: list[tuple[Path, int]] = []

    def create(name: str, byte_size: int) -> tuple[str, int]:
        path = SHM / f"{PREFIX}-{name}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        made.append((path, fd))
        os.ftruncate(fd, byte_size)
        return f"/{path.name}", fd

    yield create
    for path, fd in made:
        os.close(fd)
        path.unlink(missing_ok=True)


def _client(server: ServerProcess, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    return grpcclient.InferenceServerClient(server.grpc_url)


def _module(client: Any) -> Any:
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def _refusal(call: Callable[[], object]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def _is_invalid_argument(error: InferenceServerException) -> bool:
    return str(error.status()) in ("400", "StatusCode.INVALID_ARGUMENT")


def _healthy(server: ServerProcess) -> None:
    assert server.process.poll() is None, f"the server exited:\n{server.log_tail(40)}"
    assert raw_request(server.http_url, "GET", "/v2/health/live").status == 200
    assert raw_request(server.http_url, "GET", "/v2/health/ready").status == 200
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert grpc.is_server_ready()
    finally:
        grpc.close()


# -- an object truncated while requests use it ------------------------------------------------


@pytest.fixture(scope="module")
def server(example_repo: Path) -> Iterator[ServerProcess]:
    """The probe's server: the example repository with only the extension turned on."""
    with running_server([example_repo], ["--allow-shared-memory=true"]) as proc:
        yield proc


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_truncating_a_region_under_requests_never_crashes_the_server(
    server: ServerProcess, shm_object: Any, protocol: str
) -> None:
    region = f"racy_{protocol}"
    key, fd = shm_object(region, OBJECT_BYTES)
    os.pwrite(fd, np.arange(32, dtype=np.int32).tobytes(), 0)
    client = _client(server, protocol)
    mod = _module(client)
    client.unregister_system_shared_memory(region)
    client.register_system_shared_memory(region, key, OBJECT_BYTES)
    inputs = [mod.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory(region, 64)
    inputs[1].set_shared_memory(region, 64, offset=64)
    out0 = mod.InferRequestedOutput("OUTPUT0")
    out0.set_shared_memory(region, 64, offset=2048)  # written into the region
    out1 = mod.InferRequestedOutput("OUTPUT1")  # sent back

    stop = threading.Event()

    def truncate_and_extend() -> None:
        # to nothing, to the middle of INPUT1, back to full size (zeros): over and over
        while not stop.is_set():
            for size in (0, 100, OBJECT_BYTES):
                os.ftruncate(fd, size)

    truncator = threading.Thread(target=truncate_and_extend, daemon=True)
    truncator.start()
    answered, refused = 0, []
    try:
        for _ in range(REQUESTS):
            try:
                result = client.infer("simple", inputs, outputs=[out0, out1])
            except InferenceServerException as exc:
                refused.append(exc)
            else:
                assert result.as_numpy("OUTPUT1").shape == (1, 16)
                answered += 1
            assert server.process.poll() is None, f"the server died:\n{server.log_tail(40)}"
    finally:
        stop.set()
        truncator.join()
    os.ftruncate(fd, OBJECT_BYTES)

    assert refused, f"no request met a truncated object in {REQUESTS} ({answered} answered)"
    for exc in refused:
        assert _is_invalid_argument(exc), (exc.status(), str(exc))
        message = str(exc)
        assert f"'{region}'" in message, message
        assert "shrunk" in message, message
    _healthy(server)
    # the region is usable again once its object is whole
    os.pwrite(fd, np.arange(32, dtype=np.int32).tobytes(), 0)
    result = client.infer("simple", inputs, outputs=[out0, out1])
    expected = np.arange(16, dtype=np.int32) - np.arange(16, 32, dtype=np.int32)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected.reshape(1, 16))
    written = np.frombuffer(os.pread(fd, 64, 2048), np.int32)
    np.testing.assert_array_equal(written, np.arange(16) + np.arange(16, 32))
    client.unregister_system_shared_memory(region)
    client.close()


# -- bounded registrations -------------------------------------------------------------------

MAX_REGIONS = 4
MAX_BYTES = 16384


@pytest.fixture(scope="module")
def bounded(example_repo: Path) -> Iterator[ServerProcess]:
    args = [
        "--allow-shared-memory=true",
        "--shared-memory-max-regions",
        str(MAX_REGIONS),
        "--shared-memory-max-bytes",
        str(MAX_BYTES),
    ]
    with running_server([example_repo], args) as proc:
        yield proc


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_registrations_past_the_bounds_are_refused_by_flag(
    bounded: ServerProcess, shm_object: Any, protocol: str
) -> None:
    key, fd = shm_object(f"bounds_{protocol}", MAX_BYTES * 2)
    client = _client(bounded, protocol)
    client.unregister_system_shared_memory()
    try:
        for i in range(MAX_REGIONS):
            client.register_system_shared_memory(f"r{i}", key, 1024, offset=1024 * i)
        refusal = _refusal(lambda: client.register_system_shared_memory("extra", key, 64))
        assert _is_invalid_argument(refusal), refusal.status()
        assert "'extra'" in str(refusal)
        assert "--shared-memory-max-regions" in str(refusal)
        assert str(MAX_REGIONS) in str(refusal)

        client.unregister_system_shared_memory("r3")  # frees a slot and its bytes
        too_big = MAX_BYTES - 3 * 1024 + 1
        refusal = _refusal(lambda: client.register_system_shared_memory("big", key, too_big))
        assert _is_invalid_argument(refusal), refusal.status()
        assert "'big'" in str(refusal)
        assert "--shared-memory-max-bytes" in str(refusal)
        assert str(MAX_BYTES) in str(refusal)
        client.register_system_shared_memory("big", key, too_big - 1)  # exactly at the bound
        names = client.get_system_shared_memory_status()
        count = len(names) if isinstance(names, list) else len(names.regions)
        assert count == MAX_REGIONS

        # the registered regions still serve requests
        os.pwrite(fd, np.ones(32, dtype=np.int32).tobytes(), 0)
        mod = _module(client)
        inputs = [mod.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        inputs[0].set_shared_memory("r0", 64)
        inputs[1].set_shared_memory("r0", 64, offset=64)
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2))
        _healthy(bounded)
    finally:
        client.unregister_system_shared_memory()
        client.close()


def test_a_flood_of_registrations_keeps_descriptors_and_health(
    bounded: ServerProcess, shm_object: Any
) -> None:
    key, _ = shm_object("flood", 4096)
    fds = Path(f"/proc/{bounded.pid}/fd")
    client = httpclient.InferenceServerClient(bounded.http_url)
    client.unregister_system_shared_memory()
    before = len(list(fds.iterdir()))
    refused: list[InferenceServerException] = []
    try:
        for i in range(1000):
            try:
                client.register_system_shared_memory(f"flood{i}", key, 64)
            except InferenceServerException as exc:
                refused.append(exc)
        assert len(refused) == 1000 - MAX_REGIONS
        assert all(_is_invalid_argument(exc) for exc in refused)
        assert all("--shared-memory-max-regions" in str(exc) for exc in refused)
        # one descriptor per region at most, and a few for whatever else the server opened
        assert len(list(fds.iterdir())) <= before + MAX_REGIONS + 8
        _healthy(bounded)
    finally:
        client.unregister_system_shared_memory()
        client.close()
