"""Where instances run: the device rule (Triton's: ``count`` instances on each listed GPU),
GPU counting under ``CUDA_VISIBLE_DEVICES``, ``KIND_GPU`` normalisation and refusals, ONNX
Runtime's GPU accelerators, and GPU metrics absent without NVML."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from inferd.backends.ort_providers import (
    CPU,
    CUDA,
    TENSORRT,
    Accelerators,
    parse_accelerators,
    providers,
)
from inferd.backends.registry import default_registry
from inferd.codecs.model_config import ModelConfig, parse_pbtxt, spec_from_proto, to_json_dict
from inferd.core.devices import (
    count_visible,
    gpu_index,
    group_devices,
    instance_count,
    instance_device,
    visible_gpu_count,
)
from inferd.core.model_spec import InstanceGroupSpec
from inferd.errors import ConfigError
from inferd.metrics.gpu import GpuCollector, plain_decimals, visible_indices
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from inferd.repository.normalize import normalize_and_validate
from tests.helpers.models import ADD_SUB_CONFIG, write_add_sub

NO_GPU = pytest.mark.skipif(
    visible_gpu_count() > 0, reason="checks the behaviour of a machine without a visible GPU"
)

# -- the device rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "count", "gpus", "devices"),
    [
        ("KIND_CPU", 3, (), ["cpu", "cpu", "cpu"]),
        ("KIND_CPU", 2, (0, 1), ["cpu", "cpu"]),  # gpus are ignored off the GPU
        ("KIND_MODEL", 1, (), ["cpu"]),
        ("KIND_GPU", 1, (), ["cuda:0"]),
        ("KIND_GPU", 1, (2,), ["cuda:2"]),
        ("KIND_GPU", 2, (0, 1), ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]),
        ("KIND_GPU", 1, (1, 0, 3), ["cuda:1", "cuda:0", "cuda:3"]),
        ("KIND_GPU", 0, (0,), ["cuda:0"]),  # a count below 1 means one
    ],
)
def test_instances_are_placed_as_triton_places_them(
    kind: str, count: int, gpus: tuple[int, ...], devices: list[str]
) -> None:
    assert instance_count(kind, count, gpus) == len(devices)
    assert group_devices(kind, count, gpus) == devices


def test_an_index_outside_the_group_is_refused() -> None:
    with pytest.raises(ValueError, match=r"instance 4 is outside its group \(4 instance"):
        instance_device("KIND_GPU", 2, (0, 1), 4)


def test_device_names_parse() -> None:
    assert gpu_index("cpu") is None
    assert gpu_index("cuda:3") == 3
    with pytest.raises(ValueError, match="not a device name"):
        gpu_index("gpu3")


@pytest.mark.parametrize(
    ("physical", "env", "visible"),
    [
        (2, None, 2),
        (2, "", 0),
        (2, "1", 1),
        (2, "0,1,2,3", 2),
        (4, "0,-1,2", 1),  # CUDA stops at the first entry it cannot use
        (1, "GPU-8a0b", 1),
        (0, "0", 0),
    ],
)
def test_cuda_visible_devices_caps_the_gpu_count(physical: int, env: str | None, visible: int):
    assert count_visible(physical, env) == visible


def test_metrics_report_the_gpus_cuda_shows() -> None:
    uuids = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"]
    assert visible_indices(3, uuids, None) == [0, 1, 2]
    assert visible_indices(3, uuids, "2,0") == [2, 0]
    assert visible_indices(3, uuids, "GPU-bbbb") == [1]
    assert visible_indices(3, uuids, "1,7,0") == [1]
    assert visible_indices(3, uuids, "") == []
    assert visible_indices(3, uuids, "GPU-") == []  # ambiguous


# -- normalisation -------------------------------------------------------------------------------

IO = """
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


def _normalise(text: str, tmp_path: Path, **kwargs: int | bool) -> ModelConfig:
    model_dir = tmp_path / "m"
    model_dir.mkdir(exist_ok=True)
    cfg = parse_pbtxt(text + IO, str(model_dir / "config.pbtxt"))
    normalize_and_validate(cfg, model_dir, **kwargs)  # type: ignore[arg-type]
    return cfg


def test_kind_gpu_without_a_gpu_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"model 'm': instance group 'm' requests KIND_GPU but no GPU is available "
        r"\(NVML finds none, or CUDA_VISIBLE_DEVICES hides them\); use KIND_CPU",
    ):
        _normalise("instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]", tmp_path, gpu_count=0)


def test_a_gpu_that_is_not_there_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"names GPU 2 but this machine has 2 visible GPU\(s\), numbered 0 to 1"
    ):
        _normalise("instance_group [ { kind: KIND_GPU gpus: [ 0, 2 ] } ]", tmp_path, gpu_count=2)


def test_kind_gpu_gets_every_gpu_when_none_are_listed(tmp_path: Path) -> None:
    cfg = _normalise("instance_group [ { kind: KIND_GPU count: 2 } ]", tmp_path, gpu_count=3)
    assert list(cfg.instance_group[0].gpus) == [0, 1, 2]
    group = spec_from_proto(cfg).instance_groups[0]
    assert instance_count(group.kind, group.count, group.gpus) == 6


def test_auto_stays_on_the_host_when_the_runtime_cannot_use_the_gpu(tmp_path: Path) -> None:
    text = 'backend: "onnxruntime"'
    on_host = _normalise(text, tmp_path, gpu_count=1, auto_gpu=False)
    group = to_json_dict(on_host)["instance_group"][0]
    assert group["kind"] == "KIND_CPU"
    assert group["gpus"] == []
    on_gpu = _normalise(text, tmp_path, gpu_count=1, auto_gpu=True)
    assert to_json_dict(on_gpu)["instance_group"][0]["kind"] == "KIND_GPU"
    assert list(on_gpu.instance_group[0].gpus) == [0]


# -- ONNX Runtime's accelerators ---------------------------------------------------------------


def _accelerated(text: str) -> Accelerators:
    config = parse_pbtxt(
        f"optimization {{ execution_accelerators {{ gpu_execution_accelerator: [ {text} ] }} }}",
        "m",
    )
    return parse_accelerators(spec_from_proto(config))


def test_accelerators_become_provider_options() -> None:
    parsed = _accelerated(
        '{ name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } '
        'parameters { key: "max_workspace_size_bytes" value: "1073741824" } }, '
        '{ name: "cuda" parameters { key: "cudnn_conv_algo_search" value: "HEURISTIC" } }'
    )
    assert parsed.tensorrt == {"trt_fp16_enable": "True", "trt_max_workspace_size": "1073741824"}
    assert parsed.cuda == {"cudnn_conv_algo_search": "HEURISTIC"}
    spec = spec_from_proto(parse_pbtxt("", "m"))
    gpu = InstanceGroupSpec(name="g", kind="KIND_GPU", count=1, gpus=(0, 3))
    available = [TENSORRT, CUDA, CPU]
    assert providers(spec, gpu, 1, parsed, available) == [
        (
            TENSORRT,
            {"device_id": "3", "trt_fp16_enable": "True", "trt_max_workspace_size": "1073741824"},
        ),
        (CUDA, {"device_id": "3", "cudnn_conv_algo_search": "HEURISTIC"}),
        CPU,
    ]
    cpu = InstanceGroupSpec(name="c", kind="KIND_CPU", count=1)
    assert providers(spec, cpu, 0, parsed, available) == [CPU]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{ name: "openvino" }', r"unknown gpu_execution_accelerator 'openvino'"),
        (
            '{ name: "tensorrt" parameters { key: "precision" value: "FP16" } }',
            r"unknown tensorrt accelerator parameter 'precision'",
        ),
        (
            '{ name: "tensorrt" parameters { key: "precision_mode" value: "FP8" } }',
            r"tensorrt precision_mode 'FP8' is not one of FP32, FP16, INT8",
        ),
        (
            '{ name: "cuda" parameters { key: "device" value: "1" } }',
            r"unknown cuda accelerator parameter 'device'",
        ),
    ],
)
def test_unknown_accelerators_and_parameters_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _accelerated(text)


async def _load_failures(repo: Path) -> dict[str, str]:
    manager = RepositoryManager(
        [repo], default_registry(), mode=ControlMode.NONE, options=LoadOptions()
    )
    try:
        return await manager.startup()
    finally:
        await manager.close()


@pytest.mark.skipif(
    "TensorrtExecutionProvider" in ort.get_available_providers(),
    reason="checks the refusal by an ONNX Runtime without TensorRT",
)
async def test_a_missing_accelerator_refuses_the_load(tmp_path: Path) -> None:
    accelerated = ADD_SUB_CONFIG + (
        "instance_group [ { kind: KIND_CPU } ]\n"
        "optimization { execution_accelerators { "
        'gpu_execution_accelerator: [ { name: "tensorrt" } ] } }'
    )
    write_add_sub(tmp_path, "trt", config=accelerated)
    failures = await _load_failures(tmp_path)
    assert (
        "the tensorrt execution accelerator is requested but this ONNX Runtime has no "
        in (failures["trt"])
    )
    assert "TensorrtExecutionProvider" in failures["trt"]
    assert "install onnxruntime-gpu" in failures["trt"]


@NO_GPU
async def test_kind_gpu_is_refused_by_the_repository_without_a_gpu(tmp_path: Path) -> None:
    write_add_sub(
        tmp_path, "on_gpu", config=ADD_SUB_CONFIG + "instance_group [ { kind: KIND_GPU } ]"
    )
    write_add_sub(tmp_path, "on_host")  # no instance_group: the host, and it loads
    failures = await _load_failures(tmp_path)
    assert list(failures) == ["on_gpu"]
    assert (
        "instance group 'on_gpu' requests KIND_GPU but no GPU is available" in (failures["on_gpu"])
    )


# -- GPU metrics without NVML ------------------------------------------------------------------


@NO_GPU
def test_gpu_metrics_are_absent_without_a_gpu() -> None:
    collector = GpuCollector()
    assert collector.gpu_uuids == []
    assert list(collector.collect()) == []
    collector.close()


def test_gauges_print_plain_decimals_for_perf_analyzer() -> None:
    text = (
        b'nv_gpu_memory_total_bytes{gpu_uuid="GPU-1"} 8.589934592e+010\n'
        b"nv_cpu_memory_used_bytes 1.6e+010\n"
        b'nv_gpu_utilization{gpu_uuid="GPU-1"} 0.25\n'
        b"process_virtual_memory_bytes 1.6e+010\n"
    )
    assert plain_decimals(text) == (
        b'nv_gpu_memory_total_bytes{gpu_uuid="GPU-1"} 85899345920\n'
        b"nv_cpu_memory_used_bytes 16000000000\n"
        b'nv_gpu_utilization{gpu_uuid="GPU-1"} 0.25\n'
        b"process_virtual_memory_bytes 1.6e+010\n"
    )


def test_the_instance_ceiling_counts_instances_on_every_gpu(tmp_path: Path) -> None:
    from inferd.repository.ceilings import check_ceilings

    cfg = _normalise(
        "instance_group [ { kind: KIND_GPU count: 3 gpus: [ 0, 1 ] } ]", tmp_path, gpu_count=2
    )
    check_ceilings(cfg, max_instances=6, max_threads=1000, from_request=True)
    with pytest.raises(ConfigError, match=r"instance_group asks for 6 instances, more than the 5"):
        check_ceilings(cfg, max_instances=5, max_threads=1000, from_request=True)
