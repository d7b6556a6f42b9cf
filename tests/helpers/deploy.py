"""Reading the shipped deployment files: Kustomize builds, containers' inferd arguments, the
prometheus-adapter rules, and the Dockerfiles' instructions."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferd.cli.main import build_parser
from inferd.cli.serve import config_from_args

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
OVERLAYS = ("dev", "prod", "gpu")
ADAPTER_VALUES = KUBERNETES / "prometheus-adapter" / "values.yaml"
KSERVE = DEPLOY / "kserve"
DOCKERFILES = (DEPLOY / "docker" / "Dockerfile", DEPLOY / "docker" / "Dockerfile.gpu")

Manifest = dict[str, Any]


def kubectl() -> str:
    """The kubectl binary (its built-in Kustomize builds the overlays), or skip the test."""
    found = shutil.which("kubectl") or (
        "/usr/bin/kubectl" if Path("/usr/bin/kubectl").is_file() else None
    )
    if found is None:
        pytest.skip("kubectl is not installed: the Kustomize overlays cannot be built")
    return found


def kustomize(folder: Path) -> list[Manifest]:
    """``kubectl kustomize FOLDER``: the objects it builds, in order."""
    done = subprocess.run(
        [kubectl(), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"kubectl kustomize {folder} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def load_yaml(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def one(objects: list[Manifest], kind: str) -> Manifest:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_spec(obj: Manifest) -> Manifest:
    spec: Manifest = obj["spec"]["template"]["spec"]
    return spec


def inferd_container(deployment: Manifest) -> Manifest:
    containers = [c for c in pod_spec(deployment)["containers"] if c["name"] == "inferd"]
    assert len(containers) == 1
    return containers[0]


def serve_args(container: Manifest) -> argparse.Namespace:
    """The container's command line parsed by ``inferd``'s own parser and turned into its server
    configuration (an unknown flag or a bad value fails the test)."""
    argv = [*container.get("command", ["inferd"]), *container.get("args", [])]
    assert Path(argv[0]).name == "inferd", f"the container runs {argv[0]}, not inferd"
    assert argv[1] == "serve"
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit as exc:
        raise AssertionError(f"inferd serve refuses the arguments {argv[1:]}") from exc
    config_from_args(args)  # the checks `inferd serve` makes before it starts
    return args


def strip_listen_flags(args: list[str]) -> list[str]:
    """A container's inferd arguments without the repository and the ports (a test server binds
    port 0 and serves a repository of its own)."""
    dropped = (
        "--model-repository",
        "--model-store",
        "--http-port",
        "--grpc-port",
        "--metrics-port",
    )
    kept: list[str] = []
    skip = False
    for arg in args[1:]:  # past "serve"
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in dropped:
            skip = "=" not in arg
            continue
        kept.append(arg)
    return kept


def adapter_rules() -> list[Manifest]:
    document = load_yaml(ADAPTER_VALUES)[0]
    assert document["rules"]["default"] is False  # only inferd's rules, nothing implicit
    rules: list[Manifest] = document["rules"]["custom"]
    return rules


def adapter_metric_names() -> set[str]:
    """The custom metrics the adapter serves (each rule's ``name.as``)."""
    return {rule["name"]["as"] for rule in adapter_rules()}


def prometheus_series(rule: Manifest) -> set[str]:
    """The Prometheus series a rule reads: its seriesQuery's and any named in metricsQuery."""
    names = set(re.findall(r"\b(?:nv|inferd)_[a-z0-9_]+", rule["seriesQuery"]))
    names |= set(re.findall(r"\b(?:nv|inferd)_[a-z0-9_]+(?=\{)", rule["metricsQuery"]))
    return names


def dockerfile_stages(path: Path) -> list[list[tuple[str, str]]]:
    """A Dockerfile as stages of (INSTRUCTION, arguments), continuation lines joined and comments
    dropped; the instructions before the first FROM form stage 0."""
    lines: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or not stripped:
            continue  # comments may sit inside a continued instruction too
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, f"{path.name} ends inside a continued line"
    stages: list[list[tuple[str, str]]] = [[]]
    for line in lines:
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), rest.strip()))
    return stages


def iter_containers(objects: list[Manifest]) -> Iterator[tuple[str, Manifest]]:
    for obj in objects:
        if obj["kind"] == "Deployment":
            spec = pod_spec(obj)
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                yield f"{obj['metadata']['name']}/{c['name']}", c


def exec_form(text: str) -> list[str]:
    """A Dockerfile instruction's JSON array (exec form)."""
    value = json.loads(text)
    assert isinstance(value, list)
    assert all(isinstance(v, str) for v in value)
    return value


def healthcheck_command(dockerfile: Path) -> list[str]:
    """The final stage's HEALTHCHECK command (exec form), which tests run against a server."""
    final = dockerfile_stages(dockerfile)[-1]
    (check,) = [rest for instruction, rest in final if instruction == "HEALTHCHECK"]
    options, _, command = check.partition("CMD ")
    assert "--start-period=" in options
    return exec_form(command)
