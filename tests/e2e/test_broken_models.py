"""A repository with broken models next to a good one: start-up, index, readiness, exit."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import running_server
from tests.helpers.models import ADD_SUB_CONFIG, add_sub_model, write_add_sub

pytestmark = pytest.mark.e2e

BROKEN = {"bad_onnx", "bad_config"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("broken") / "models"
    write_add_sub(root, "good")
    bad_onnx = write_add_sub(root, "bad_onnx")
    (bad_onnx / "1" / "model.onnx").write_bytes(b"this is not an ONNX model")
    bad_config = root / "bad_config"
    (bad_config / "1").mkdir(parents=True)
    (bad_config / "1" / "model.onnx").write_bytes(add_sub_model())
    (bad_config / "config.pbtxt").write_text(
        ADD_SUB_CONFIG.replace("{name}", "bad_config").replace("max_batch_size: 8", "max_batch: [")
    )
    return root


def _good_infer(url: str) -> np.ndarray:
    a = np.ones((1, 16), dtype=np.int32)
    with httpclient.InferenceServerClient(url) as client:
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_data_from_numpy(a)
        return np.asarray(client.infer("good", inputs).as_numpy("OUTPUT0"))


@pytest.mark.parametrize("strict", [True, False])
def test_broken_models_are_unavailable_and_the_rest_serves(repo: Path, strict: bool) -> None:
    args = ["--exit-on-error=false", f"--strict-readiness={str(strict).lower()}"]
    with running_server([repo], args) as server:
        np.testing.assert_array_equal(_good_infer(server.http_url), np.full((1, 16), 2))
        with httpclient.InferenceServerClient(server.http_url) as client:
            index = {e["name"]: e for e in client.get_model_repository_index()}
            assert index["good"]["state"] == "READY"
            for name in BROKEN:
                assert index[name]["state"] == "UNAVAILABLE", index[name]
                assert index[name]["reason"], index[name]
                assert not client.is_model_ready(name)
            assert "onnx" in index["bad_onnx"]["reason"].lower()
            assert "config.pbtxt" in index["bad_config"]["reason"]
            assert client.is_server_live()
            assert client.is_server_ready() is not strict
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            assert client.is_server_ready() is not strict
            assert client.is_model_ready("good")
            assert not client.is_model_ready("bad_onnx")
            reasons = {m.name: m.reason for m in client.get_model_repository_index().models}
            assert reasons["bad_onnx"] == index["bad_onnx"]["reason"]
        # the metrics say the same
        url = f"http://{server.metrics_url}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            text = reply.read().decode()
        assert re.search(rf"^inferd_server_ready {0.0 if strict else 1.0}$", text, re.M), text
        failures = re.findall(
            r'^inferd_model_load_failures_total\{model="(\w+)"\} (\S+)$', text, re.M
        )
        assert dict(failures) == dict.fromkeys(BROKEN, "1.0")


def test_exit_on_error_names_the_failed_models(repo: Path) -> None:
    cmd = [sys.executable, "-m", "inferd.cli.main", "serve", "--model-repository", str(repo)]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    cmd += ["--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    for name in BROKEN:
        assert name in done.stderr
    assert "--exit-on-error=false" in done.stderr
    assert "inferd ready" not in done.stderr + done.stdout
