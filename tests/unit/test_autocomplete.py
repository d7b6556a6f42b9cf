from __future__ import annotations

from pathlib import Path

import pytest
from onnx import TensorProto
from onnx_graphs import add_sub, batched_scalar, identity, save, sum_to_scalar

from inferd.backends.registry import BackendRegistry, default_registry
from inferd.codecs.model_config import ModelConfig, parse_pbtxt
from inferd.errors import ConfigError
from inferd.repository.autocomplete import complete_config


@pytest.fixture
def registry() -> BackendRegistry:
    return default_registry(load_entry_points=False)


def _complete(
    model_dir: Path,
    registry: BackendRegistry,
    cfg: ModelConfig | None = None,
    *,
    auto_complete: bool = True,
    default_max_batch_size: int = 4,
) -> ModelConfig:
    cfg = cfg if cfg is not None else ModelConfig()
    versions = sorted(int(p.name) for p in model_dir.iterdir() if p.name.isdigit())
    complete_config(
        cfg,
        model_dir,
        versions,
        registry,
        auto_complete=auto_complete,
        default_max_batch_size=default_max_batch_size,
    )
    return cfg


def test_missing_config_is_completed_from_the_graph(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    save(add_sub(), tmp_path / "simple" / "1" / "model.onnx")
    cfg = _complete(tmp_path / "simple", registry)
    assert (cfg.backend, cfg.platform) == ("onnxruntime", "onnxruntime_onnx")
    assert cfg.default_model_filename == "model.onnx"
    assert cfg.max_batch_size == 4
    assert cfg.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [
        ("INPUT0", 8, [16]),  # TYPE_INT32 == 8
        ("INPUT1", 8, [16]),
    ]
    assert [t.name for t in cfg.output] == ["OUTPUT0", "OUTPUT1"]
    assert not cfg.input[0].HasField("reshape")


def test_default_max_batch_size_is_honoured(tmp_path: Path, registry: BackendRegistry) -> None:
    save(add_sub(), tmp_path / "m" / "1" / "model.onnx")
    cfg = _complete(tmp_path / "m", registry, default_max_batch_size=16)
    assert cfg.max_batch_size == 16


def test_max_batch_size_one_gets_no_dynamic_batching(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    save(add_sub(), tmp_path / "m" / "1" / "model.onnx")
    cfg = _complete(tmp_path / "m", registry, default_max_batch_size=1)
    assert cfg.max_batch_size == 1
    assert cfg.WhichOneof("scheduling_choice") is None


def test_existing_scheduler_is_kept(tmp_path: Path, registry: BackendRegistry) -> None:
    save(add_sub(), tmp_path / "m" / "1" / "model.onnx")
    cfg = parse_pbtxt("sequence_batching { }", "m/config.pbtxt")
    _complete(tmp_path / "m", registry, cfg)
    assert cfg.WhichOneof("scheduling_choice") == "sequence_batching"


def test_model_onnx_directory_and_latest_version(tmp_path: Path, registry: BackendRegistry) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.py").write_text("# not this one\n")
    save(identity(TensorProto.FLOAT), tmp_path / "m" / "3" / "model.onnx" / "model.onnx")
    cfg = _complete(tmp_path / "m", registry)
    assert cfg.backend == "onnxruntime"
    assert [t.name for t in cfg.input] == ["IN"]


def test_partial_config_fills_only_the_missing_list(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    save(add_sub(), tmp_path / "m" / "1" / "model.onnx")
    cfg = parse_pbtxt(
        'max_batch_size: 8 input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]',
        "m/config.pbtxt",
    )
    _complete(tmp_path / "m", registry, cfg)
    assert [t.name for t in cfg.input] == ["INPUT0"]
    assert [t.name for t in cfg.output] == ["OUTPUT0", "OUTPUT1"]
    assert list(cfg.output[0].dims) == [16]
    assert cfg.max_batch_size == 8


def test_complete_inputs_and_outputs_skip_auto_complete(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    save(add_sub(), tmp_path / "m" / "1" / "model.onnx")
    cfg = parse_pbtxt(
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] } ] '
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]',
        "m/config.pbtxt",
    )
    _complete(tmp_path / "m", registry, cfg)
    assert cfg.max_batch_size == 0
    assert cfg.WhichOneof("scheduling_choice") is None
    assert len(cfg.input) == 1
    assert cfg.backend == "onnxruntime"  # the core step still ran


def test_disabled_auto_complete_fills_only_backend_fields(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    save(add_sub(), tmp_path / "m" / "1" / "model.onnx")
    cfg = _complete(tmp_path / "m", registry, auto_complete=False)
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == (
        "onnxruntime",
        "onnxruntime_onnx",
        "model.onnx",
    )
    assert len(cfg.input) == 0
    assert cfg.max_batch_size == 0


def test_non_batching_model_with_max_batch_size_fails(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    save(sum_to_scalar(), tmp_path / "m" / "1" / "model.onnx")
    cfg = parse_pbtxt("max_batch_size: 2", "m/config.pbtxt")
    with pytest.raises(
        ConfigError, match="does not support batching while non-zero max_batch_size"
    ):
        _complete(tmp_path / "m", registry, cfg)


def test_non_batching_scalar_output_gets_dims_one(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    save(sum_to_scalar(), tmp_path / "m" / "1" / "model.onnx")
    cfg = _complete(tmp_path / "m", registry)
    assert cfg.max_batch_size == 0
    assert cfg.WhichOneof("scheduling_choice") is None
    assert list(cfg.input[0].dims) == [4]
    assert list(cfg.output[0].dims) == [1]
    assert not cfg.output[0].HasField("reshape")


def test_batched_scalar_gets_dims_one_and_empty_reshape(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    save(batched_scalar(), tmp_path / "m" / "1" / "model.onnx")
    cfg = _complete(tmp_path / "m", registry)
    assert cfg.max_batch_size == 4
    for tensor in (cfg.input[0], cfg.output[0]):
        assert list(tensor.dims) == [1]
        assert tensor.HasField("reshape")
        assert list(tensor.reshape.shape) == []


@pytest.mark.parametrize(
    ("elem", "type_name"),
    [
        (TensorProto.STRING, "TYPE_STRING"),
        (TensorProto.FLOAT16, "TYPE_FP16"),
        (TensorProto.BOOL, "TYPE_BOOL"),
        (TensorProto.UINT8, "TYPE_UINT8"),
        (TensorProto.INT8, "TYPE_INT8"),
        (TensorProto.INT16, "TYPE_INT16"),
        (TensorProto.INT64, "TYPE_INT64"),
        (TensorProto.DOUBLE, "TYPE_FP64"),
    ],
)
def test_onnx_types_map_to_config_types(
    tmp_path: Path, registry: BackendRegistry, elem: int, type_name: str
) -> None:
    from tritonclient.grpc import model_config_pb2 as mc

    save(identity(elem), tmp_path / "m" / "1" / "model.onnx")
    cfg = _complete(tmp_path / "m", registry)
    assert mc.DataType.Name(cfg.input[0].data_type) == type_name
    assert mc.DataType.Name(cfg.output[0].data_type) == type_name
    assert list(cfg.input[0].dims) == [3]


def test_platform_only_implies_backend_and_vice_versa(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    save(add_sub(), tmp_path / "m" / "1" / "model.onnx")
    by_platform = _complete(
        tmp_path / "m",
        registry,
        parse_pbtxt('platform: "onnxruntime_onnx"', "c"),
        auto_complete=False,
    )
    assert by_platform.backend == "onnxruntime"
    by_backend = _complete(
        tmp_path / "m", registry, parse_pbtxt('backend: "onnxruntime"', "c"), auto_complete=False
    )
    assert by_backend.platform == "onnxruntime_onnx"
    assert by_backend.default_model_filename == "model.onnx"


def test_custom_model_filename_is_used(tmp_path: Path, registry: BackendRegistry) -> None:
    save(add_sub(), tmp_path / "m" / "1" / "other.onnx")
    cfg = parse_pbtxt('backend: "onnxruntime" default_model_filename: "other.onnx"', "c")
    _complete(tmp_path / "m", registry, cfg)
    assert cfg.default_model_filename == "other.onnx"
    assert len(cfg.input) == 2


def test_unavailable_backend_names_the_available_ones(
    tmp_path: Path, registry: BackendRegistry
) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.plan").write_bytes(b"\0")
    with pytest.raises(ConfigError, match=r"unsupported backend 'tensorrt'.*onnxruntime"):
        _complete(tmp_path / "m", registry)


def test_no_model_file_and_no_config_is_an_error(tmp_path: Path, registry: BackendRegistry) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"unable to determine the backend for model 'm'"):
        _complete(tmp_path / "m", registry)


def test_unreadable_model_file_is_a_config_error(tmp_path: Path, registry: BackendRegistry) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="unable to auto-complete"):
        _complete(tmp_path / "m", registry)


def test_ensemble_is_left_alone(tmp_path: Path, registry: BackendRegistry) -> None:
    (tmp_path / "e" / "1").mkdir(parents=True)
    cfg = parse_pbtxt('platform: "ensemble"', "c")
    _complete(tmp_path / "e", registry, cfg)
    assert cfg.backend == ""
