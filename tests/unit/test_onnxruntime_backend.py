"""The ONNX Runtime backend on real sessions over graphs built in the test."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx_graphs import add_sub, batched_scalar, flatten_2x3, identity, save, sum_to_scalar

from inferd.backends.base import LoadContext
from inferd.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeInstance, OnnxRuntimeModel
from inferd.backends.registry import default_registry
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest, RequestedOutput
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import ConfigError, InferdError, InternalError, InvalidInputError, ModelLoadError
from inferd.repository.autocomplete import complete_config
from inferd.repository.normalize import normalize_and_validate

CPU_GROUP = InstanceGroupSpec(name="g", kind="KIND_CPU", count=1)


def _spec(model_dir: Path, config_text: str = "", *, auto_complete: bool = True) -> ModelSpec:
    cfg = parse_pbtxt(config_text, str(model_dir / "config.pbtxt"))
    complete_config(
        cfg,
        model_dir,
        [1],
        default_registry(load_entry_points=False),
        auto_complete=auto_complete,
    )
    normalize_and_validate(cfg, model_dir)
    return spec_from_proto(cfg)


def _load(spec: ModelSpec, model_dir: Path) -> OnnxRuntimeModel:
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    return OnnxRuntimeBackend().load(ctx)


def _instance(model: onnx.ModelProto, tmp_path: Path, config_text: str = "") -> OnnxRuntimeInstance:
    model_dir = tmp_path / "m"
    save(model, model_dir / "1" / "model.onnx")
    spec = _spec(model_dir, config_text)
    return _load(spec, model_dir).create_instance(CPU_GROUP, 0)


def _ok(result: Any) -> dict[str, np.ndarray[Any, Any]]:
    assert not isinstance(result, InferdError), result
    outputs: dict[str, np.ndarray[Any, Any]] = result
    return outputs


def _request(**inputs: np.ndarray[Any, Any]) -> InferRequest:
    return InferRequest(model_name="m", inputs=dict(inputs))


def test_simple_int32_add_sub(tmp_path: Path) -> None:
    instance = _instance(add_sub(), tmp_path)
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    [result] = instance.execute([_request(INPUT0=a, INPUT1=b)])
    out = _ok(result)
    assert list(out) == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)
    assert out["OUTPUT0"].dtype == np.int32


def test_requested_outputs_subset(tmp_path: Path) -> None:
    instance = _instance(add_sub(), tmp_path)
    a = np.zeros((1, 16), dtype=np.int32)
    request = _request(INPUT0=a, INPUT1=a)
    request.outputs = [RequestedOutput("OUTPUT1")]
    [result] = instance.execute([request])
    assert list(_ok(result)) == ["OUTPUT1"]


@pytest.mark.parametrize(
    ("elem", "dtype"),
    [
        (TensorProto.BOOL, np.bool_),
        (TensorProto.UINT8, np.uint8),
        (TensorProto.UINT16, np.uint16),
        (TensorProto.UINT32, np.uint32),
        (TensorProto.UINT64, np.uint64),
        (TensorProto.INT8, np.int8),
        (TensorProto.INT16, np.int16),
        (TensorProto.INT32, np.int32),
        (TensorProto.INT64, np.int64),
        (TensorProto.FLOAT16, np.float16),
        (TensorProto.FLOAT, np.float32),
        (TensorProto.DOUBLE, np.float64),
    ],
)
def test_numeric_datatypes_round_trip(tmp_path: Path, elem: int, dtype: Any) -> None:
    instance = _instance(identity(elem), tmp_path)
    data = (np.arange(6).reshape(2, 3) % 2 == 1) if dtype is np.bool_ else np.arange(6)
    array = np.asarray(data).astype(dtype).reshape(2, 3)
    [result] = instance.execute([_request(IN=array)])
    out = _ok(result)["OUT"]
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, array)


def test_bytes_round_trip_and_bad_utf8_fails_only_its_request(tmp_path: Path) -> None:
    instance = _instance(identity(TensorProto.STRING), tmp_path)
    good = np.array([[b"a", "é".encode(), b""]], dtype=object)
    bad = np.array([[b"ok", b"\xff\xfe", b"x"]], dtype=object)
    first, second = instance.execute([_request(IN=good), _request(IN=bad)])
    out = _ok(first)["OUT"]
    assert out.dtype == object
    assert out.tolist() == [[b"a", "é".encode(), b""]]
    assert all(isinstance(v, bytes) for v in out.ravel())
    assert isinstance(second, InvalidInputError)
    assert "input 'IN'" in str(second)
    assert "UTF-8" in str(second)


def test_scalar_output_of_non_batching_model_has_config_dims(tmp_path: Path) -> None:
    instance = _instance(sum_to_scalar(), tmp_path)
    [result] = instance.execute([_request(X=np.array([1, 2, 3, 4], dtype=np.float32))])
    out = _ok(result)["Y"]
    assert out.shape == (1,)
    assert out[0] == pytest.approx(10.0)


def test_batched_scalar_uses_empty_reshape(tmp_path: Path) -> None:
    instance = _instance(batched_scalar(), tmp_path)
    x = np.array([[1.0], [2.0], [3.0]], dtype=np.float32)  # [batch] + dims [1]
    [result] = instance.execute([_request(X=x)])
    out = _ok(result)["Y"]
    assert out.shape == (3, 1)
    np.testing.assert_allclose(out, x * 2)


def test_config_reshape_applies_both_ways(tmp_path: Path) -> None:
    config = (
        "max_batch_size: 4 "
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, 3 ] reshape { shape: [ 6 ] } } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 6 ] reshape { shape: [ 2, 3 ] } } ]'
    )
    instance = _instance(flatten_2x3(), tmp_path, config)
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    [result] = instance.execute([_request(X=x)])
    out = _ok(result)["Y"]
    assert out.shape == (2, 6)
    np.testing.assert_array_equal(out, x.reshape(2, 6))


def test_a_request_that_cannot_take_the_config_reshape_fails_alone(tmp_path: Path) -> None:
    config = (
        "max_batch_size: 4 "
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, 3 ] reshape { shape: [ 6 ] } } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 6 ] reshape { shape: [ 2, 3 ] } } ]'
    )
    instance = _instance(flatten_2x3(), tmp_path, config)
    good = np.ones((1, 2, 3), dtype=np.float32)
    ok, bad = instance.execute([_request(X=good), _request(X=np.ones((1, 1, 3), np.float32))])
    np.testing.assert_array_equal(_ok(ok)["Y"], np.ones((1, 6)))
    assert isinstance(bad, InvalidInputError), bad
    assert "input 'X' with shape [1, 1, 3] cannot be reshaped to [6]" in bad.message


def test_runtime_rejections_become_invalid_input(tmp_path: Path) -> None:
    instance = _instance(add_sub(), tmp_path)
    good = np.zeros((1, 16), dtype=np.int32)
    wrong_shape = np.zeros((1, 8), dtype=np.int32)
    wrong_type = np.zeros((1, 16), dtype=np.float32)
    results = instance.execute(
        [
            _request(INPUT0=wrong_shape, INPUT1=wrong_shape),
            _request(INPUT0=good, INPUT1=good),
            _request(INPUT0=wrong_type, INPUT1=good),
            _request(INPUT0=good),
            _request(INPUT0=good, INPUT1=good, EXTRA=good),
        ]
    )
    assert isinstance(results[0], InvalidInputError)
    assert "model 'm'" in str(results[0])
    _ok(results[1])
    assert isinstance(results[2], InvalidInputError)
    assert isinstance(results[3], InvalidInputError)
    assert isinstance(results[4], InvalidInputError)
    assert "EXTRA" in str(results[4])


def test_closed_instance_reports_internal_error(tmp_path: Path) -> None:
    instance = _instance(add_sub(), tmp_path)
    instance.close()
    good = np.zeros((1, 16), dtype=np.int32)
    [result] = instance.execute([_request(INPUT0=good, INPUT1=good)])
    assert isinstance(result, InternalError)


def test_instances_get_their_own_sessions(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    save(add_sub(), model_dir / "1" / "model.onnx")
    loaded = _load(_spec(model_dir), model_dir)
    first = loaded.create_instance(CPU_GROUP, 0)
    second = loaded.create_instance(CPU_GROUP, 1)
    assert first.session is not second.session
    loaded.close()


def test_bad_model_file_is_a_load_error(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    save(add_sub(), model_dir / "1" / "model.onnx")
    spec = _spec(model_dir)
    (model_dir / "1" / "model.onnx").write_bytes(b"this is not protobuf")
    with pytest.raises(ModelLoadError) as info:
        _load(spec, model_dir)
    assert str(info.value).startswith("failed to load 'm'")


def test_missing_model_file_is_a_load_error(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    save(add_sub(), model_dir / "1" / "model.onnx")
    spec = _spec(model_dir)
    (model_dir / "1" / "model.onnx").unlink()
    with pytest.raises(ModelLoadError, match=r"^failed to load 'm'.*unable to find"):
        _load(spec, model_dir)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            'input [ { name: "NOPE" data_type: TYPE_INT32 dims: [ -1, 16 ] } ] '
            'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]',
            "unexpected input 'NOPE'",
        ),
        (
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 16 ] }, '
            '{ name: "INPUT1" data_type: TYPE_INT32 dims: [ -1, 16 ] } ] '
            'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]',
            "input 'INPUT0': the model expects data type TYPE_INT32",
        ),
        (
            'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] } ] '
            'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]',
            "missing model input(s) INPUT1",
        ),
        (
            "max_batch_size: 4 "
            'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] }, '
            '{ name: "INPUT1" data_type: TYPE_INT32 dims: [ -1, 16 ] } ] '
            'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]',
            "input 'INPUT0': the model has rank 2",
        ),
    ],
)
def test_config_must_match_the_model(tmp_path: Path, config: str, message: str) -> None:
    model_dir = tmp_path / "m"
    save(add_sub(), model_dir / "1" / "model.onnx")
    spec = _spec(model_dir, config)
    with pytest.raises(ModelLoadError) as info:
        _load(spec, model_dir)
    assert str(info.value).startswith("failed to load 'm'")
    assert message in str(info.value)


def _options(tmp_path: Path, config: str) -> ort.SessionOptions:
    instance = _instance(add_sub(), tmp_path, config)
    return instance.session.get_session_options()


def test_default_session_options(tmp_path: Path) -> None:
    options = _options(tmp_path, "")
    # the default instances (two where there are two cores) share the cores
    cores = len(os.sched_getaffinity(0))
    instances = min(2, os.cpu_count() or 1)
    assert options.intra_op_num_threads == max(1, cores // instances)
    one = _options(tmp_path / "one", "instance_group [{ count: 1 kind: KIND_CPU }]")
    assert one.intra_op_num_threads == cores  # a single instance gets every core
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert options.enable_cpu_mem_arena is True


def test_session_option_parameters_are_honoured(tmp_path: Path) -> None:
    options = _options(
        tmp_path,
        'parameters { key: "intra_op_thread_count" value: { string_value: "2" } } '
        'parameters { key: "inter_op_thread_count" value: { string_value: "3" } } '
        'parameters { key: "execution_mode" value: { string_value: "1" } } '
        'parameters { key: "enable_mem_arena" value: { string_value: "0" } } '
        'parameters { key: "enable_mem_pattern" value: { string_value: "false" } } '
        "optimization { graph { level: 2 } }",
    )
    assert options.intra_op_num_threads == 2
    assert options.inter_op_num_threads == 3
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert options.enable_cpu_mem_arena is False
    assert options.enable_mem_pattern is False


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (-1, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
        (1, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
    ],
)
def test_graph_levels_follow_triton(tmp_path: Path, level: int, expected: Any) -> None:
    options = _options(tmp_path, f"optimization {{ graph {{ level: {level} }} }}")
    assert options.graph_optimization_level == expected


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ('parameters { key: "intra_op_thread_count" value: { string_value: "many" } }', "intra"),
        ('parameters { key: "inter_op_thread_count" value: { string_value: "-2" } }', "inter"),
        ('parameters { key: "execution_mode" value: { string_value: "2" } }', "execution_mode"),
        ('parameters { key: "enable_mem_arena" value: { string_value: "maybe" } }', "arena"),
        ('parameters { key: "enable_mem_pattern" value: { string_value: "" } }', "pattern"),
        ("optimization { graph { level: 7 } }", "optimization.graph.level"),
    ],
)
def test_bad_session_option_values_are_rejected(tmp_path: Path, config: str, key: str) -> None:
    model_dir = tmp_path / "m"
    save(add_sub(), model_dir / "1" / "model.onnx")
    spec = _spec(model_dir, config)
    with pytest.raises(ConfigError, match=key):
        _load(spec, model_dir)


def test_gpu_group_without_cuda_is_a_clear_load_error(tmp_path: Path) -> None:
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has CUDA")
    model_dir = tmp_path / "m"
    save(add_sub(), model_dir / "1" / "model.onnx")
    spec = _spec(model_dir)
    gpu = InstanceGroupSpec(name="gpu_group", kind="KIND_GPU", count=1, gpus=(0,))
    spec = dataclasses.replace(spec, instance_groups=(gpu,))
    with pytest.raises(ModelLoadError, match=r"'gpu_group' requests KIND_GPU.*CUDA"):
        _load(spec, model_dir)


def test_default_threads_share_the_cores_between_instances(tmp_path: Path) -> None:
    two = _options(tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }]")
    assert two.intra_op_num_threads == max(1, len(os.sched_getaffinity(0)) // 2)
    from inferd.backends.threads import default_intra_op_threads
    from inferd.codecs.model_config import parse_pbtxt, spec_from_proto

    spec = spec_from_proto(parse_pbtxt("instance_group [{ count: 3 }, { count: 1 }]", "x"))
    assert default_intra_op_threads(spec, cores=8) == 2
    assert default_intra_op_threads(spec, cores=2) == 1
