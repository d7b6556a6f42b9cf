from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferd.codecs.model_config import ModelConfig, parse_pbtxt, to_json_dict
from inferd.errors import ConfigError
from inferd.repository.normalize import normalize_and_validate

IO = """
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    path = tmp_path / "simple"
    path.mkdir()
    return path


def _normalise(text: str, model_dir: Path, **kwargs: int) -> ModelConfig:
    cfg = parse_pbtxt(text, str(model_dir / "config.pbtxt"))
    normalize_and_validate(cfg, model_dir, **kwargs)
    return cfg


def test_defaults_are_filled(model_dir: Path) -> None:
    cfg = _normalise(
        'backend: "onnxruntime" max_batch_size: 8 dynamic_batching { }' + IO, model_dir
    )
    assert cfg.name == "simple"
    assert cfg.version_policy.WhichOneof("policy_choice") == "latest"
    assert cfg.version_policy.latest.num_versions == 1
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8]
    assert cfg.optimization.input_pinned_memory.enable is True
    assert cfg.optimization.output_pinned_memory.enable is True
    assert len(cfg.instance_group) == 1
    group = cfg.instance_group[0]
    # runtimes that release the GIL get two CPU instances by default (one per core here)
    assert (group.name, group.count) == ("simple", min(2, os.cpu_count() or 1))
    rendered = to_json_dict(cfg)
    assert rendered["instance_group"][0]["kind"] == "KIND_CPU"
    assert rendered["model_transaction_policy"] == {"decoupled": False}
    assert rendered["response_cache"] == {"enable": False}


def test_explicit_values_are_kept(model_dir: Path) -> None:
    cfg = _normalise(
        'name: "simple" max_batch_size: 8 version_policy { all { } } '
        "dynamic_batching { preferred_batch_size: [ 2, 4 ] } "
        "optimization { input_pinned_memory { enable: false } } "
        "model_transaction_policy { decoupled: true }" + IO,
        model_dir,
    )
    assert cfg.version_policy.WhichOneof("policy_choice") == "all"
    assert list(cfg.dynamic_batching.preferred_batch_size) == [2, 4]
    assert cfg.optimization.input_pinned_memory.enable is False
    assert cfg.model_transaction_policy.decoupled is True


def test_instance_groups_are_named_and_counted(model_dir: Path) -> None:
    cfg = _normalise(
        'instance_group [ { count: 0 }, { kind: KIND_CPU count: 3 }, { name: "mine" } ]' + IO,
        model_dir,
    )
    names = [g.name for g in cfg.instance_group]
    assert names == ["simple_0", "simple_1", "mine"]
    assert [g.count for g in cfg.instance_group] == [1, 3, 1]
    assert all(to_json_dict(cfg)["instance_group"][i]["kind"] == "KIND_CPU" for i in range(3))


def test_gpu_groups_are_refused_without_gpus(model_dir: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"instance group 'simple' requests KIND_GPU but no GPU is available"
    ):
        _normalise("instance_group [ { kind: KIND_GPU } ]" + IO, model_dir)


def test_gpu_groups_get_all_gpus_when_present(model_dir: Path) -> None:
    cfg = _normalise("instance_group [ { kind: KIND_AUTO } ]" + IO, model_dir, gpu_count=2)
    assert to_json_dict(cfg)["instance_group"][0]["kind"] == "KIND_GPU"
    assert list(cfg.instance_group[0].gpus) == [0, 1]


def test_sequence_defaults(model_dir: Path) -> None:
    cfg = _normalise("max_batch_size: 4 sequence_batching { oldest { } }" + IO, model_dir)
    assert cfg.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(cfg.sequence_batching.oldest.preferred_batch_size) == [4]


def test_name_mismatch_names_both(model_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"'other'.*'simple'"):
        _normalise('name: "other"' + IO, model_dir)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_batch_size: -1" + IO, "max_batch_size must be >= 0"),
        ("dynamic_batching { }" + IO, "dynamic_batching requires max_batch_size > 0"),
        (
            "max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }" + IO,
            "preferred_batch_size 8 must be between 1 and max_batch_size 4",
        ),
        (
            "max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: [ 5 ] } }" + IO,
            "sequence_batching.oldest.preferred_batch_size 5",
        ),
        (
            "max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 3 }"
            + IO,
            r"default_priority_level must be in \[1, 2\]",
        ),
        (
            "max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 1 "
            "priority_queue_policy { key: 5 value: { } } }" + IO,
            "priority_queue_policy has level 5",
        ),
        (
            'input [ { data_type: TYPE_INT32 dims: [ 1 ] } ] output [ { name: "o" '
            "data_type: TYPE_INT32 dims: [ 1 ] } ]",
            r"input\[0\] must specify a 'name'",
        ),
        (
            'input [ { name: "a" dims: [ 1 ] } ] output [ { name: "o" data_type: TYPE_INT32 '
            "dims: [ 1 ] } ]",
            "input 'a' must specify a valid 'data_type'",
        ),
        (
            'input [ { name: "a" data_type: TYPE_INT32 } ] output [ { name: "o" '
            "data_type: TYPE_INT32 dims: [ 1 ] } ]",
            "input 'a' must specify 'dims'",
        ),
        (
            'input [ { name: "a" data_type: TYPE_INT32 dims: [ 0 ] } ] output [ { name: "o" '
            "data_type: TYPE_INT32 dims: [ 1 ] } ]",
            "invalid dimension 0",
        ),
        (
            IO + 'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]',
            "input name 'INPUT0' appears more than once",
        ),
        (
            IO + 'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]',
            "output name 'OUTPUT0' appears more than once",
        ),
        (
            'input [ { name: "a" data_type: TYPE_FP32 dims: [ 6 ] reshape { shape: [ 4 ] } } ]',
            r"reshape \[4\] has 4 elements but dims \[6\] has 6",
        ),
        (
            'input [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ]',
            "empty reshape, which is only allowed when the model batches",
        ),
        (
            'output [ { name: "o" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "l.txt" } ]',
            "label_filename 'l.txt'",
        ),
        ("version_policy { latest { num_versions: 0 } }" + IO, "num_versions must be >= 1"),
    ],
)
def test_invalid_configs_are_rejected_precisely(model_dir: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _normalise(text, model_dir)


def test_existing_label_file_and_empty_reshape_when_batching_are_fine(model_dir: Path) -> None:
    (model_dir / "labels.txt").write_text("cat\ndog\n")
    cfg = _normalise(
        'max_batch_size: 2 input [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] '
        'reshape { shape: [ ] } } ] output [ { name: "o" data_type: TYPE_FP32 dims: [ 2 ] '
        'label_filename: "labels.txt" } ]',
        model_dir,
    )
    assert cfg.output[0].label_filename == "labels.txt"


def test_variable_reshape_with_matching_wildcards_is_fine(model_dir: Path) -> None:
    _normalise(
        'input [ { name: "a" data_type: TYPE_FP32 dims: [ -1, 6 ] reshape { shape: [ -1, 2, 3 ] }'
        ' } ] output [ { name: "o" data_type: TYPE_FP32 dims: [ 1 ] } ]',
        model_dir,
    )


def test_ensemble_gets_no_instance_group(model_dir: Path) -> None:
    cfg = _normalise('platform: "ensemble"' + IO, model_dir)
    assert len(cfg.instance_group) == 0
    assert not cfg.HasField("optimization")


def test_python_models_default_to_one_instance(model_dir: Path) -> None:
    cfg = _normalise('backend: "python" max_batch_size: 8' + IO, model_dir)
    assert cfg.instance_group[0].count == 1
