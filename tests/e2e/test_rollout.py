"""Traffic policies seen from outside: ``inferd serve`` with models of several versions, driven
by the real tritonclient (HTTP and gRPC) and the admin API.

Each test sets the policy it needs over the admin API (the server takes an admin token), except
``addsub_file``, whose bandit policy comes from the ``rollout.yaml`` beside its config. Feedback
is posted with the server's feedback token.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import RawReply, raw_request
from tests.helpers.rollout_models import write_rollout_repo

pytestmark = pytest.mark.e2e

TOKEN = "rollout-secret"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
FEEDBACK_TOKEN = "reward-secret"
FEEDBACK = {"Authorization": f"Bearer {FEEDBACK_TOKEN}"}

BANDIT_FILE = """\
kind: bandit
variants:
  - {version: 1}
  - {version: 2}
feedback: {reward: binary}
seed: 3
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("rollout")
    repo = write_rollout_repo(root / "models")
    shutil.copytree(repo / "addsub", repo / "addsub_file")
    config = repo / "addsub_file" / "config.pbtxt"
    config.write_text(config.read_text().replace('"addsub"', '"addsub_file"'))
    (repo / "addsub_file" / "rollout.yaml").write_text(BANDIT_FILE)
    token = root / "token"
    token.write_text(TOKEN)
    feedback = root / "feedback"
    feedback.write_text(FEEDBACK_TOKEN)
    args = ["--admin-token-file", str(token), "--feedback-token-file", str(feedback)]
    with running_server([repo], args) as proc:
        yield proc


# -- helpers --------------------------------------------------------------------------------------


def _put(server: ServerProcess, model: str, policy: dict[str, Any]) -> RawReply:
    return raw_request(
        server.http_url, "PUT", f"/v2/models/{model}/rollout", json.dumps(policy).encode(), ADMIN
    )


def _set(server: ServerProcess, model: str, policy: dict[str, Any]) -> dict[str, Any]:
    reply = _put(server, model, policy)
    assert reply.status == 200, reply.body
    return dict(reply.json())


def _show(server: ServerProcess, model: str) -> dict[str, Any]:
    reply = raw_request(server.http_url, "GET", f"/v2/models/{model}/rollout")
    assert reply.status == 200, reply.body
    return dict(reply.json())


def _post(server: ServerProcess, path: str, body: dict[str, Any], admin: bool = True) -> RawReply:
    """POST with the admin token, or with the feedback token when ``admin`` is false."""
    return raw_request(
        server.http_url, "POST", path, json.dumps(body).encode(), ADMIN if admin else FEEDBACK
    )


def _metrics(server: ServerProcess) -> str:
    return raw_request(server.metrics_url, "GET", "/metrics").body.decode()


def _wait_for(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _addsub_inputs(module: Any, a: int = 1) -> list[Any]:
    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(np.full((1, 16), a, np.int32))
    inputs[1].set_data_from_numpy(np.ones((1, 16), np.int32))
    return inputs


def _infer_http(
    client: httpclient.InferenceServerClient, model: str = "addsub", **kwargs: Any
) -> tuple[dict[str, Any], np.ndarray]:
    result = client.infer(model, _addsub_inputs(httpclient), **kwargs)
    return result.get_response(), np.asarray(result.as_numpy("OUTPUT0"))


def _variant_of(response: dict[str, Any]) -> str | None:
    value = response.get("parameters", {}).get("variant")
    return None if value is None else str(value)


def _words(module: Any) -> list[Any]:
    tensor = module.InferInput("X", [2], "BYTES")
    tensor.set_data_from_numpy(np.array([b"seven", b"nine"], dtype=object))
    return [tensor]


# -- split, sticky keys, explicit versions ---------------------------------------------------------


def test_a_split_names_the_variant_over_http_and_grpc(server: ServerProcess) -> None:
    _set(server, "addsub", {"kind": "split", "seed": 1, "variants": [
        {"version": 1, "weight": 1}, {"version": 2, "weight": 1}]})  # fmt: skip
    seen: dict[str, int] = {}
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(40):
            response, out = _infer_http(client)
            variant = _variant_of(response)
            assert variant in ("v1", "v2")
            version = int(variant[1:])
            assert response["model_version"] == str(version)
            np.testing.assert_array_equal(out, np.full((1, 16), 2 + version - 1))
            seen[variant] = seen.get(variant, 0) + 1
    assert set(seen) == {"v1", "v2"}
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        grpc_seen = set()
        for _ in range(20):
            result = client.infer("addsub", _addsub_inputs(grpcclient))
            message = result.get_response()
            variant = message.parameters["variant"].string_param
            assert message.model_version == variant[1:]
            grpc_seen.add(variant)
    assert grpc_seen == {"v1", "v2"}
    report = _show(server, "addsub")
    requests = {v["name"]: v["requests"] for v in report["variants"]}
    assert sum(requests.values()) == 60
    assert [v["share"] for v in report["variants"]] == [0.5, 0.5]


def test_a_sticky_key_keeps_each_caller_on_one_variant(server: ServerProcess) -> None:
    _set(server, "addsub", {"kind": "split", "sticky_key": "user", "variants": [
        {"version": 1, "weight": 1}, {"version": 3, "weight": 1}]})  # fmt: skip
    by_user: dict[str, set[str | None]] = {}
    with httpclient.InferenceServerClient(server.http_url) as client:
        for round_ in range(4):
            for user in range(12):
                response, _ = _infer_http(client, parameters={"user": f"user-{user}"})
                by_user.setdefault(f"user-{user}", set()).add(_variant_of(response))
            assert round_ >= 0
    assert all(len(variants) == 1 for variants in by_user.values()), by_user
    assert set().union(*by_user.values()) == {"v1", "v3"}


def test_a_request_for_a_version_is_not_routed(server: ServerProcess) -> None:
    _set(server, "addsub", {"kind": "split", "variants": [
        {"version": 1, "weight": 1}, {"version": 2, "weight": 1}]})  # fmt: skip
    before = sum(v["requests"] for v in _show(server, "addsub")["variants"])
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(5):
            response, out = _infer_http(client, model_version="3")
            assert _variant_of(response) is None
            assert response["model_version"] == "3"
            np.testing.assert_array_equal(out, np.full((1, 16), 4))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        message = client.infer("addsub", _addsub_inputs(grpcclient), model_version="3")
        assert "variant" not in message.get_response().parameters
    assert sum(v["requests"] for v in _show(server, "addsub")["variants"]) == before


# -- shadow ---------------------------------------------------------------------------------------


def test_a_shadow_is_counted_and_the_caller_sees_only_the_primary(server: ServerProcess) -> None:
    _set(server, "addsub", {"kind": "shadow", "primary": {"version": 1}, "shadow": {"version": 3},
                            "compare": {"outputs": ["OUTPUT0"]}})  # fmt: skip
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(20):
            response, out = _infer_http(client)
            assert _variant_of(response) == "v1"
            assert response["model_version"] == "1"
            np.testing.assert_array_equal(out, np.full((1, 16), 2))  # v3 would say 4
    _wait_for(
        lambda: _show(server, "addsub")["variants"][1].get("mirrored", {}).get("requests") == 20,
        "the shadow's 20 answers",
    )
    report = _show(server, "addsub")
    primary, shadow = report["variants"]
    assert primary["requests"] == 20
    assert shadow["requests"] == 20
    assert shadow["mirrored"]["agreement"] == 0.0  # OUTPUT0 differs by 2 on every row
    assert shadow["mirrored"]["max_abs_error"] is None  # integers: no float error
    _set(server, "addsub", {"kind": "shadow", "primary": {"version": 1}, "shadow": {"version": 3},
                            "compare": {"outputs": ["OUTPUT1"]}})  # fmt: skip
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(5):
            _infer_http(client)
    _wait_for(
        lambda: _show(server, "addsub")["variants"][1].get("mirrored", {}).get("requests") == 5,
        "the shadow's 5 answers",
    )
    assert _show(server, "addsub")["variants"][1]["mirrored"]["agreement"] == 1.0
    metrics = _metrics(server)
    assert 'inferd_rollout_shadow_requests_total{model="addsub",variant="v3"} 5.0' in metrics
    assert 'inferd_rollout_shadow_agreement{model="addsub",variant="v3"} 1.0' in metrics


def test_a_failing_shadow_never_fails_the_primary(server: ServerProcess) -> None:
    _set(server, "parse", {"kind": "shadow", "primary": {"version": 1}, "shadow": {"version": 2}})
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(10):
            result = client.infer("parse", _words(httpclient))
            np.testing.assert_array_equal(result.as_numpy("Y"), [0, 0])
    _wait_for(
        lambda: _show(server, "parse")["variants"][1].get("mirrored", {}).get("errors") == 10,
        "the shadow's 10 failures",
    )
    shadow = _show(server, "parse")["variants"][1]
    assert shadow["errors"] == 10
    assert shadow["mirrored"]["compared"] == 0


def test_a_slow_shadow_never_delays_the_primary(server: ServerProcess) -> None:
    _set(server, "spin", {"kind": "shadow", "primary": {"version": 1}, "shadow": {"version": 2},
                          "max_in_flight": 1})  # fmt: skip
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([4000], np.int32))  # version 2: seconds of work
    with httpclient.InferenceServerClient(server.http_url) as client:
        first = client.infer("spin", [tensor])
        assert _variant_of(first.get_response()) == "v1"
        # the primary answered while its shadow still runs: nothing mirrored has finished
        report = _show(server, "spin")
        assert report["variants"][0]["requests"] == 1
        assert report["variants"][1].get("mirrored") is None
        second = client.infer("spin", [tensor])  # one shadow at a time: this one is skipped
        np.testing.assert_array_equal(second.as_numpy("OUT"), [4000])
    skipped = _show(server, "spin")["variants"][1]["mirrored"]
    assert (skipped["skipped"], skipped["requests"]) == (1, 0)
    _wait_for(
        lambda: _show(server, "spin")["variants"][1]["mirrored"]["requests"] == 1,
        "the slow shadow",
        timeout_s=60,
    )


# -- bandit and feedback --------------------------------------------------------------------------


def test_a_policy_file_is_read_when_the_model_loads(server: ServerProcess) -> None:
    report = _show(server, "addsub_file")
    assert report["kind"] == "bandit"
    assert report["policy"]["seed"] == 3
    assert [v["name"] for v in report["variants"]] == ["v1", "v2"]


def test_a_bandit_moves_traffic_to_the_rewarded_variant(server: ServerProcess) -> None:
    late: list[str] = []
    with httpclient.InferenceServerClient(server.http_url) as client:
        for i in range(160):
            response, _ = _infer_http(client, "addsub_file")
            variant = _variant_of(response)
            assert variant in ("v1", "v2")
            assert response["id"]  # the server gives an id to requests that take feedback
            reward = 1.0 if variant == "v2" else 0.0
            reply = _post(server, "/v2/models/addsub_file/feedback",
                          {"id": response["id"], "reward": reward}, admin=False)  # fmt: skip
            assert reply.status == 200, reply.body
            assert reply.json()["variant"] == variant
            if i >= 110:
                late.append(variant)
    assert late.count("v2") / len(late) > 0.8, late
    report = _show(server, "addsub_file")
    comparison = report["comparison"]["candidates"]["v2"]
    assert comparison["p_better"] > 0.99
    assert report["variants"][1]["share"] > 0.8
    assert sum(v["feedback"] for v in report["variants"]) == 160
    again = _post(server, "/v2/models/addsub_file/feedback", {"id": response["id"], "reward": 1})
    assert again.status == 404
    assert "already rewarded" in again.error
    with httpclient.InferenceServerClient(server.http_url) as client:
        response, _ = _infer_http(client, "addsub_file", request_id="client-chosen-7")
    assert response["id"] == "client-chosen-7"
    bad = _post(server, "/v2/models/addsub_file/feedback", {"id": "client-chosen-7", "reward": 2})
    assert bad.status == 400
    assert "[0, 1]" in bad.error
    metrics = _metrics(server)
    assert 'inferd_rollout_p_better{model="addsub_file",variant="v2"}' in metrics
    assert 'inferd_rollout_feedback_total{model="addsub_file",variant="v2"}' in metrics


# -- canary ---------------------------------------------------------------------------------------


def test_a_canary_is_promoted_stage_by_stage(server: ServerProcess) -> None:
    _set(server, "addsub", {"kind": "canary", "primary": {"version": 1}, "candidate":
         {"version": 2}, "stages": [0.5, 1.0], "min_requests": 10, "seed": 2})  # fmt: skip
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(60):
            _infer_http(client)
        canary = _show(server, "addsub")["canary"]
        assert canary["status"] == "promoted"
        assert [c["status"] for c in canary["history"]][-1] == "promoted"
        for _ in range(5):
            assert _variant_of(_infer_http(client)[0]) == "v2"
    assert 'inferd_rollout_canary_stage{model="addsub"} 1.0' in _metrics(server)


def test_a_canary_moved_by_hand(server: ServerProcess) -> None:
    _set(server, "addsub", {"kind": "canary", "primary": {"version": 1}, "candidate":
         {"version": 2}, "stages": [0.1, 0.5, 1.0], "auto_promote": False})  # fmt: skip
    promoted = _post(server, "/v2/models/addsub/rollout/promote", {})
    assert promoted.status == 200, promoted.body
    assert promoted.json()["canary"]["stage"] == 1
    assert promoted.json()["canary"]["share"] == 0.5
    back = _post(server, "/v2/models/addsub/rollout/rollback", {"reason": "looks off"})
    assert back.json()["canary"]["status"] == "rolled_back"
    assert back.json()["canary"]["reason"] == "looks off"
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert {_variant_of(_infer_http(client)[0]) for _ in range(10)} == {"v1"}


def test_a_failing_canary_is_rolled_back(server: ServerProcess) -> None:
    _set(server, "parse", {"kind": "canary", "primary": {"version": 1}, "candidate":
         {"version": 2}, "stages": [0.5, 1.0], "max_error_rate": 0, "min_requests": 50,
         "seed": 5})  # fmt: skip
    failures = 0
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(30):
            try:
                client.infer("parse", _words(httpclient))
            except InferenceServerException:
                failures += 1
    assert failures == 1  # the first word the candidate saw rolled it back
    canary = _show(server, "parse")["canary"]
    assert canary["status"] == "rolled_back"
    assert "error rate" in canary["reason"]
    assert canary["share"] == 0.0
    assert 'inferd_rollout_canary_rollbacks_total{model="parse"} 1.0' in _metrics(server)


# -- the admin API --------------------------------------------------------------------------------


def test_the_admin_api_takes_the_admin_token(server: ServerProcess) -> None:
    policy = json.dumps({"kind": "shadow", "shadow": {"version": 2}}).encode()
    refused = raw_request(server.http_url, "PUT", "/v2/models/addsub/rollout", policy)
    assert refused.status == 401
    assert "Bearer" in refused.error
    for method, path in (("DELETE", "/rollout"), ("POST", "/rollout/promote"),
                         ("POST", "/rollout/rollback")):  # fmt: skip
        reply = raw_request(server.http_url, method, "/v2/models/addsub" + path, b"{}")
        assert reply.status == 401, (method, path)
    wrong = raw_request(
        server.http_url, "PUT", "/v2/models/addsub/rollout", policy, {"Authorization": "Bearer x"}
    )
    assert wrong.status == 401
    accepted = raw_request(server.http_url, "PUT", "/v2/models/addsub/rollout", policy, ADMIN)
    assert accepted.status == 200
    assert raw_request(server.http_url, "GET", "/v2/models/addsub/rollout").status == 200
    cleared = raw_request(server.http_url, "DELETE", "/v2/models/addsub/rollout", None, ADMIN)
    assert cleared.status == 200
    gone = raw_request(server.http_url, "GET", "/v2/models/addsub/rollout")
    assert gone.status == 404
    assert "rollout.yaml" in gone.error
    with httpclient.InferenceServerClient(server.http_url) as client:
        response, _ = _infer_http(client)
    assert _variant_of(response) is None
    assert response["model_version"] == "3"


@pytest.mark.parametrize(
    ("policy", "named"),
    [
        ({"kind": "split", "variants": [{"version": 1, "weight": -1}, {"version": 2, "weight": 1}]},
         "variants[0].weight"),
        ({"kind": "shadow", "shadow": {"version": 9}}, "shadow: Request for unknown model"),
        ({"kind": "shadow", "shadow": {"model": "spin", "version": 1}}, "shadow: 'spin' version 1"),
        ({"kind": "split", "variants": [{"version": 1, "weight": 1},
                                        {"model": "nowhere", "version": 1, "weight": 1}]},
         "variants[1]:"),
        ({"kind": "canary", "candidate": {"version": 2}}, "primary: required"),
        ({"kind": "shadow", "shadow": {"version": 2}, "colour": "red"}, "colour: unknown field"),
    ],
)  # fmt: skip
def test_a_bad_policy_is_refused_naming_the_field(
    server: ServerProcess, policy: dict[str, Any], named: str
) -> None:
    reply = _put(server, "addsub", policy)
    assert reply.status == 400, reply.body
    assert named in reply.error, reply.error


def test_the_api_answers_unknown_models_and_wrong_bodies(server: ServerProcess) -> None:
    assert raw_request(server.http_url, "GET", "/v2/models/nothing/rollout").status == 404
    split = {
        "kind": "split",
        "variants": [{"version": 1, "weight": 1}, {"version": 2, "weight": 1}],
    }
    assert _put(server, "nothing", split).status == 404
    bad_json = raw_request(server.http_url, "PUT", "/v2/models/addsub/rollout", b"{", ADMIN)
    assert bad_json.status == 400
    no_canary = _set(server, "addsub", split)
    assert no_canary["kind"] == "split"
    wrong_kind = _post(server, "/v2/models/addsub/rollout/promote", {})
    assert wrong_kind.status == 400
    assert "canary" in wrong_kind.error
    no_feedback = _post(server, "/v2/models/addsub/feedback", {"id": "x", "reward": 1})
    assert no_feedback.status == 400
    assert "feedback" in no_feedback.error
    missing = _post(server, "/v2/models/addsub_file/feedback", {"reward": 1})
    assert missing.status == 400
    assert "'id'" in missing.error
    unknown = _post(server, "/v2/models/addsub_file/feedback", {"id": "never", "reward": 1})
    assert unknown.status == 404
    assert "no request with id 'never'" in unknown.error


def test_every_rollout_metric_is_exported(server: ServerProcess) -> None:
    _set(server, "addsub", {"kind": "split", "variants": [
        {"version": 1, "weight": 3}, {"version": 2, "weight": 1}]})  # fmt: skip
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(8):
            _infer_http(client)
    metrics = _metrics(server)
    for name in (
        "inferd_rollout_requests_total",
        "inferd_rollout_errors_total",
        "inferd_rollout_latency_p99_seconds",
        "inferd_rollout_traffic_share",
        "inferd_rollout_reward_mean",
        "inferd_rollout_feedback_total",
        "inferd_rollout_p_better",
        "inferd_rollout_shadow_requests_total",
        "inferd_rollout_shadow_agreement",
        "inferd_rollout_canary_stage",
        "inferd_rollout_canary_rollbacks_total",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in metrics, name
    assert 'inferd_rollout_traffic_share{model="addsub",variant="v1"} 0.75' in metrics
