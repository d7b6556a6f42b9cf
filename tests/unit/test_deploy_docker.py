"""The Dockerfiles, read instruction by instruction: two stages, nothing built in the final one,
a non-root user, the ports and health check of inferd's defaults, and a command inferd accepts.
(Building them needs a Docker daemon and a registry; docs/kubernetes.md records a build.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from inferd.cli.main import build_parser
from tests.helpers.deploy import (
    DOCKERFILES,
    ROOT,
    dockerfile_stages,
    exec_form,
    healthcheck_command,
)

COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|build-essential|make|python3?-dev|cmake)\b")


def _defaults() -> tuple[int, int, int]:
    args = build_parser().parse_args(["serve", "--model-repository", "m"])
    return args.http_port, args.grpc_port, args.metrics_port


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_two_stages_and_nothing_built_in_the_final_one(dockerfile: Path) -> None:
    stages = dockerfile_stages(dockerfile)
    froms = [rest for stage in stages for instruction, rest in stage if instruction == "FROM"]
    assert len(froms) == 2
    assert froms[0].endswith(" AS build")
    final = stages[-1]
    assert any(i == "COPY" and rest.startswith("--from=build ") for i, rest in final)
    for instruction, rest in final:
        if instruction == "RUN":
            assert not COMPILERS.search(rest), f"the final stage installs a compiler: {rest}"
            assert "pip install" not in rest
    build = stages[-2]
    assert any("pip wheel" in rest for i, rest in build if i == "RUN")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_final_stage_runs_inferd_as_a_user(dockerfile: Path) -> None:
    final = dockerfile_stages(dockerfile)[-1]
    users = [rest for instruction, rest in final if instruction == "USER"]
    assert users, "no USER: the server would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), "a numeric uid lets runAsNonRoot verify it"
    assert int(uid) >= 1000
    entrypoint = [rest for i, rest in final if i == "ENTRYPOINT"]
    cmd = [rest for i, rest in final if i == "CMD"]
    argv = exec_form(entrypoint[-1]) + exec_form(cmd[-1])
    assert argv[0] == "inferd"
    args = build_parser().parse_args(argv[1:])
    # the CMD serves the example repository the build stage copied into the image
    copies = [rest.split() for stages in dockerfile_stages(dockerfile) for i, rest in stages]
    assert ["examples/models", str(args.model_repository[0])] in [c[-2:] for c in copies]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_ports_and_health_check_are_inferd_defaults(dockerfile: Path) -> None:
    http, grpc, metrics = _defaults()
    final = dockerfile_stages(dockerfile)[-1]
    exposed = {int(p) for i, rest in final if i == "EXPOSE" for p in rest.split()}
    assert exposed == {http, grpc, metrics}
    command = healthcheck_command(dockerfile)
    script = command[-1]
    assert f"http://127.0.0.1:{http}/v2/health/ready" in script


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_base_images(dockerfile: Path) -> None:
    stages = dockerfile_stages(dockerfile)
    args = dict(rest.split("=", 1) for i, rest in stages[0] if i == "ARG")
    if dockerfile.name == "Dockerfile":
        assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", args["PYTHON_IMAGE"])
    else:
        assert re.fullmatch(r"nvidia/cuda:[\d.]+-cudnn-runtime-ubuntu[\d.]+", args["CUDA_IMAGE"])
        build_runs = " ".join(rest for i, rest in stages[1] if i == "RUN")
        assert "pip uninstall -y onnxruntime" in build_runs
        assert "onnxruntime-gpu" in build_runs
    build_args = {rest.split("=", 1)[0] for stage in stages for i, rest in stage if i == "ARG"}
    assert "TORCH" in build_args  # PyTorch stays optional


def test_dockerignore_sends_only_what_the_image_needs() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "src", "examples/models"}
    copied = set()
    for dockerfile in DOCKERFILES:
        for stage in dockerfile_stages(dockerfile):
            for instruction, rest in stage:
                if instruction == "COPY" and not rest.startswith("--from"):
                    copied.update(shlex.split(rest)[:-1])
    assert {c.rstrip("/") for c in copied} == allowed
