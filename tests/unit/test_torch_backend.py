"""The PyTorch backend on real TorchScript modules and torch.export programs built in the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from inferd.backends.base import ExecutionTimes, LoadContext
from inferd.backends.registry import default_registry
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest, RequestedOutput
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import ConfigError, InferdError, InternalError, InvalidInputError, ModelLoadError
from inferd.repository.autocomplete import complete_config
from inferd.repository.normalize import normalize_and_validate
from inferd.testing.conformance import ConformanceCase, conformance_tests

torch = pytest.importorskip("torch")

from inferd.backends.torch import TorchBackend, TorchInstance, TorchModel  # noqa: E402
from inferd.backends.torch.backend import FAMILY  # noqa: E402
from inferd.backends.torch.settings import DEFAULT_INTRA_OP_THREADS, parse_settings  # noqa: E402

CPU = InstanceGroupSpec(name="g", kind="KIND_CPU", count=1)


# -- tiny models --------------------------------------------------------------------------------


class AddMul(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a * b


class Named(torch.nn.Module):
    def forward(self, scores: torch.Tensor, offset: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"shifted": scores + offset, "total": (scores + offset).sum(dim=1, keepdim=True)}


class RowCount(torch.nn.Module):
    """OUTPUT__0 = x * 2; OUTPUT__1 = the number of rows the module saw (shows stacking)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.full((x.shape[0], 1), x.shape[0], dtype=torch.int64)
        return x * 2, rows


class Picky(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("expected non-negative values")
        return x + 1


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


ADD_MUL_CONFIG = """
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 3 ] },
         { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def _write_script(model_dir: Path, module: torch.nn.Module, config: str) -> Path:
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(module), str(model_dir / "1" / "model.pt"))
    (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def _write_export(
    model_dir: Path,
    module: torch.nn.Module,
    example: tuple[torch.Tensor, ...],
    config: str = "",
    *,
    dynamic: bool = True,
) -> Path:
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    shapes = None
    if dynamic:
        batch = torch.export.Dim("batch", max=64)
        shapes = tuple({0: batch} for _ in example)
    program = torch.export.export(module, example, dynamic_shapes=shapes)
    torch.export.save(program, str(model_dir / "1" / "model.pt2"))
    (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def _config(model_dir: Path, *, auto_complete: bool = True) -> Any:
    cfg = parse_pbtxt((model_dir / "config.pbtxt").read_text(), str(model_dir / "config.pbtxt"))
    complete_config(
        cfg, model_dir, [1], default_registry(load_entry_points=False), auto_complete=auto_complete
    )
    return cfg


def _spec(model_dir: Path, *, auto_complete: bool = True) -> ModelSpec:
    cfg = _config(model_dir, auto_complete=auto_complete)
    normalize_and_validate(cfg, model_dir)
    return spec_from_proto(cfg)


def _load(model_dir: Path, *, auto_complete: bool = True) -> TorchModel:
    spec = _spec(model_dir, auto_complete=auto_complete)
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    return TorchBackend().load(ctx)


def _instance(model_dir: Path) -> TorchInstance:
    return _load(model_dir).create_instance(CPU, 0)


def _ok(result: Any) -> dict[str, np.ndarray[Any, Any]]:
    assert not isinstance(result, InferdError), result
    outputs: dict[str, np.ndarray[Any, Any]] = result
    return outputs


def _request(**inputs: np.ndarray[Any, Any]) -> InferRequest:
    return InferRequest(model_name="m", inputs=dict(inputs))


# -- TorchScript --------------------------------------------------------------------------------


def test_registry_and_detection(tmp_path: Path) -> None:
    assert isinstance(default_registry(load_entry_points=False).get("pytorch"), TorchBackend)
    model_dir = _write_export(tmp_path / "m", AddMul(), (torch.ones(2, 3), torch.ones(2, 3)))
    cfg = _config(model_dir)
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == (
        "pytorch",
        "torch_export",
        "model.pt2",
    )
    script_dir = _write_script(tmp_path / "s", AddMul(), ADD_MUL_CONFIG)
    cfg = _config(script_dir)
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == (
        "pytorch",
        "pytorch_libtorch",
        "model.pt",
    )


def test_multi_input_multi_output_by_triton_names(tmp_path: Path) -> None:
    instance = _instance(_write_script(tmp_path / "m", AddMul(), ADD_MUL_CONFIG))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 3.0, dtype=np.float32)
    [result] = instance.execute([_request(INPUT__0=a, INPUT__1=b)])
    out = _ok(result)
    assert list(out) == ["OUTPUT__1", "OUTPUT__0"]
    np.testing.assert_array_equal(out["OUTPUT__0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT__1"], a * b)
    assert out["OUTPUT__0"].dtype == np.float32


def test_inputs_bind_by_forward_argument_names(tmp_path: Path) -> None:
    config = """
    max_batch_size: 4
    input [ { name: "offset" data_type: TYPE_FP32 dims: [ 1 ] },
            { name: "scores" data_type: TYPE_FP32 dims: [ 3 ] } ]
    output [ { name: "total" data_type: TYPE_FP32 dims: [ 1 ] },
             { name: "shifted" data_type: TYPE_FP32 dims: [ 3 ] } ]
    """
    instance = _instance(_write_script(tmp_path / "m", Named(), config))
    scores = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    offset = np.array([[10], [20]], dtype=np.float32)
    request = _request(offset=offset, scores=scores)
    request.outputs = [RequestedOutput("total")]
    [result] = instance.execute([request])
    out = _ok(result)
    assert list(out) == ["total"]  # only what was asked for
    np.testing.assert_array_equal(out["total"], [[36], [75]])


def test_dict_outputs_by_key(tmp_path: Path) -> None:
    config = """
    max_batch_size: 4
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] },
            { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 1 ] } ]
    output [ { name: "shifted" data_type: TYPE_FP32 dims: [ 3 ] },
             { name: "total" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """
    instance = _instance(_write_script(tmp_path / "m", Named(), config))
    scores = np.ones((1, 3), dtype=np.float32)
    [result] = instance.execute([_request(INPUT__0=scores, INPUT__1=np.ones((1, 1), np.float32))])
    out = _ok(result)
    np.testing.assert_array_equal(out["shifted"], [[2, 2, 2]])
    np.testing.assert_array_equal(out["total"], [[6]])


DTYPES = [
    ("TYPE_BOOL", np.bool_),
    ("TYPE_UINT8", np.uint8),
    ("TYPE_UINT16", np.uint16),
    ("TYPE_UINT32", np.uint32),
    ("TYPE_UINT64", np.uint64),
    ("TYPE_INT8", np.int8),
    ("TYPE_INT16", np.int16),
    ("TYPE_INT32", np.int32),
    ("TYPE_INT64", np.int64),
    ("TYPE_FP16", np.float16),
    ("TYPE_FP32", np.float32),
    ("TYPE_FP64", np.float64),
    ("TYPE_BF16", ml_dtypes.bfloat16),
]


@pytest.mark.parametrize(("config_type", "dtype"), DTYPES)
def test_every_supported_datatype_round_trips(tmp_path: Path, config_type: str, dtype: Any) -> None:
    config = f"""
    max_batch_size: 4
    input [ {{ name: "INPUT__0" data_type: {config_type} dims: [ 3 ] }} ]
    output [ {{ name: "OUTPUT__0" data_type: {config_type} dims: [ 3 ] }} ]
    """
    instance = _instance(_write_script(tmp_path / "m", Identity(), config))
    array = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
    [result] = instance.execute([_request(INPUT__0=array)])
    out = _ok(result)["OUTPUT__0"]
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, array)


def test_read_only_request_buffers_are_accepted(tmp_path: Path) -> None:
    instance = _instance(_write_script(tmp_path / "m", AddMul(), ADD_MUL_CONFIG))
    raw = np.arange(3, dtype=np.float32).tobytes()
    a = np.frombuffer(raw, dtype=np.float32).reshape(1, 3)  # as the binary codec decodes
    assert not a.flags.writeable
    [result] = instance.execute([_request(INPUT__0=a, INPUT__1=a)])
    np.testing.assert_array_equal(_ok(result)["OUTPUT__0"], a * 2)


def test_bytes_tensors_are_refused_at_load(tmp_path: Path) -> None:
    config = """
    max_batch_size: 0
    input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ 3 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
    """
    with pytest.raises(ConfigError, match="TYPE_STRING"):
        _load(_write_script(tmp_path / "m", Identity(), config))


def test_requests_are_concatenated_into_one_run(tmp_path: Path) -> None:
    config = """
    max_batch_size: 8
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] },
             { name: "OUTPUT__1" data_type: TYPE_INT64 dims: [ 1 ] } ]
    """
    instance = _instance(_write_script(tmp_path / "m", RowCount(), config))
    sizes = (1, 3, 2)
    requests = [
        _request(INPUT__0=np.full((n, 2), i, dtype=np.float32)) for i, n in enumerate(sizes)
    ]
    times = ExecutionTimes()
    results = instance.execute_timed(requests, times)
    for i, (n, result) in enumerate(zip(sizes, results, strict=True)):
        out = _ok(result)
        np.testing.assert_array_equal(out["OUTPUT__0"], np.full((n, 2), 2 * i))
        assert out["OUTPUT__1"].tolist() == [[6]] * n  # one run over all six rows
    assert times.infer_ns > 0


def test_a_bad_request_fails_alone(tmp_path: Path) -> None:
    config = """
    max_batch_size: 8
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
    """
    instance = _instance(_write_script(tmp_path / "m", Picky(), config))
    good = np.ones((1, 2), dtype=np.float32)
    bad = -good
    first, second, third = instance.execute(
        [_request(INPUT__0=good), _request(INPUT__0=bad), _request(INPUT__0=good * 3)]
    )
    np.testing.assert_array_equal(_ok(first)["OUTPUT__0"], good + 1)
    assert isinstance(second, InvalidInputError)
    assert "non-negative" in str(second)
    assert "Traceback" not in str(second)
    np.testing.assert_array_equal(_ok(third)["OUTPUT__0"], good * 3 + 1)


def test_shape_errors_are_invalid_input(tmp_path: Path) -> None:
    config = """
    max_batch_size: 0
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]
    """
    instance = _instance(_write_script(tmp_path / "m", Linear(), config))
    ok, bad = instance.execute(
        [
            _request(INPUT__0=np.ones((2, 4), np.float32)),
            _request(INPUT__0=np.ones((2, 3), np.float32)),
        ]
    )
    np.testing.assert_array_equal(_ok(ok)["OUTPUT__0"], np.full((2, 2), 4.0))
    assert isinstance(bad, InvalidInputError)


def test_output_dtype_must_match_the_config(tmp_path: Path) -> None:
    config = """
    max_batch_size: 4
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP64 dims: [ 3 ] } ]
    """
    instance = _instance(_write_script(tmp_path / "m", Identity(), config))
    [result] = instance.execute([_request(INPUT__0=np.ones((1, 3), np.float32))])
    assert isinstance(result, InternalError)
    assert "TYPE_FP64" in str(result)


def test_bad_model_file_is_a_load_error(tmp_path: Path) -> None:
    model_dir = _write_script(tmp_path / "m", AddMul(), ADD_MUL_CONFIG)
    (model_dir / "1" / "model.pt").write_bytes(b"not a torchscript archive")
    with pytest.raises(ModelLoadError, match=r"^failed to load 'm' version 1: torch could not"):
        _load(model_dir)
    torch.save(AddMul().state_dict(), str(model_dir / "1" / "model.pt"))
    with pytest.raises(ModelLoadError, match=r"torch\.jit\.save"):
        _load(model_dir)


def test_missing_file_is_a_load_error(tmp_path: Path) -> None:
    model_dir = _write_script(tmp_path / "m", AddMul(), ADD_MUL_CONFIG)
    spec = _spec(model_dir)
    ctx = LoadContext(spec=spec, version=2, model_dir=model_dir, version_dir=model_dir / "2")
    with pytest.raises(ModelLoadError, match=r"^failed to load 'm' version 2: unable to find"):
        TorchBackend().load(ctx)


def test_torchscript_needs_inputs_and_outputs_in_the_config(tmp_path: Path) -> None:
    model_dir = _write_script(tmp_path / "m", AddMul(), 'platform: "pytorch_libtorch"')
    with pytest.raises(ConfigError, match="must list every input and output"):
        _config(model_dir)  # auto-complete cannot help a TorchScript file
    with pytest.raises(ConfigError, match="has no inputs"):
        _load(model_dir, auto_complete=False)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ('{ name: "first" data_type: TYPE_FP32 dims: [ 3 ] }', "cannot be matched"),
        (
            '{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] },'
            '{ name: "INPUT__2" data_type: TYPE_FP32 dims: [ 3 ] }',
            "positions",
        ),
        ('{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] }', r"missing input\(s\)"),
    ],
)
def test_inputs_that_cannot_bind_are_config_errors(
    tmp_path: Path, inputs: str, message: str
) -> None:
    config = f"""
    max_batch_size: 4
    input [ {inputs} ]
    output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] }} ]
    """
    with pytest.raises(ConfigError, match=message):
        _load(_write_script(tmp_path / "m", AddMul(), config))


def test_weight_sharing_is_opt_in(tmp_path: Path) -> None:
    model = _load(_write_script(tmp_path / "m", AddMul(), ADD_MUL_CONFIG))
    a, b = model.create_instance(CPU, 0), model.create_instance(CPU, 1)
    assert a._module is not b._module
    shared_config = ADD_MUL_CONFIG + (
        'parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }'
    )
    shared = _load(_write_script(tmp_path / "s", AddMul(), shared_config))
    assert shared.create_instance(CPU, 0)._module is shared.create_instance(CPU, 1)._module


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU-only machine")
def test_gpu_instances_need_cuda(tmp_path: Path) -> None:
    model = _load(_write_script(tmp_path / "m", AddMul(), ADD_MUL_CONFIG))
    gpu = InstanceGroupSpec(name="gpu", kind="KIND_GPU", count=1)
    with pytest.raises(ModelLoadError, match="KIND_GPU but torch sees no CUDA device"):
        model.create_instance(gpu, 0)


def test_closed_instance_answers_internal_error(tmp_path: Path) -> None:
    instance = _instance(_write_script(tmp_path / "m", AddMul(), ADD_MUL_CONFIG))
    instance.close()
    a = np.ones((1, 3), np.float32)
    [result] = instance.execute([_request(INPUT__0=a, INPUT__1=a)])
    assert isinstance(result, InternalError)


# -- settings -----------------------------------------------------------------------------------


def _with_params(tmp_path: Path, params: dict[str, str], count: int = 1) -> ModelSpec:
    entries = " ".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params.items()
    )
    config = ADD_MUL_CONFIG + f"instance_group [ {{ kind: KIND_CPU count: {count} }} ] {entries}"
    return _spec(_write_script(tmp_path / "m", AddMul(), config))


def test_thread_settings(tmp_path: Path) -> None:
    spec = _with_params(tmp_path, {"INTRA_OP_THREAD_COUNT": "3"})
    assert parse_settings(spec).intra_op_threads == 3
    spec = _with_params(tmp_path, {"intra_op_thread_count": "0", "inference_mode": "false"})
    settings = parse_settings(spec)
    assert (settings.intra_op_threads, settings.inference_mode) == (0, False)
    spec = _with_params(tmp_path, {}, count=2)
    assert parse_settings(spec).intra_op_threads == DEFAULT_INTRA_OP_THREADS == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"INTRA_OP_THREAD_COUNT": "many"}, "must be an integer"),
        ({"DISABLE_OPTIMIZED_EXECUTION": "maybe"}, "must be a boolean"),
        ({"ENABLE_JIT_PROFILING": "false"}, "whole process"),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, params: dict[str, str], message: str) -> None:
    spec = _with_params(tmp_path, params)
    with pytest.raises(ConfigError, match=message):
        parse_settings(spec)


def test_settings_without_inference_mode_or_optimisation_still_run(tmp_path: Path) -> None:
    params = 'parameters [ { key: "INFERENCE_MODE" value: { string_value: "false" } }, ' + (
        '{ key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } } ]'
    )
    instance = _instance(_write_script(tmp_path / "m", AddMul(), ADD_MUL_CONFIG + params))
    a = np.ones((1, 3), np.float32)
    [result] = instance.execute([_request(INPUT__0=a, INPUT__1=a)])
    np.testing.assert_array_equal(_ok(result)["OUTPUT__0"], a * 2)


def test_translate_keeps_the_useful_line() -> None:
    scripted = torch.jit.script(AddMul())
    with pytest.raises(RuntimeError) as caught:
        scripted(torch.ones(2, 3), torch.ones(2, 4))
    error = FAMILY.translate(caught.value, "m")
    assert isinstance(error, InvalidInputError)
    assert "must match" in str(error)
    assert "\n" not in str(error)
    assert isinstance(FAMILY.translate(RuntimeError("out of memory"), "m"), InternalError)


# -- torch.export -------------------------------------------------------------------------------


def test_exported_program_auto_completes_and_runs(tmp_path: Path) -> None:
    model_dir = _write_export(tmp_path / "m", AddMul(), (torch.ones(2, 3), torch.ones(2, 3)))
    cfg = _config(model_dir)
    assert cfg.max_batch_size == 4
    assert cfg.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("a", [3]), ("b", [3])]
    assert [t.name for t in cfg.output] == ["OUTPUT__0", "OUTPUT__1"]
    instance = _instance(model_dir)
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    first, second = instance.execute([_request(a=a, b=a), _request(a=a[:1], b=a[:1])])
    np.testing.assert_array_equal(_ok(first)["OUTPUT__1"], a * a)
    np.testing.assert_array_equal(_ok(second)["OUTPUT__0"], a[:1] * 2)


def test_exported_dict_outputs_auto_complete_by_key(tmp_path: Path) -> None:
    example = (torch.ones(2, 3), torch.ones(2, 1))
    model_dir = _write_export(tmp_path / "m", Named(), example)
    cfg = _config(model_dir)
    assert [t.name for t in cfg.output] == ["shifted", "total"]
    instance = _instance(model_dir)
    scores = np.ones((2, 3), np.float32)
    [result] = instance.execute([_request(scores=scores, offset=np.ones((2, 1), np.float32))])
    np.testing.assert_array_equal(_ok(result)["total"], [[6], [6]])


def test_exported_program_with_a_fixed_batch_runs_requests_alone(tmp_path: Path) -> None:
    config = """
    platform: "torch_export"
    max_batch_size: 4
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] },
             { name: "OUTPUT__1" data_type: TYPE_INT64 dims: [ 1 ] } ]
    """
    model_dir = _write_export(
        tmp_path / "m", RowCount(), (torch.ones(1, 2),), config, dynamic=False
    )
    instance = _instance(model_dir)
    results = instance.execute([_request(INPUT__0=np.ones((1, 2), np.float32))] * 3)
    for result in results:  # the stacked run breaks the exported guard; each runs alone
        assert _ok(result)["OUTPUT__1"].tolist() == [[1]]
    [bad] = instance.execute([_request(INPUT__0=np.ones((2, 2), np.float32))])
    assert isinstance(bad, InvalidInputError)


def test_fixed_shape_export_refuses_batching_in_auto_complete(tmp_path: Path) -> None:
    model_dir = _write_export(
        tmp_path / "m", Identity(), (torch.ones(2, 3),), "max_batch_size: 8", dynamic=False
    )
    with pytest.raises(ConfigError, match="does not support batching"):
        _config(model_dir)
    (model_dir / "config.pbtxt").write_text("")
    cfg = _config(model_dir)
    assert cfg.max_batch_size == 0
    assert [list(t.dims) for t in cfg.input] == [[2, 3]]


def test_bad_export_file_is_a_load_error(tmp_path: Path) -> None:
    config = """
    platform: "torch_export"
    max_batch_size: 0
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
    """
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.pt2").write_bytes(b"garbage")
    (model_dir / "config.pbtxt").write_text(config)
    with pytest.raises(ModelLoadError, match=r"^failed to load 'm' version 1: torch could not"):
        _load(model_dir)


# -- the conformance kit ------------------------------------------------------------------------


class AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


def _add_sub_inputs(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray[Any, Any]]:
    return {
        "INPUT__0": rng.standard_normal((rows, 16)).astype(np.float32),
        "INPUT__1": rng.standard_normal((rows, 16)).astype(np.float32),
    }


def _add_sub_check(inputs: dict[str, Any], outputs: Any) -> None:
    np.testing.assert_allclose(outputs["OUTPUT__0"], inputs["INPUT__0"] + inputs["INPUT__1"])
    np.testing.assert_allclose(outputs["OUTPUT__1"], inputs["INPUT__0"] - inputs["INPUT__1"])


_ADD_SUB_IO = """
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def _script_add_sub(version_dir: Path) -> str:
    torch.jit.save(torch.jit.script(AddSub()), str(version_dir / "model.pt"))
    return 'backend: "pytorch"\nmax_batch_size: 8\n' + _ADD_SUB_IO


def _export_add_sub(version_dir: Path) -> str:
    batch = torch.export.Dim("batch", max=64)
    example = (torch.ones(2, 16), torch.ones(2, 16))
    program = torch.export.export(AddSub(), example, dynamic_shapes=({0: batch}, {0: batch}))
    torch.export.save(program, str(version_dir / "model.pt2"))
    return 'platform: "torch_export"\nmax_batch_size: 8\n' + _ADD_SUB_IO


test_torch_conformance = conformance_tests(
    ConformanceCase("torchscript_add_sub", _script_add_sub, _add_sub_inputs, _add_sub_check),
    ConformanceCase("export_add_sub", _export_add_sub, _add_sub_inputs, _add_sub_check),
)
