"""``inferd serve --frontends 2``: one connection limit for all front ends, and what the
processes hold and leave behind (descriptors, ``/dev/shm`` files).

The limit is the single process's: ``--http-max-connections N`` bounds the connections of every
front end together, with the single process's refusal, and a front end killed with connections
open gives their slots back when it is restarted. The channels' shared-memory files are
unlinked once the front end has attached them, so a server killed outright (engine and front
ends, SIGKILL) leaves nothing in ``/dev/shm``; a front end keeps no descriptor it inherited
twice.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import write_add_sub

pytestmark = pytest.mark.e2e

LIMIT = 4
READ_LIMIT_S = 30.0
BUSY_HEAD = (
    b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_add_sub(root, "simple")
    return root


def _frontend_pids(server: ServerProcess) -> set[int]:
    """The server's front-end processes (its children running the front-end module)."""
    pids: set[int] = set()
    for task in Path(f"/proc/{server.pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"inferd.server.frontends.worker" in cmdline:
                pids.add(int(child))
    return pids


def _wait_for_new_frontends(server: ServerProcess, old: set[int]) -> set[int]:
    """The two front ends that replaced ``old``, once each says it serves."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = _frontend_pids(server)
        log = server.log()
        if len(pids) == 2 and not pids & old and all(f"serving (pid {pid})" in log for pid in pids):
            return pids
        time.sleep(0.05)
    pytest.fail(f"the front ends were not restarted:\n{server.log_tail(40)}")


def _connect(url: str, stack: ExitStack) -> socket.socket:
    host, port = url.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=READ_LIMIT_S)
    stack.callback(sock.close)
    return sock


def _busy(url: str, stack: ExitStack) -> bytes:
    """A connection whose request body never comes (its slot stays busy); what the server
    answered to its head: ``100 Continue`` when admitted, else its refusal, whole."""
    sock = _connect(url, stack)
    sock.sendall(BUSY_HEAD)
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        chunk = sock.recv(1)
        assert chunk, f"the server closed the connection after {data!r}"
        data += chunk
    if data.startswith(b"HTTP/1.1 100 "):
        return data
    while chunk := sock.recv(4096):  # a refusal: the server half-closes after its reply
        data += chunk
    return data


def _probe(url: str, stack: ExitStack) -> bytes:
    sock = _connect(url, stack)
    sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"the server closed the connection after {data!r}"
        data += chunk
    return data


def _fill(url: str, stack: ExitStack) -> None:
    """Hold every slot with a busy connection. A slot freed by a connection the test just
    closed is free once the server has seen it go: a refusal is retried until then (a slot
    that is never given back fails the test)."""
    deadline = time.monotonic() + READ_LIMIT_S
    for _ in range(LIMIT):
        while not (head := _busy(url, stack)).startswith(b"HTTP/1.1 100 "):
            assert head.startswith(b"HTTP/1.1 503 "), head
            assert time.monotonic() < deadline, f"a slot was not given back: {head!r}"
            time.sleep(0.05)


def _assert_limit_holds(url: str) -> None:
    with ExitStack() as stack:
        _fill(url, stack)
        refused = _busy(url, stack)  # over the limit of both front ends together
        assert refused.startswith(b"HTTP/1.1 503 "), refused
        assert b"limit of 4 open HTTP connections (--http-max-connections)" in refused
        assert b"only health probes" in refused
        assert _probe(url, stack).startswith(b"HTTP/1.1 200 ")  # a probe slot answers


def test_the_connection_limit_is_one_for_every_front_end_and_survives_their_death(
    repo: Path,
) -> None:
    args = [
        "--frontends",
        "2",
        "--http-max-connections",
        str(LIMIT),
        "--http-body-timeout-secs",
        "300",
    ]
    with running_server([repo], args) as server:
        url = server.http_url
        _assert_limit_holds(url)
        with ExitStack() as stack:  # every slot held when the front ends are killed
            _fill(url, stack)
            first = _frontend_pids(server)
            for pid in first:
                os.kill(pid, signal.SIGKILL)
            _wait_for_new_frontends(server, first)
        _assert_limit_holds(url)  # no slot was lost with them


def _segments(pids: set[int]) -> list[Path]:
    return [p for pid in pids for p in Path("/dev/shm").glob(f"inferd-fe-{pid}-*")]


def test_a_server_killed_outright_leaves_nothing_in_dev_shm(repo: Path) -> None:
    with running_server([repo], ["--frontends", "2"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            assert client.is_model_ready("simple")
        finally:
            client.close()
        frontends = _frontend_pids(server)
        pids = {server.pid, *frontends}
        assert len(frontends) == 2
        assert not _segments(pids)  # unlinked as soon as the front ends attached them
        for pid in (server.pid, *frontends):  # the engine first: it can clean nothing up
            os.kill(pid, signal.SIGKILL)
        server.process.wait(READ_LIMIT_S)
        deadline = time.monotonic() + READ_LIMIT_S
        while any(Path(f"/proc/{pid}").exists() for pid in frontends):
            assert time.monotonic() < deadline, "the front ends did not die"
            time.sleep(0.05)
    assert not _segments(pids)


def _descriptors(pid: int) -> Iterator[tuple[str, str]]:
    """(target, fdinfo) of each open descriptor of ``pid``."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            yield os.readlink(fd), Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
        except OSError:
            continue  # closed meanwhile


def _eventfd_ids(pid: int) -> list[str]:
    ids = []
    for target, info in _descriptors(pid):
        if target == "anon_inode:[eventfd]":
            found = [
                line.split(":", 1)[1].strip()
                for line in info.splitlines()
                if line.startswith("eventfd-id:")
            ]
            if not found:
                pytest.skip("this kernel does not show eventfd ids in /proc/<pid>/fdinfo")
            ids.append(found[0])
    return ids


def test_a_front_end_keeps_only_the_descriptors_it_uses(repo: Path) -> None:
    with running_server([repo], ["--frontends", "2"]) as server:
        engine = set(_eventfd_ids(server.pid))
        frontends = _frontend_pids(server)
        assert len(frontends) == 2
        for pid in frontends:
            ids = _eventfd_ids(pid)
            count = len(list(_descriptors(pid)))
            # no inherited doorbell left open beside the copy the front end uses
            assert len(ids) == len(set(ids)), (pid, count, sorted(ids))
            # what it shares with the engine: its channel's two doorbells and one per front end
            assert len(set(ids) & engine) == 2 + 2, (pid, count, sorted(ids), sorted(engine))
            tables = [t for t, _ in _descriptors(pid) if t.startswith("/memfd:inferd-connections")]
            # its own descriptor of the connection table (and its mapping's, on Python < 3.13)
            assert 1 <= len(tables) <= 2, (pid, count, tables)
            # the channel's segments are mapped, never left with a name
            shm = [t for t, _ in _descriptors(pid) if t.startswith("/dev/shm/inferd-fe-")]
            assert all(t.endswith(" (deleted)") for t in shm), shm
