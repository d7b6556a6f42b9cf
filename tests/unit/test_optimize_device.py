"""``inferd optimize --device``: what ``auto`` means for a configuration, how the instances of
every model the run serves move to the chosen device, and a GPU that cannot be used refused
with the reason (on this machine's real torch and ONNX Runtime, never a silent fallback)."""

from __future__ import annotations

import argparse

import pytest

from inferd.cli.optimize_args import add_optimize_arguments
from inferd.codecs.model_config import ModelConfig, parse_pbtxt
from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.device import (
    Device,
    cuda_problem,
    device_config,
    moves_instances,
    parse_device,
    require_device,
    resolve_device,
)
from inferd.tools.optimize.plan import KINDS, Step, _on_gpu


def _config(groups: str = "") -> ModelConfig:
    return parse_pbtxt(f'name: "m" platform: "pytorch_libtorch" {groups}', "config.pbtxt")


def _kinds(config: ModelConfig) -> list[tuple[str, int, list[int]]]:
    return [(type(g).Kind.Name(g.kind), g.count, list(g.gpus)) for g in config.instance_group]


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _ort_cuda() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.parametrize("text", ["cpu", "auto", "cuda", "cuda:0", "CUDA:3", " cuda:12 "])
def test_parse_device_takes_the_documented_spellings(text: str) -> None:
    assert parse_device(text) == text.strip().lower()


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:-1", "cuda:x", "mps", "cpu:0", ""])
def test_parse_device_refuses_anything_else_naming_the_choices(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"give cpu, cuda, cuda:N or auto"):
        parse_device(text)


def test_auto_follows_the_configs_kind_gpu_and_its_first_gpu() -> None:
    gpu = resolve_device("auto", _config("instance_group [ { kind: KIND_GPU gpus: [ 2, 3 ] } ]"))
    assert (gpu.name, gpu.is_cuda) == ("cuda:2", True)
    assert "KIND_GPU" in gpu.why
    assert resolve_device("auto", _config("instance_group [ { kind: KIND_GPU } ]")).name == (
        "cuda:0"
    )
    for host in (
        "",
        "instance_group [ { kind: KIND_CPU } ]",
        "instance_group [ { kind: KIND_AUTO } ]",
    ):
        assert resolve_device("auto", _config(host)).name == "cpu"


def test_an_explicit_device_wins_over_the_config() -> None:
    config = _config("instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]")
    assert resolve_device("cpu", config).name == "cpu"
    assert resolve_device("cuda", _config()).name == "cuda:0"
    assert resolve_device("cuda:3", config).name == "cuda:3"


def test_instances_move_to_the_gpu_as_one_group_on_that_gpu() -> None:
    config = _config("instance_group [ { kind: KIND_CPU count: 3 }, { kind: KIND_CPU count: 1 } ]")
    moved = device_config(config, Device(1))
    assert _kinds(moved) == [("KIND_GPU", 3, [1])]
    assert moves_instances(config, Device(1))
    assert _kinds(config) == [("KIND_CPU", 3, []), ("KIND_CPU", 1, [])]  # left as it was
    assert _kinds(device_config(_config(), Device(0))) == [("KIND_GPU", 1, [0])]


def test_instances_move_to_the_host_keeping_one_per_gpu() -> None:
    config = _config("instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]")
    assert _kinds(device_config(config, Device(None))) == [("KIND_CPU", 4, [])]
    on_host = _config("instance_group [ { kind: KIND_CPU count: 2 } ]")
    assert not moves_instances(on_host, Device(None))
    on_gpu = _config("instance_group [ { kind: KIND_GPU count: 2 gpus: [ 1 ] } ]")
    assert not moves_instances(on_gpu, Device(1))


@pytest.mark.skipif(_torch_cuda(), reason="checks a machine where torch sees no CUDA device")
def test_a_gpu_torch_cannot_use_is_refused_with_the_reason() -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        require_device(resolve_device("cuda", _config()), "pytorch_libtorch", "m")
    message = refused.value.message
    assert message.startswith("cannot measure 'm' on cuda:0 (asked for with --device): ")
    assert "use --device cpu to measure on the host" in message
    assert "torch" in message


@pytest.mark.skipif(_ort_cuda(), reason="checks an ONNX Runtime without the CUDA provider")
def test_a_gpu_onnx_runtime_cannot_use_is_refused_naming_onnxruntime_gpu() -> None:
    device = resolve_device("auto", _config("instance_group [ { kind: KIND_GPU } ]"))
    with pytest.raises(InvalidArgumentError, match=r"install onnxruntime-gpu"):
        require_device(device, "onnxruntime_onnx", "m")


def test_host_only_runtimes_are_refused_on_a_gpu_whatever_the_machine() -> None:
    assert cuda_problem("openvino", 0) == "the openvino backend computes on the host"
    assert "not fil" in str(cuda_problem("fil", 0))
    require_device(Device(None), "openvino", "m")  # the host: nothing to refuse


def test_on_a_gpu_openvino_steps_are_skipped_with_the_reason() -> None:
    def never(*_: object) -> Candidate:
        raise AssertionError("a host-only step was built on a GPU")

    for kind in ("bf16", "openvino", "nncf-int8"):
        step = _on_gpu(Step(kind, kind, never), "cuda:0")
        with pytest.raises(CandidateSkipped, match=r"OpenVINO computes on the host.*cuda:0"):
            step.build(None, None, {})  # type: ignore[arg-type]
    torch_step = Step("torch-fp16", "torch-fp16", never)
    assert _on_gpu(torch_step, "cuda:0") is torch_step
    assert {"torch-fp16", "torch-bf16"} <= set(KINDS)


def test_the_cli_flag_is_checked_when_parsed() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_optimize_arguments(parser)
    base = ["m", "--model-repository", ".", "--calibration", "c", "--eval", "e"]
    assert parser.parse_args(base).device == "auto"
    assert parser.parse_args([*base, "--device", "CUDA:1"]).device == "cuda:1"
    with pytest.raises(argparse.ArgumentError, match=r"give cpu, cuda, cuda:N or auto"):
        parser.parse_args([*base, "--device", "gpu"])
