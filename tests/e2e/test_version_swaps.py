"""Version swaps under load, with real servers and tritonclient: a new version found by polling,
a reload with a changed configuration, a broken version, rollback and unpin (through the
``inferd model`` command), and the warm-up of a new version with the model's recent requests.

Every swap happens while 32 clients send requests that name no version; not one may fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import raw_request
from tests.helpers.models import write_add_sub

pytestmark = pytest.mark.e2e

CONCURRENCY = 32
TOKEN = "swap-admin-token"
MODEL_CLI = [sys.executable, "-m", "inferd.cli.main", "model"]
POLL = ["--model-control-mode", "poll", "--repository-poll-secs", "0.3"]


class Load:
    """``CONCURRENCY`` clients, each on its own connection, sending add/sub requests that name
    no version until stopped; every answer's version and OUTPUT0 offset (version v adds
    ``v - 1``) is recorded, every failure kept."""

    def __init__(self, url: str, model: str = "m") -> None:
        self.url, self.model = url, model
        self.answers: list[tuple[str, int]] = []
        self.failures: list[str] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        self.wait_until(lambda: len(self.answers) >= CONCURRENCY)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive()

    def wait_until(self, done: Callable[[], bool], timeout_s: float = 60.0) -> None:
        """Until ``done()`` holds; the answers arriving are what wakes the check up."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not done():
                assert not self.failures, self.failures[:3]
                left = deadline - time.monotonic()
                assert left > 0, f"timed out; last answers {self.answers[-5:]}"
                self._changed.wait(left)

    def served(self, version: str, at_least: int) -> Callable[[], bool]:
        start = len(self.answers)
        return lambda: sum(1 for v, _ in self.answers[start:] if v == version) >= at_least

    def versions_since(self, start: int) -> set[str]:
        with self._changed:
            return {v for v, _ in self.answers[start:]}

    async def _run(self) -> None:
        await asyncio.gather(*(self._client(i) for i in range(CONCURRENCY)))

    async def _client(self, index: int) -> None:
        a = np.full((1, 16), index, dtype=np.int32)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_data_from_numpy(a)
        client = aioclient.InferenceServerClient(self.url, conn_limit=1)
        try:
            while not self._stop.is_set():
                try:
                    result = await client.infer(self.model, inputs)
                    version = str(result.get_response()["model_version"])
                    offset = int(result.as_numpy("OUTPUT0")[0, 0]) - 2 * index
                except Exception as exc:
                    self._record(None, repr(exc))
                else:
                    self._record((version, offset), None)
        finally:
            await client.close()

    def _record(self, answer: tuple[str, int] | None, failure: str | None) -> None:
        with self._changed:
            if answer is not None:
                self.answers.append(answer)
            if failure is not None:
                self.failures.append(failure)
            self._changed.notify_all()


Index = dict[tuple[str, str], tuple[str, str]]  # (model, version) -> (state, reason)


def _index(server: ServerProcess) -> Index:
    """The repository index (with the admin token: the servers that have one require it)."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        rows = client.get_model_repository_index(headers={"Authorization": f"Bearer {TOKEN}"})
    return {
        (r["name"], r.get("version", "")): (r.get("state", ""), r.get("reason", "")) for r in rows
    }


def _wait_for_index(server: ServerProcess, done: Callable[[Index], bool]) -> Index:
    """The index once ``done`` holds for it: polling finds changes on its own schedule and
    announces nothing, so the index is read again, bounded well above the 0.3 s scan period."""
    deadline = time.monotonic() + 30
    while True:
        index = _index(server)
        if done(index):
            return index
        assert time.monotonic() < deadline, index
        time.sleep(0.1)


def _add_version(repo: Path, staging: Path, version: int, model: bytes | None = None) -> None:
    """Build version ``version`` of ``m`` aside, then move it in with one rename."""
    write_add_sub(staging, "m", versions=(version,), config=None)
    if model is not None:
        (staging / "m" / str(version) / "model.onnx").write_bytes(model)
    os.rename(staging / "m" / str(version), repo / "m" / str(version))


def _check(load: Load) -> None:
    assert load.failures == []
    assert all(offset == int(version) - 1 for version, offset in load.answers)


def test_a_new_version_found_by_polling_takes_over_with_no_failure(tmp_path: Path) -> None:
    repo, staging = tmp_path / "models", tmp_path / "staging"
    write_add_sub(repo, "m", versions=(1,))
    with running_server([repo], POLL) as server, Load(server.http_url) as load:
        _add_version(repo, staging, 2)
        load.wait_until(load.served("2", at_least=200))
        switched = len(load.answers)
        load.wait_until(lambda: len(load.answers) >= switched + 200)
        assert load.versions_since(switched + CONCURRENCY) == {"2"}  # once switched, stays
        index = _index(server)
        assert index[("m", "1")] == ("UNAVAILABLE", "unloaded")
        assert index[("m", "2")] == ("READY", "")

        # a broken version: the index says why, version 2 keeps serving
        _add_version(repo, staging, 3, model=b"not an onnx model")
        # listed while it loads, then with the outcome: wait for the outcome
        index = _wait_for_index(server, lambda i: i.get(("m", "3"), ("LOADING",))[0] != "LOADING")
        state, reason = index[("m", "3")]
        assert state == "UNAVAILABLE"
        assert "failed to load 'm' version 3" in reason
        assert index[("m", "2")] == ("READY", "")
        start = len(load.answers)
        load.wait_until(lambda: len(load.answers) >= start + 200)
        assert load.versions_since(start) == {"2"}
    _check(load)


def test_a_reload_with_a_changed_configuration_drops_no_request(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_add_sub(repo, "m", versions=(1,))
    args = ["--model-control-mode", "explicit", "--load-model", "m"]
    changed = json.dumps({"max_batch_size": 8, "dynamic_batching": {}})
    with (
        running_server([repo], args) as server,
        Load(server.http_url) as load,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        assert "dynamic_batching" not in client.get_model_config("m")
        for _ in range(3):  # each reload swaps every instance of the model
            start = len(load.answers)
            client.load_model("m", config=changed)
            load.wait_until(lambda start=start: len(load.answers) >= start + 100)
        assert "dynamic_batching" in client.get_model_config("m")
    _check(load)
    assert {v for v, _ in load.answers} == {"1"}


def _model_cli(*args: str, token: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "INFERD_ADMIN_TOKEN"}
    if token:
        env["INFERD_ADMIN_TOKEN"] = TOKEN
    return subprocess.run(
        [*MODEL_CLI, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


@pytest.fixture
def pinned_repo(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "models"
    write_add_sub(repo, "m", versions=(1, 2))  # the default policy serves version 2
    write_add_sub(repo, "other", versions=(1,))
    return repo, tmp_path / "staging"


def test_rollback_and_unpin_under_load(pinned_repo: tuple[Path, Path]) -> None:
    repo, staging = pinned_repo
    with (
        running_server([repo], POLL, env={"INFERD_ADMIN_TOKEN": TOKEN}) as server,
        Load(server.http_url) as load,
    ):
        url = server.http_url
        load.wait_until(load.served("2", at_least=50))
        done = _model_cli("rollback", "m", "-u", url)
        assert done.returncode == 0, done.stderr
        assert "version 1 is the default version now" in done.stdout
        assert "rolled back from version 2" in done.stdout
        load.wait_until(load.served("1", at_least=200))
        status = _model_cli("status", "m", "-u", url)
        assert status.returncode == 0, status.stderr
        lines = status.stdout.splitlines()
        assert lines[0].split() == ["MODEL", "VERSION", "STATE", "REASON"]
        pinned = next(line for line in lines if line.split()[:3] == ["m", "1", "READY"])
        assert "pinned as the default version by a rollback from version 2" in pinned
        assert any(line.split()[:3] == ["m", "2", "UNAVAILABLE"] for line in lines)

        # polling leaves the pinned model alone: a scan that sees 'other' version 2 (moved in
        # after 'm' version 3) has seen 'm' version 3 too
        _add_version(repo, staging, 3)
        write_add_sub(staging, "other", versions=(2,), config=None)
        os.rename(staging / "other" / "2", repo / "other" / "2")
        _wait_for_index(server, lambda i: i.get(("other", "2"), ("",))[0] == "READY")
        start = len(load.answers)
        load.wait_until(lambda: len(load.answers) >= start + 200)
        assert load.versions_since(start) == {"1"}
        assert ("m", "3") not in _index(server)

        done = _model_cli("unpin", "m", "-u", url)
        assert done.returncode == 0, done.stderr
        load.wait_until(load.served("3", at_least=200))
        index = _index(server)
        assert index[("m", "3")] == ("READY", "")
        assert index[("m", "1")] == ("UNAVAILABLE", "unloaded")
        again = _model_cli("unpin", "m", "-u", url)
        assert again.returncode == 1
        assert again.stderr.strip() == (
            "inferd model unpin: error: model 'm' is not pinned: no rollback chose its default "
            "version"
        )
    _check(load)


def test_rollback_is_refused_without_the_admin_token(pinned_repo: tuple[Path, Path]) -> None:
    repo, _ = pinned_repo
    with running_server([repo], POLL, env={"INFERD_ADMIN_TOKEN": TOKEN}) as server:
        refused = _model_cli("rollback", "m", "-u", server.http_url, token=False)
        assert refused.returncode == 1
        assert len(refused.stderr.strip().splitlines()) == 1
        assert "HTTP 401" in refused.stderr
        assert "--admin-token-file" in refused.stderr
        for action in ("rollback", "unpin"):
            reply = raw_request(server.http_url, "POST", f"/v2/repository/models/m/{action}")
            assert reply.status == 401, reply.body
        wrong = raw_request(
            server.http_url,
            "POST",
            "/v2/repository/models/m/rollback",
            headers={"Authorization": "Bearer not-the-token"},
        )
        assert wrong.status == 401
        assert _index(server)[("m", "2")] == ("READY", "")  # nothing changed
        token_file = Path(server.log_path.parent) / "token"
        token_file.write_text(TOKEN + "\n")
        done = _model_cli(
            "rollback",
            "m",
            "-u",
            server.http_url,
            "--to",
            "1",
            "--admin-token-file",
            str(token_file),
            token=False,
        )
        assert done.returncode == 0, done.stderr
        assert _index(server)[("m", "1")][0] == "READY"


# -- warm-up from recent requests ---------------------------------------------------------------

RECORDER_CONFIG = """
name: "rec"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
"""

# appends every value it is given to calls-v<version>.txt next to the repository
RECORDER = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        folder = os.path.dirname(os.path.dirname(args["model_repository"]))
        self.log = os.path.join(folder, "calls-v%s.txt" % args["model_version"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            with open(self.log, "a") as f:
                f.write("%d\\n" % int(x[0]))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""


def _calls(root: Path, version: int) -> list[int]:
    path = root / f"calls-v{version}.txt"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_a_new_version_runs_the_recent_requests_before_it_serves(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    (repo / "rec" / "1").mkdir(parents=True)
    (repo / "rec" / "config.pbtxt").write_text(RECORDER_CONFIG)
    (repo / "rec" / "1" / "model.py").write_text(RECORDER)
    args = ["--model-control-mode", "explicit", "--load-model", "rec", "--warmup-from-recent", "3"]
    with (
        running_server([repo], args) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        for value in (11, 12, 13, 14, 15):
            item = httpclient.InferInput("X", [1], "INT32")
            item.set_data_from_numpy(np.array([value], dtype=np.int32))
            assert client.infer("rec", [item]).get_response()["model_version"] == "1"
        assert _calls(tmp_path, 1) == [11, 12, 13, 14, 15]
        (repo / "rec" / "2").mkdir()
        (repo / "rec" / "2" / "model.py").write_text(RECORDER)
        client.load_model("rec")  # returns once version 2 serves
        # the last 3 requests ran on version 2 before anything was sent to it
        assert _calls(tmp_path, 2) == [13, 14, 15]
        item = httpclient.InferInput("X", [1], "INT32")
        item.set_data_from_numpy(np.array([16], dtype=np.int32))
        assert client.infer("rec", [item]).get_response()["model_version"] == "2"
        assert _calls(tmp_path, 2) == [13, 14, 15, 16]
