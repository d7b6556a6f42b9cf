"""The OpenVINO backend on real compiled models (ONNX graphs built in the test, and IR)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx_graphs import add_sub, batched_scalar, identity, save

ov = pytest.importorskip("openvino")

from inferd.backends.base import ExecutionTimes, LoadContext  # noqa: E402
from inferd.backends.openvino import (  # noqa: E402
    OpenVinoBackend,
    OpenVinoInstance,
    OpenVinoModel,
    parse_settings,
)
from inferd.backends.registry import default_registry  # noqa: E402
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto  # noqa: E402
from inferd.core.inference import InferRequest  # noqa: E402
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec  # noqa: E402
from inferd.errors import ConfigError, InferdError, InvalidInputError, ModelLoadError  # noqa: E402
from inferd.repository.autocomplete import complete_config  # noqa: E402
from inferd.repository.normalize import normalize_and_validate  # noqa: E402

CPU = InstanceGroupSpec(name="g", kind="KIND_CPU", count=1)
ONNX_OV = 'backend: "openvino"\ndefault_model_filename: "model.onnx"\n'


def _spec(model_dir: Path, config_text: str) -> ModelSpec:
    cfg = parse_pbtxt(config_text, str(model_dir / "config.pbtxt"))
    complete_config(
        cfg, model_dir, [1], default_registry(load_entry_points=False), auto_complete=True
    )
    normalize_and_validate(cfg, model_dir)
    return spec_from_proto(cfg)


def _load(spec: ModelSpec, model_dir: Path) -> OpenVinoModel:
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    return OpenVinoBackend().load(ctx)


def _model_dir(model: onnx.ModelProto, tmp_path: Path) -> Path:
    model_dir = tmp_path / "m"
    save(model, model_dir / "1" / "model.onnx")
    return model_dir


def _instance(model: onnx.ModelProto, tmp_path: Path, config: str = ONNX_OV) -> OpenVinoInstance:
    model_dir = _model_dir(model, tmp_path)
    return _load(_spec(model_dir, config), model_dir).create_instance(CPU, 0)


def _ok(result: Any) -> dict[str, np.ndarray[Any, Any]]:
    assert not isinstance(result, InferdError), result
    outputs: dict[str, np.ndarray[Any, Any]] = result
    return outputs


def _request(**inputs: np.ndarray[Any, Any]) -> InferRequest:
    return InferRequest(model_name="m", inputs=dict(inputs))


def _f32(*shape: int) -> np.ndarray[Any, Any]:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_ir_model_is_detected_auto_completed_and_served(tmp_path: Path) -> None:
    source = save(add_sub(TensorProto.FLOAT), tmp_path / "src.onnx")
    model_dir = tmp_path / "ir"
    (model_dir / "1").mkdir(parents=True)
    ov.save_model(ov.Core().read_model(str(source)), str(model_dir / "1" / "model.xml"))
    spec = _spec(model_dir, "")  # no config: model.xml picks the backend
    assert (spec.backend, spec.default_model_filename) == ("openvino", "model.xml")
    assert spec.max_batch_size == 4
    assert [(t.name, t.dims) for t in spec.inputs] == [("INPUT0", (16,)), ("INPUT1", (16,))]
    instance = _load(spec, model_dir).create_instance(CPU, 0)
    a, b = _f32(2, 16), _f32(2, 16)
    out = _ok(instance.execute([_request(INPUT0=a, INPUT1=b)])[0])
    np.testing.assert_allclose(out["OUTPUT0"], a + b, rtol=1e-6)
    np.testing.assert_allclose(out["OUTPUT1"], a - b, rtol=1e-6)


def test_same_onnx_file_runs_on_either_runtime(tmp_path: Path) -> None:
    model_dir = _model_dir(add_sub(TensorProto.FLOAT), tmp_path)
    by_ov = _spec(model_dir, ONNX_OV)
    by_ort = _spec(model_dir, 'backend: "onnxruntime"\n')
    assert (by_ov.backend, by_ort.backend) == ("openvino", "onnxruntime")
    registry = default_registry(load_entry_points=False)
    a, b = _f32(3, 16), _f32(3, 16)
    results = []
    for spec in (by_ov, by_ort):
        ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
        instance = registry.get(spec.backend).load(ctx).create_instance(CPU, 0)
        results.append(_ok(instance.execute([_request(INPUT0=a, INPUT1=b)])[0]))
    np.testing.assert_allclose(results[0]["OUTPUT0"], results[1]["OUTPUT0"], rtol=1e-6)


@pytest.mark.parametrize(
    ("elem", "dtype"),
    [
        (TensorProto.BOOL, np.bool_),
        (TensorProto.UINT8, np.uint8),
        (TensorProto.INT8, np.int8),
        (TensorProto.INT32, np.int32),
        (TensorProto.INT64, np.int64),
        (TensorProto.FLOAT16, np.float16),
        (TensorProto.FLOAT, np.float32),
        (TensorProto.DOUBLE, np.float64),
    ],
)
def test_numeric_datatypes_round_trip(tmp_path: Path, elem: int, dtype: Any) -> None:
    instance = _instance(identity(elem), tmp_path)
    array = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
    out = _ok(instance.execute([_request(IN=array)])[0])["OUT"]
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, array)


def test_string_models_are_refused_with_a_pointer_to_onnxruntime(tmp_path: Path) -> None:
    model_dir = _model_dir(identity(TensorProto.STRING), tmp_path)
    with pytest.raises(ConfigError, match="element type string"):
        _spec(model_dir, ONNX_OV)  # auto-complete refuses
    config = (
        ONNX_OV + "max_batch_size: 4\n"
        'input [{name: "IN", data_type: TYPE_STRING, dims: [3]}]\n'
        'output [{name: "OUT", data_type: TYPE_STRING, dims: [3]}]\n'
    )
    with pytest.raises(ModelLoadError, match=r"^failed to load 'm'.*use the onnxruntime backend"):
        _load(_spec(model_dir, config), model_dir)


def test_inputs_openvino_would_silently_accept_are_refused(tmp_path: Path) -> None:
    """OpenVINO converts data types and accepted a wrong inner dim; the backend checks first."""
    instance = _instance(add_sub(TensorProto.FLOAT), tmp_path)
    good = _f32(1, 16)
    wrong_type = _request(INPUT0=good.astype(np.int32), INPUT1=good)
    wrong_dim = _request(INPUT0=_f32(1, 15), INPUT1=good)
    missing = _request(INPUT0=good)
    unknown = _request(INPUT0=good, INPUT1=good, EXTRA=good)
    too_big = _request(INPUT0=_f32(5, 16), INPUT1=_f32(5, 16))  # max_batch_size 4
    results = instance.execute([wrong_type, wrong_dim, missing, unknown, too_big])
    for result, text in zip(
        results,
        [
            "data type int32, expected float32",
            "shape [1, 15]",
            "missing input(s) INPUT1",
            "unexpected inference input 'EXTRA'",
            "shape [5, 16]",
        ],
        strict=True,
    ):
        assert isinstance(result, InvalidInputError), result
        assert text in str(result)


def test_bad_request_in_a_stacked_batch_fails_alone(tmp_path: Path) -> None:
    instance = _instance(add_sub(TensorProto.FLOAT), tmp_path)
    a, b = _f32(1, 16), _f32(2, 16)
    bad = _request(INPUT0=a.astype(np.float64), INPUT1=a.astype(np.float64))
    first, error, last = instance.execute(
        [_request(INPUT0=a, INPUT1=a), bad, _request(INPUT0=b, INPUT1=b)]
    )
    np.testing.assert_allclose(_ok(first)["OUTPUT0"], 2 * a)
    assert isinstance(error, InvalidInputError)
    np.testing.assert_allclose(_ok(last)["OUTPUT0"], 2 * b)


def test_stacked_batch_reports_times(tmp_path: Path) -> None:
    instance = _instance(add_sub(TensorProto.FLOAT), tmp_path)
    times = ExecutionTimes()
    requests = [_request(INPUT0=_f32(n, 16), INPUT1=_f32(n, 16)) for n in (1, 2)]
    results = instance.execute_timed(requests, times)
    assert [_ok(r)["OUTPUT0"].shape for r in results] == [(1, 16), (2, 16)]
    assert times.infer_ns > 0


def test_config_reshape_scalar_per_item(tmp_path: Path) -> None:
    instance = _instance(batched_scalar(), tmp_path)  # dims [1] + reshape [] per batch item
    x = np.array([[1.0], [2.5]], dtype=np.float32)
    out = _ok(instance.execute([_request(X=x)])[0])["Y"]
    assert out.shape == (2, 1)
    np.testing.assert_allclose(out, x * 2)


def _params(**values: str) -> str:
    return "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in values.items()
    )


def test_default_threads_share_cores_and_one_stream(tmp_path: Path) -> None:
    model_dir = _model_dir(add_sub(TensorProto.FLOAT), tmp_path)
    spec = _spec(model_dir, ONNX_OV + "instance_group [{kind: KIND_CPU, count: 2}]\n")
    props = dict(parse_settings(spec, cores=8).properties)
    assert props == {"INFERENCE_NUM_THREADS": "4", "NUM_STREAMS": "1"}
    hinted = _spec(model_dir, ONNX_OV + _params(PERFORMANCE_HINT="throughput"))
    assert dict(parse_settings(hinted, cores=8).properties) == {"PERFORMANCE_HINT": "THROUGHPUT"}


def test_parameters_are_honoured_by_the_compiled_model(tmp_path: Path) -> None:
    model_dir = _model_dir(add_sub(TensorProto.FLOAT), tmp_path)
    n = str(min(2, len(os.sched_getaffinity(0))))  # OpenVINO caps threads at the cores
    config = ONNX_OV + _params(INFERENCE_NUM_THREADS=n, NUM_STREAMS=n)
    instance = _load(_spec(model_dir, config), model_dir).create_instance(CPU, 0)
    compiled = instance._compiled
    assert compiled is not None
    assert str(compiled.get_property("INFERENCE_NUM_THREADS")) == n
    assert str(compiled.get_property("NUM_STREAMS")) == n


@pytest.mark.parametrize(("hint", "precision"), [("YES", "bf16"), ("NO", "f32")])
def test_hint_bf16_sets_the_inference_precision_either_way(
    tmp_path: Path, hint: str, precision: str
) -> None:
    model_dir = _model_dir(add_sub(TensorProto.FLOAT), tmp_path)
    spec = _spec(model_dir, ONNX_OV + _params(HINT_BF16=hint))
    assert dict(parse_settings(spec, cores=2).properties)["INFERENCE_PRECISION_HINT"] == precision
    compiled = _load(spec, model_dir).create_instance(CPU, 0)._compiled
    assert compiled is not None
    if precision == "f32" or "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        assert compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name() == precision


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"CPU_THREADS_NUM": "2"}, "old name of 'INFERENCE_NUM_THREADS'"),
        ({"CPU_EXTENSION_PATH": "/x.so"}, "shared libraries"),
        ({"MYSTERY": "1"}, "unknown OpenVINO parameter 'MYSTERY'"),
        ({"NUM_STREAMS": "0"}, "'NUM_STREAMS' must be an integer >= 1"),
        ({"PERFORMANCE_HINT": "FAST"}, "'PERFORMANCE_HINT' must be one of"),
        ({"HINT_BF16": "maybe"}, "'HINT_BF16' must be YES or NO"),
        ({"ENABLE_BATCH_PADDING": "YES"}, "only applies with SKIP_OV_DYNAMIC_BATCHSIZE"),
    ],
)
def test_parameters_that_cannot_be_honoured_fail_the_load(
    tmp_path: Path, params: dict[str, str], message: str
) -> None:
    model_dir = _model_dir(add_sub(TensorProto.FLOAT), tmp_path)
    spec = _spec(model_dir, ONNX_OV + _params(**params))
    with pytest.raises(ModelLoadError, match=r"^failed to load 'm'") as info:
        _load(spec, model_dir)
    assert message in str(info.value)


def test_fixed_batch_with_padding(tmp_path: Path) -> None:
    params = _params(SKIP_OV_DYNAMIC_BATCHSIZE="YES", ENABLE_BATCH_PADDING="YES")
    instance = _instance(add_sub(TensorProto.FLOAT), tmp_path, ONNX_OV + params)
    assert instance._compiled is not None
    assert str(instance._compiled.input(0).get_partial_shape()) == "[4,16]"
    a = _f32(3, 16)
    out = _ok(instance.execute([_request(INPUT0=a, INPUT1=a)])[0])
    assert out["OUTPUT0"].shape == (3, 16)
    np.testing.assert_allclose(out["OUTPUT0"], 2 * a)


def test_fixed_batch_without_padding_refuses_other_sizes(tmp_path: Path) -> None:
    config = ONNX_OV + _params(SKIP_OV_DYNAMIC_BATCHSIZE="YES")
    instance = _instance(add_sub(TensorProto.FLOAT), tmp_path, config)
    a = _f32(3, 16)
    [result] = instance.execute([_request(INPUT0=a, INPUT1=a)])
    assert isinstance(result, InvalidInputError)
    assert "ENABLE_BATCH_PADDING" in str(result)


def test_reshape_io_layers_takes_the_config_dims(tmp_path: Path) -> None:
    model = add_sub(TensorProto.FLOAT, shape=("N", "D"))
    config = (
        ONNX_OV
        + "max_batch_size: 8\n"
        + _params(RESHAPE_IO_LAYERS="YES")
        + 'input [{name: "INPUT0", data_type: TYPE_FP32, dims: [16]},'
        '{name: "INPUT1", data_type: TYPE_FP32, dims: [16]}]\n'
        'output [{name: "OUTPUT0", data_type: TYPE_FP32, dims: [16]},'
        '{name: "OUTPUT1", data_type: TYPE_FP32, dims: [16]}]\n'
    )
    instance = _instance(model, tmp_path, config)
    assert instance._compiled is not None
    assert str(instance._compiled.input(0).get_partial_shape()) == "[1..8,16]"


def test_gpu_instances_are_refused(tmp_path: Path) -> None:
    model_dir = _model_dir(add_sub(TensorProto.FLOAT), tmp_path)
    loaded = _load(_spec(model_dir, ONNX_OV), model_dir)
    gpu = InstanceGroupSpec(name="g", kind="KIND_GPU", count=1, gpus=(0,))
    with pytest.raises(ModelLoadError, match="CPU only"):
        loaded.create_instance(gpu, 0)


def test_ir_without_weights_fails_to_load(tmp_path: Path) -> None:
    source = save(add_sub(TensorProto.FLOAT), tmp_path / "src.onnx")
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    ov.save_model(ov.Core().read_model(str(source)), str(model_dir / "1" / "model.xml"))
    spec = _spec(model_dir, 'backend: "openvino"\n')
    os.remove(model_dir / "1" / "model.bin")
    with pytest.raises(ModelLoadError, match=r"^failed to load 'm' version 1: .*model.bin"):
        _load(spec, model_dir)


def test_missing_file_fails_to_load(tmp_path: Path) -> None:
    model_dir = _model_dir(add_sub(TensorProto.FLOAT), tmp_path)
    spec = _spec(model_dir, ONNX_OV)
    (model_dir / "1" / "model.onnx").unlink()
    with pytest.raises(ModelLoadError, match=r"^failed to load 'm' version 1: unable to find"):
        _load(spec, model_dir)


def test_config_that_disagrees_with_the_model_fails_to_load(tmp_path: Path) -> None:
    model_dir = _model_dir(add_sub(TensorProto.FLOAT), tmp_path)
    config = (
        ONNX_OV + "max_batch_size: 4\n"
        'input [{name: "INPUT0", data_type: TYPE_INT32, dims: [16]},'
        '{name: "INPUT1", data_type: TYPE_FP32, dims: [16]}]\n'
        'output [{name: "OUTPUT0", data_type: TYPE_FP32, dims: [16]}]\n'
    )
    with pytest.raises(ModelLoadError, match="expects data type TYPE_FP32"):
        _load(_spec(model_dir, config), model_dir)


@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_both_runtimes_word_a_rank_mismatch_alike(tmp_path: Path, backend: str) -> None:
    model_dir = _model_dir(add_sub(TensorProto.FLOAT), tmp_path)
    tensors = (
        'input [{name: "INPUT0", data_type: TYPE_FP32, dims: [4, 4]},'
        '{name: "INPUT1", data_type: TYPE_FP32, dims: [16]}]\n'
        'output [{name: "OUTPUT0", data_type: TYPE_FP32, dims: [16]}]\n'
    )
    config = f'backend: "{backend}"\ndefault_model_filename: "model.onnx"\nmax_batch_size: 4\n'
    spec = _spec(model_dir, config + tensors)
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    with pytest.raises(ModelLoadError) as info:
        default_registry(load_entry_points=False).get(backend).load(ctx)
    assert info.value.message.endswith(
        "input 'INPUT0': the model has rank 2 (shape [-1, 16]) but the model configuration gives "
        "dims [4, 4], i.e. rank 3 (max_batch_size > 0 adds a leading batch dimension to the "
        "config's dims)"
    )
