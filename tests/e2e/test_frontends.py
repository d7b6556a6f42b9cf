"""``inferd serve --frontends 2``: front-end processes in front of one engine, seen from outside.

Driven by tritonclient over HTTP and gRPC: the answers equal a single process's, statistics are
counted once, batches form across front ends, a front end killed under load loses only its own
in-flight requests and comes back, and a stop stops every process.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from inferd.testing.process import ServerStartError, start_server
from tests.helpers.models import ADD_SUB_CONFIG, add_sub_model

pytestmark = pytest.mark.e2e

BATCHED = ADD_SUB_CONFIG + "dynamic_batching { max_queue_delay_microseconds: 50000 }\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("frontends")
    for name, config in (("simple", ADD_SUB_CONFIG), ("batched", BATCHED)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config.replace("{name}", name))
        (repo / name / "1" / "model.onnx").write_bytes(add_sub_model(7))
    return repo


@pytest.fixture(scope="module")
def single(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], ["--frontends", "1"]) as proc:
        yield proc


@pytest.fixture(scope="module")
def multi(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], ["--frontends", "2"]) as proc:
        yield proc


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


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _tcp_entries() -> Iterator[tuple[int, int, str, str]]:
    """(local port, remote port, state, inode) of every TCP socket of this network namespace."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local = int(fields[1].rpartition(":")[2], 16)
            remote = int(fields[2].rpartition(":")[2], 16)
            yield local, remote, fields[3], fields[9]


def _connections(pid: int, port: int) -> int:
    """Established TCP connections to ``port`` that process ``pid`` holds."""
    inodes = _socket_inodes(pid)
    return sum(
        1
        for local, _, state, inode in _tcp_entries()
        if local == port and state == "01" and inode in inodes
    )


def _owner(pids: set[int], port: int, client_port: int) -> int | None:
    """Which of ``pids`` holds the server side of the connection from ``client_port``."""
    for pid in pids:
        inodes = _socket_inodes(pid)
        for local, remote, _, inode in _tcp_entries():
            if local == port and remote == client_port and inode in inodes:
                return pid
    return None


def _http_inputs(value: int) -> list[httpclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        inp = httpclient.InferInput(name, [1, 16], "INT32")
        inp.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16) * value)
        inputs.append(inp)
    return inputs


def _grpc_inputs(value: int) -> list[grpcclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        inp = grpcclient.InferInput(name, [1, 16], "INT32")
        inp.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16) * value)
        inputs.append(inp)
    return inputs


def _answers(server: ServerProcess) -> dict[str, Any]:
    """What a client sees of the server, over both protocols (the counters left out)."""
    h = httpclient.InferenceServerClient(server.http_url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    seen: dict[str, Any] = {
        "live": (h.is_server_live(), g.is_server_live()),
        "ready": (h.is_server_ready(), g.is_server_ready(), h.is_model_ready("simple")),
        "http_metadata": h.get_model_metadata("simple"),
        "grpc_metadata": str(g.get_model_metadata("simple")),
        "http_config": h.get_model_config("simple"),
        "grpc_config": str(g.get_model_config("simple")),
        "index": sorted((e["name"], e.get("state")) for e in h.get_model_repository_index()),
        "server": h.get_server_metadata()["extensions"],
    }
    result = h.infer("simple", _http_inputs(3))
    seen["http_infer"] = (result.as_numpy("OUTPUT0").tolist(), result.as_numpy("OUTPUT1").tolist())
    answer = g.infer(
        "simple", _grpc_inputs(5), outputs=[grpcclient.InferRequestedOutput("OUTPUT0")]
    )
    seen["grpc_infer"] = answer.as_numpy("OUTPUT0").tolist()
    for client, inputs, key in ((h, _http_inputs(1), "http"), (g, _grpc_inputs(1), "grpc")):
        try:
            client.infer("no_such_model", inputs)
        except InferenceServerException as exc:
            seen[f"{key}_unknown"] = (exc.status(), exc.message())
    bad = httpclient.InferInput("INPUT0", [1, 3], "INT32")
    bad.set_data_from_numpy(np.zeros((1, 3), np.int32))
    try:
        h.infer("simple", [bad])
    except InferenceServerException as exc:
        seen["http_bad"] = (exc.status(), exc.message())
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    conn.request("GET", "/v2/models/simple/versions/1/stats")
    reply = conn.getresponse()
    seen["raw_stats_status"] = (reply.status, reply.getheader("content-type"))
    reply.read()
    conn.close()
    return seen


def test_answers_equal_a_single_process(single: ServerProcess, multi: ServerProcess) -> None:
    assert len(_frontend_pids(multi)) == 2
    assert not _frontend_pids(single)
    expected = _answers(single)
    assert expected["http_infer"][0][0][1] == 3 + 3 + 7  # the model ran: the test can fail
    assert _answers(multi) == expected


def test_statistics_are_counted_once_for_both_front_ends(multi: ServerProcess) -> None:
    before = _inference_count(multi, "simple")
    per_thread = 10

    def send(i: int) -> None:
        # a client (a connection) per thread: the kernel spreads them over both front ends
        if i % 2:
            client: Any = httpclient.InferenceServerClient(multi.http_url)
            inputs: Any = _http_inputs(i)
        else:
            client = grpcclient.InferenceServerClient(multi.grpc_url)
            inputs = _grpc_inputs(i)
        for _ in range(per_thread):
            client.infer("simple", inputs)
        client.close()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(send, range(8)))
    assert _inference_count(multi, "simple") - before == 8 * per_thread
    # both protocols read the one engine's counters
    with grpcclient.InferenceServerClient(multi.grpc_url) as grpc_client:
        grpc_stats = grpc_client.get_inference_statistics("simple", as_json=True)
    assert int(grpc_stats["model_stats"][0]["inference_count"]) == before + 8 * per_thread


def _model_stats(server: ServerProcess, model: str) -> dict[str, Any]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        stats: dict[str, Any] = client.get_inference_statistics(model)["model_stats"][0]
    return stats


def _inference_count(server: ServerProcess, model: str) -> int:
    return int(_model_stats(server, model)["inference_count"])


def _execution_count(server: ServerProcess, model: str) -> int:
    return int(_model_stats(server, model)["execution_count"])


def test_batches_form_across_front_ends(multi: ServerProcess) -> None:
    port = multi.ports["http"]
    pids = _frontend_pids(multi)
    inferences, executions = _inference_count(multi, "batched"), _execution_count(multi, "batched")
    connected, go = threading.Barrier(17), threading.Barrier(17)

    def send(i: int) -> list[list[int]]:
        client = httpclient.InferenceServerClient(multi.http_url)  # a connection of its own
        try:
            rows = [client.infer("batched", _http_inputs(i)).as_numpy("OUTPUT0")[0].tolist()]
            connected.wait()
            go.wait()  # all at once
            for _ in range(5):
                rows.append(
                    client.infer("batched", _http_inputs(i)).as_numpy("OUTPUT0")[0].tolist()
                )
            return rows
        finally:
            client.close()

    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(send, i) for i in range(16)]
        connected.wait()
        # the kernel gave connections to both front ends
        held = {pid: _connections(pid, port) for pid in pids}
        go.wait()
        results = [f.result() for f in futures]
    assert all(count > 0 for count in held.values()), held
    for i, rows in enumerate(results):  # every request got its own answer out of its batch
        assert rows == [[2 * i * k + 7 for k in range(16)]] * 6
    sent = 16 * 6
    assert _inference_count(multi, "batched") - inferences == sent
    assert _execution_count(multi, "batched") - executions < sent


def _stream(server: ServerProcess, model: str) -> list[Any]:
    """Three requests on one gRPC stream (the last for an unknown model): what comes back."""
    replies: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    for i in range(2):
        client.async_stream_infer(model, _grpc_inputs(i + 2), request_id=f"r{i}")
    client.async_stream_infer("no_such_model", _grpc_inputs(1), request_id="bad")
    seen = [replies.get(timeout=30) for _ in range(3)]
    client.stop_stream()
    client.close()
    out: list[Any] = []
    for result, error in seen:
        if error is not None:
            out.append(("error", str(error)))
        else:
            out.append((result.get_response().id, result.as_numpy("OUTPUT0").tolist()))
    return sorted(out, key=str)


def test_grpc_streams_answer_as_a_single_process(
    single: ServerProcess, multi: ServerProcess
) -> None:
    expected = _stream(single, "simple")
    assert ("r1", [[2 * 3 * k + 7 for k in range(16)]]) in expected
    assert any(kind == "error" for kind, _ in expected)
    assert _stream(multi, "simple") == expected


def _infer_on(conn: http.client.HTTPConnection, value: int) -> list[int]:
    body = json.dumps(
        {
            "inputs": [
                {"name": n, "shape": [1, 16], "datatype": "INT32", "data": [value] * 16}
                for n in ("INPUT0", "INPUT1")
            ]
        }
    )
    conn.request("POST", "/v2/models/simple/infer", body)
    reply = conn.getresponse()
    data = json.loads(reply.read())
    assert reply.status == 200, data
    return list(data["outputs"][0]["data"])


def test_a_killed_front_end_loses_only_its_requests_and_is_restarted(repo: Path) -> None:
    threads = 8
    with running_server([repo], ["--frontends", "2"]) as server:
        port = server.ports["http"]
        first = _frontend_pids(server)
        stop = threading.Event()
        done = [0] * threads
        failed = [0] * threads
        client_ports = [0] * threads
        last_failure = [0.0] * threads

        def load(i: int) -> None:
            """Requests on one keep-alive connection; a new one after a failure."""
            conn: http.client.HTTPConnection | None = None
            while not stop.is_set():
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                try:
                    assert _infer_on(conn, i) == [2 * i + 7] * 16
                    if not client_ports[i] and conn.sock is not None:
                        client_ports[i] = conn.sock.getsockname()[1]
                    done[i] += 1
                except (OSError, http.client.HTTPException):
                    failed[i] += 1
                    last_failure[i] = time.monotonic()
                    conn.close()
                    conn = None
            if conn is not None:
                conn.close()

        with ThreadPoolExecutor(threads) as pool:
            futures = [pool.submit(load, i) for i in range(threads)]
            deadline = time.monotonic() + 30
            while min(done) < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            owners = [_owner(first, port, client_port) for client_port in client_ports]
            victim = owners[0]  # the front end of thread 0's connection
            assert victim is not None
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                pids = _frontend_pids(server)
                if len(pids) == 2 and victim not in pids:
                    break
                time.sleep(0.05)
            restarted, restarted_at = sum(done), time.monotonic()
            while sum(done) < restarted + 100 and time.monotonic() < deadline:
                time.sleep(0.01)
            stop.set()
            for future in futures:
                future.result()  # a wrong answer would raise here
        pids = _frontend_pids(server)
        assert len(pids) == 2
        assert victim not in pids
        assert pids & first == first - {victim}
        # the connections on the killed front end lost their request in flight (or the next
        # one sent on them; a reconnection while it was exiting may reach it too), and nothing
        # after its replacement started; those on the other front end lost nothing
        for i, owner in enumerate(owners):
            if owner == victim:
                assert 1 <= failed[i] <= 3, (failed, owners)
                assert last_failure[i] < restarted_at
            else:
                assert failed[i] == 0, (failed, owners)
        assert sum(done) >= restarted + 100
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        assert _infer_on(conn, 1) == [9] * 16
        conn.close()
        assert "restarting it" in server.log()
        # every channel's segments are unlinked once its front end has attached them (the
        # replacement's too, once it serves)
        (replacement,) = pids - first
        deadline = time.monotonic() + 60
        while f"serving (pid {replacement})" not in server.log():
            assert time.monotonic() < deadline, server.log_tail(40)
            time.sleep(0.05)
        assert not _rings(server.pid)
        assert server.stop() == 0
    # the stop stopped the front ends too and left no ring behind
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert not _rings(server.pid)


def _rings(engine_pid: int) -> list[Path]:
    """The shared-memory segments of the engine's channels."""
    return list(Path("/dev/shm").glob(f"inferd-fe-{engine_pid}-*"))


def test_graceful_stop_finishes_requests_and_stops_every_process(repo: Path) -> None:
    with running_server([repo], ["--frontends", "2"]) as server:
        pids = _frontend_pids(server)
        assert len(pids) == 2
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.infer("simple", _http_inputs(1)).as_numpy("OUTPUT1").tolist() == [[0] * 16]
        assert server.stop(signal.SIGTERM) == 0
        log = server.log()
    assert "front end 0 stopped" in log
    assert "front end 1 stopped" in log
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_a_port_another_process_listens_on_is_refused(repo: Path) -> None:
    """SO_REUSEPORT must not let the server join another listener on its port."""
    other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    other.bind(("127.0.0.1", 0))
    other.listen()
    try:
        port = other.getsockname()[1]
        with pytest.raises(ServerStartError) as refused:
            start_server([repo], ["--frontends", "2", "--http-port", str(port)])
    finally:
        other.close()
    assert f"cannot start the front-end service on 127.0.0.1:{port}" in str(refused.value)
    assert "Address already in use" in str(refused.value)
