"""``inferd rollout``: the command drives a running server's admin API (set, show, promote,
clear), checks a policy file before sending it, and says in one line what went wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import ADD_SUB_CONFIG, write_add_sub
from tests.helpers.rollout_models import ALL_VERSIONS

pytestmark = pytest.mark.e2e

TOKEN = "cli-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("rollout_cli")
    write_add_sub(root / "models", "addsub", (1, 2), config=ADD_SUB_CONFIG + ALL_VERSIONS)
    (root / "token").write_text(TOKEN)
    with running_server([root / "models"], ["--admin-token-file", str(root / "token")]) as proc:
        yield proc


def _cli(*args: str, token: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("INFERD_ADMIN_TOKEN", None)
    if token:
        env["INFERD_ADMIN_TOKEN"] = TOKEN
    return subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "rollout", *args],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip


def test_the_rollout_command(server: ServerProcess, tmp_path: Path) -> None:
    policy = tmp_path / "canary.yaml"
    policy.write_text("kind: canary\nprimary: {version: 1}\ncandidate: {version: 2}\n"
                      "stages: [0.25, 1.0]\nauto_promote: false\n")  # fmt: skip
    url = server.http_url
    done = _cli("set", "addsub", str(policy), "-u", url)
    assert done.returncode == 0, done.stderr
    assert "canary policy" in done.stdout
    assert "stage 1 of 2 (25.0% to the candidate), running" in done.stdout
    refused = _cli("promote", "addsub", "-u", url, token=False)
    assert refused.returncode == 2
    assert "HTTP 401" in refused.stderr
    assert "INFERD_ADMIN_TOKEN" in refused.stderr
    promoted = _cli("promote", "addsub", "-u", url)
    assert "stage 2 of 2 (100.0% to the candidate)" in promoted.stdout, promoted.stderr
    shown = _cli("show", "addsub", "--json", "-u", url, token=False)
    assert json.loads(shown.stdout)["canary"]["stage"] == 1
    policy.write_text("kind: canary\ncandidate: {version: 2}\n")
    wrong = _cli("set", "addsub", str(policy), "-u", url)
    assert wrong.returncode == 2
    assert wrong.stderr.strip().endswith("primary: required: the version serving today, e.g. "
                                         "{version: 1}")  # fmt: skip
    assert len(wrong.stderr.strip().splitlines()) == 1
    cleared = _cli("clear", "addsub", "-u", url)
    assert cleared.returncode == 0
    assert _cli("show", "addsub", "-u", url).returncode == 2


def test_a_wrong_policy_file_stops_the_server_at_start(tmp_path: Path) -> None:
    model = write_add_sub(
        tmp_path / "models", "addsub", (1, 2), config=ADD_SUB_CONFIG + ALL_VERSIONS
    )
    (model / "rollout.yaml").write_text(
        "kind: canary\nprimary: {version: 1}\ncandidate: {version: 3}\n"
    )
    cmd = [sys.executable, "-m", "inferd.cli.main", "serve", "--model-repository",
           str(tmp_path / "models"), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
           "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "model 'addsub' serves without a traffic policy" in done.stderr
    assert "rollout.yaml: rollout policy: candidate: Request for unknown model" in done.stderr
    assert "inferd ready" not in done.stderr + done.stdout
