"""Who may steer traffic, seen from outside: ``inferd serve`` in each control mode, driven by
the real tritonclient and raw HTTP requests.

The rollout group (traffic policies, version rollback and unpin) and the feedback group are
closed without a token in every control mode; with an admin token set, inference rights alone
cannot post feedback; ``--open-api`` opens them explicitly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import RawReply, raw_request
from tests.helpers.models import ADD_SUB_CONFIG, write_add_sub
from tests.helpers.rollout_models import ALL_VERSIONS

pytestmark = pytest.mark.e2e

ADMIN = "steer-admin"
FEEDBACK = "steer-feedback"
# the probe: 99% of the requests that name no version sent to another model
HIJACK = {
    "kind": "split",
    "variants": [
        {"name": "mine", "model": "other", "weight": 99},
        {"name": "theirs", "version": 3, "weight": 1},
    ],
}
BANDIT = """\
kind: bandit
variants:
  - {version: 1}
  - {version: 2}
feedback: {reward: binary}
seed: 5
"""


@pytest.fixture(autouse=True)
def _no_tokens_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The servers inherit this process's environment: no token may come from it."""
    monkeypatch.delenv("INFERD_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("INFERD_FEEDBACK_TOKEN", raising=False)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    write_add_sub(root, "addsub", (1, 2, 3), config=ADD_SUB_CONFIG + ALL_VERSIONS)
    write_add_sub(root, "other", (1,))
    bandit = write_add_sub(root, "bandit", (1, 2), config=ADD_SUB_CONFIG + ALL_VERSIONS)
    (bandit / "rollout.yaml").write_text(BANDIT)
    return root


def _inputs() -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(np.ones((1, 16), np.int32))
    return inputs


def _served(server: ServerProcess, model: str = "addsub", n: int = 20) -> set[tuple[str, str]]:
    """(model, version) of the answers to ``n`` requests that name no version."""
    seen: set[tuple[str, str]] = set()
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(n):
            response = client.infer(model, _inputs()).get_response()
            seen.add((response["model_name"], str(response["model_version"])))
    return seen


def _send(
    server: ServerProcess, method: str, path: str, body: Any = None, token: str | None = None
) -> RawReply:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None if body is None else json.dumps(body).encode()
    return raw_request(server.http_url, method, path, data, headers)


def _index(server: ServerProcess) -> dict[str, str]:
    reply = _send(server, "POST", "/v2/repository/index", {})
    assert reply.status == 200, reply.body
    return {r.get("version", ""): r.get("state", "") for r in reply.json() if r["name"] == "addsub"}


STEERING = (
    ("PUT", "/v2/models/addsub/rollout", HIJACK),
    ("DELETE", "/v2/models/addsub/rollout", None),
    ("POST", "/v2/models/addsub/rollout/promote", {}),
    ("POST", "/v2/models/addsub/rollout/rollback", {}),
    ("POST", "/v2/repository/models/addsub/rollback", {}),
    ("POST", "/v2/repository/models/addsub/unpin", {}),
)


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_a_rollout_without_a_token_is_refused_and_traffic_is_unchanged(
    repo: Path, mode: str
) -> None:
    with running_server([repo], ["--model-control-mode", mode]) as server:
        assert _served(server) == {("addsub", "3")}
        for method, path, body in STEERING:
            reply = _send(server, method, path, body)
            assert reply.status == 403, (method, path, reply.body)
            assert "the rollout API is closed" in reply.error
            assert "--admin-token-file" in reply.error
            assert "--open-api rollout" in reply.error
        guessed = _send(server, "PUT", "/v2/models/addsub/rollout", HIJACK, "guess")
        assert guessed.status == 403
        assert _served(server) == {("addsub", "3")}  # not one request went to 'other'
        assert _send(server, "GET", "/v2/models/addsub/rollout").status == 404  # no policy
        assert _index(server) == {"1": "READY", "2": "READY", "3": "READY"}


def test_a_version_rollback_without_a_token_is_refused_and_nothing_is_unloaded(
    tmp_path: Path,
) -> None:
    root = tmp_path / "models"
    write_add_sub(root, "addsub", (1, 2))  # the default policy serves version 2 only
    with running_server([root], ["--model-control-mode", "poll"]) as server:
        for action in ("rollback", "unpin"):
            reply = _send(server, "POST", f"/v2/repository/models/addsub/{action}", {})
            assert reply.status == 403, reply.body
            assert "--admin-token-file" in reply.error
        named = _send(server, "POST", "/v2/repository/models/addsub/rollback", {"version": 1})
        assert named.status == 403
        assert _index(server) == {"2": "READY"}  # version 1 never loaded, 2 never unloaded
        assert _served(server) == {("addsub", "2")}


def test_with_an_admin_token_unauthenticated_feedback_cannot_steer_a_bandit(
    repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "admin").write_text(ADMIN)
    (tmp_path / "feedback").write_text(FEEDBACK)
    args = ["--admin-token-file", str(tmp_path / "admin")]
    with running_server([repo], args) as server:
        ids: list[tuple[str, str]] = []
        with httpclient.InferenceServerClient(server.http_url) as client:
            for _ in range(300):  # the probe: infer, then reward version 2 every time
                response = client.infer("bandit", _inputs()).get_response()
                ids.append((response["id"], response["parameters"]["variant"]))
                reply = _send(
                    server,
                    "POST",
                    "/v2/models/bandit/feedback",
                    {"id": response["id"], "reward": 1},
                )
                assert reply.status == 401, reply.body
                assert "feedback token or admin token" in reply.error
        report = _send(server, "GET", "/v2/models/bandit/rollout").json()
        assert [v["feedback"] for v in report["variants"]] == [0, 0]  # the bandit learned nothing
        assert {variant for _, variant in ids} == {"v1", "v2"}  # and still explores both
        accepted = _send(
            server, "POST", "/v2/models/bandit/feedback", {"id": ids[0][0], "reward": 1}, ADMIN
        )
        assert accepted.status == 200, accepted.body  # the admin token is a feedback token too
    with running_server(
        [repo], [*args, "--feedback-token-file", str(tmp_path / "feedback")]
    ) as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            first = client.infer("bandit", _inputs()).get_response()
            second = client.infer("bandit", _inputs()).get_response()
        fed = _send(
            server, "POST", "/v2/models/bandit/feedback", {"id": first["id"], "reward": 1}, FEEDBACK
        )
        assert fed.status == 200, fed.body
        assert fed.json()["variant"] == first["parameters"]["variant"]
        steer = _send(server, "PUT", "/v2/models/addsub/rollout", HIJACK, FEEDBACK)
        assert steer.status == 401  # the feedback token changes no policy
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
        cli = subprocess.run(
            [sys.executable, "-m", "inferd.cli.main", "rollout", "feedback", "bandit",
             "--id", second["id"], "--reward", "0", "-u", server.http_url,
             "--feedback-token-file", str(tmp_path / "feedback")],
            capture_output=True, text=True, timeout=60, check=False, env=env,
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        assert "reward 0 credited to variant" in cli.stdout
        report = _send(server, "GET", "/v2/models/bandit/rollout").json()
        assert sum(v["feedback"] for v in report["variants"]) == 2


def test_open_api_opens_rollout_and_feedback_explicitly(repo: Path) -> None:
    args = ["--open-api", "rollout", "--open-api", "feedback"]
    with running_server([repo], args) as server:
        put = _send(server, "PUT", "/v2/models/addsub/rollout", HIJACK)
        assert put.status == 200, put.body
        assert ("other", "1") in _served(server, n=40)  # the operator opened it: it steers
        with httpclient.InferenceServerClient(server.http_url) as client:
            response = client.infer("bandit", _inputs()).get_response()
        fed = _send(
            server, "POST", "/v2/models/bandit/feedback", {"id": response["id"], "reward": 1}
        )
        assert fed.status == 200, fed.body
        assert _send(server, "DELETE", "/v2/models/addsub/rollout").status == 200
        assert _served(server) == {("addsub", "3")}


@pytest.fixture
def feedback_only(repo: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    (tmp_path / "feedback").write_text(FEEDBACK)
    args = ["--feedback-token-file", str(tmp_path / "feedback")]
    with running_server([repo], args) as server:
        yield server


def test_a_feedback_token_alone_leaves_the_rollout_api_closed(feedback_only: ServerProcess) -> None:
    put = _send(feedback_only, "PUT", "/v2/models/addsub/rollout", HIJACK, FEEDBACK)
    assert put.status == 403
    assert "the rollout API is closed" in put.error
    with httpclient.InferenceServerClient(feedback_only.http_url) as client:
        response = client.infer("bandit", _inputs()).get_response()
    body = {"id": response["id"], "reward": 1}
    assert _send(feedback_only, "POST", "/v2/models/bandit/feedback", body).status == 401
    assert _send(feedback_only, "POST", "/v2/models/bandit/feedback", body, FEEDBACK).status == 200


def test_tritons_own_groups_stay_open_without_a_token(repo: Path) -> None:
    """tritonclient and perf_analyzer rely on Triton's defaults: load and unload in explicit
    mode, shared-memory status, trace and logging need no token unless one is set (trace and
    logging change nothing here: they answer UNIMPLEMENTED)."""
    args = ["--model-control-mode", "explicit", "--load-model", "addsub"]
    with running_server([repo], [*args, "--allow-shared-memory=true"]) as server:
        with httpclient.InferenceServerClient(server.http_url) as http:
            http.load_model("other")
            assert http.is_model_ready("other")
            http.unload_model("other")
            assert http.get_system_shared_memory_status() == []
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            grpc.load_model("other")
            assert grpc.is_model_ready("other")
            for call in (
                lambda: grpc.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]}),
                lambda: grpc.update_log_settings(settings={"log_verbose_level": 1}),
            ):
                with pytest.raises(InferenceServerException) as caught:
                    call()
                assert caught.value.status() == "StatusCode.UNIMPLEMENTED"
        put = _send(server, "PUT", "/v2/models/addsub/rollout", HIJACK)
        assert put.status == 403  # inferd's own steering stays closed in explicit mode too
