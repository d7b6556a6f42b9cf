"""KServe's Python SDK clients (v2 REST and gRPC) against ``inferd serve`` on the example models.

KServe compiles its own copy of the v2 protocol into protobuf's default descriptor pool under the
same names as ``tritonclient.grpc`` (which inferd itself imports), so the two cannot share a
process: the SDK runs in a child interpreter that prints what it saw as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from typing import Any

import pytest

from inferd.testing import ServerProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        importlib.util.find_spec("kserve") is None,
        reason="the KServe SDK is not installed (pip install 'kserve>=0.21')",
    ),
]

CLIENT = r"""
import asyncio, json, sys
import numpy as np
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig

http_url, grpc_url = sys.argv[1], sys.argv[2]
a = np.arange(16, dtype=np.int32).reshape(1, 16)
b = np.ones((1, 16), dtype=np.int32)


def request():
    inputs = [InferInput("INPUT0", [1, 16], "INT32"), InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a, binary_data=False)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    return InferRequest(model_name="simple", infer_inputs=inputs)


def outputs(response):
    return {o.name: o.as_numpy().tolist() for o in response.outputs}


async def main():
    seen = {}
    rest = InferenceRESTClient(RESTConfig(protocol="v2", retries=0, timeout=30))
    base = f"http://{http_url}"
    seen["rest"] = {
        "live": await rest.is_server_live(base),
        "ready": await rest.is_server_ready(base),
        "model_ready": await rest.is_model_ready(base, "simple"),
        "outputs": outputs(await rest.infer(base, request(), model_name="simple")),
    }
    await rest.close()
    grpc_client = InferenceGRPCClient(grpc_url, retries=0, timeout=30)
    seen["grpc"] = {
        "live": await grpc_client.is_server_live(),
        "ready": await grpc_client.is_server_ready(),
        "model_ready": await grpc_client.is_model_ready("simple"),
        "outputs": outputs(await grpc_client.infer(request())),
    }
    await grpc_client.close()
    print(json.dumps(seen))


asyncio.run(main())
"""


def _run_sdk(server: ServerProcess) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, server.http_url, server.grpc_url],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_kserve_sdk_sees_health_readiness_and_infers(
    server: ServerProcess, transport: str, kserve_seen: dict[str, Any]
) -> None:
    seen = kserve_seen[transport]
    assert seen["live"] is True
    assert seen["ready"] is True
    assert seen["model_ready"] is True
    a = list(range(16))
    assert seen["outputs"]["OUTPUT0"] == [[x + 1 for x in a]]
    assert seen["outputs"]["OUTPUT1"] == [[x - 1 for x in a]]


@pytest.fixture(scope="module")
def kserve_seen(server: ServerProcess) -> dict[str, Any]:
    return _run_sdk(server)
