"""What the deployment files ask of a running server, asked of a real one: ``inferd serve`` with
the Deployment's arguments answers every probe path of the Deployment and the KServe runtime, the
gRPC health service answers SERVING, the image's HEALTHCHECK command passes, and every
Prometheus series the prometheus-adapter rules read is in /metrics."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inferd.testing import ServerProcess, running_server
from tests.helpers.deploy import (
    DOCKERFILES,
    KSERVE,
    KUBERNETES,
    Manifest,
    adapter_rules,
    healthcheck_command,
    inferd_container,
    load_yaml,
    prometheus_series,
    strip_listen_flags,
)
from tests.helpers.models import write_add_sub

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def deployment() -> Manifest:
    (doc,) = load_yaml(KUBERNETES / "base" / "deployment.yaml")
    return doc


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, deployment: Manifest
) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("deploy-repo")
    write_add_sub(repo, "simple")
    args = strip_listen_flags(inferd_container(deployment)["args"])
    assert "--exit-timeout-secs=30" in args  # the drain the grace period was sized for
    with running_server([repo], args) as proc:
        yield proc


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_every_probe_path_answers(server: ServerProcess, deployment: Manifest) -> None:
    container = inferd_container(deployment)
    (runtime,) = load_yaml(KSERVE / "servingruntime.yaml")
    (kserve_container,) = runtime["spec"]["containers"]
    probes = [container[kind] for kind in ("startupProbe", "livenessProbe", "readinessProbe")] + [
        kserve_container[kind] for kind in ("readinessProbe", "livenessProbe")
    ]
    paths = {probe["httpGet"]["path"] for probe in probes}
    assert paths == {"/v2/health/live", "/v2/health/ready"}
    for path in paths:
        assert _get(f"http://{server.http_url}{path}") == 200, path
    assert _get(f"http://{server.http_url}/v2/health/unknown") == 404  # the check can fail


def test_grpc_health_service_answers_serving(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_health_check_command(server: ServerProcess, dockerfile: Path) -> None:
    command = healthcheck_command(dockerfile)
    assert command[0] == "python3"
    script = command[-1]
    ready = script.replace("127.0.0.1:8000", server.http_url)
    assert ready != script
    done = subprocess.run([sys.executable, *command[1:-1], ready], timeout=30, check=False)
    assert done.returncode == 0
    # the metrics port has no /v2/health/ready: the same command then fails
    wrong = script.replace("127.0.0.1:8000", server.metrics_url)
    done = subprocess.run(
        [sys.executable, *command[1:-1], wrong], capture_output=True, timeout=30, check=False
    )
    assert done.returncode != 0


def test_adapter_rules_read_series_the_server_exports(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    client.infer("simple", inputs)
    client.close()
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    exported = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{", text, flags=re.MULTILINE))
    rules = adapter_rules()
    assert len(rules) >= 1
    for rule in rules:
        series = prometheus_series(rule)
        assert series, rule["name"]["as"]
        assert series <= exported, f"{rule['name']['as']} reads {series - exported}"
