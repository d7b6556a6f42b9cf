from __future__ import annotations

import json

import pytest

from inferd.codecs.model_config import (
    ModelConfig,
    from_json_dict,
    parse_json_config,
    parse_pbtxt,
    spec_from_proto,
    to_json_dict,
)
from inferd.errors import ConfigError

SIMPLE = """
# Triton's "simple" example
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8   # trailing comment
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name : "INPUT1"
    data_type : TYPE_INT32
    dims : [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
    reshape { shape: [ 4, 4 ] }
  }
]
parameters [ { key: "intra_op_thread_count" value: { string_value: "2" } } ]
parameters { key: "execution_mode" value: { string_value: "1" } }
"""


def test_parse_pbtxt_reads_triton_text_format() -> None:
    cfg = parse_pbtxt(SIMPLE, "simple/config.pbtxt")
    assert cfg.name == "simple"
    assert cfg.max_batch_size == 8
    assert [t.name for t in cfg.input] == ["INPUT0", "INPUT1"]
    assert list(cfg.input[1].dims) == [16]
    assert list(cfg.output[0].reshape.shape) == [4, 4]
    # both `parameters [ {...} ]` and `parameters { ... }` syntaxes land in the map
    assert {k: v.string_value for k, v in cfg.parameters.items()} == {
        "intra_op_thread_count": "2",
        "execution_mode": "1",
    }


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ('name: "m"\nbogus_field: 3\n', ["repo/m/config.pbtxt:2:1", "bogus_field"]),
        ('name: "m"\nmax_batch_size: "eight"\n', ["repo/m/config.pbtxt:2:", "max_batch_size"]),
        (
            'input [ { name: "a" data_type: TYPE_NOPE dims: [1] } ]',
            ["repo/m/config.pbtxt:1:", "TYPE_NOPE"],
        ),
        ('input [ { name: "a"\n', ["repo/m/config.pbtxt:1:", 'Expected "}"']),
    ],
)
def test_parse_pbtxt_errors_name_file_line_and_field(text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_pbtxt(text, "repo/m/config.pbtxt")
    for fragment in fragments:
        assert fragment in str(info.value)


def test_parse_json_accepts_quoted_int64_and_ints() -> None:
    cfg = parse_json_config(
        '{"name":"m","max_batch_size":"16","input":[{"name":"x","data_type":"TYPE_FP32",'
        '"dims":["3", 4]}]}',
        "override",
    )
    assert cfg.max_batch_size == 16
    assert list(cfg.input[0].dims) == [3, 4]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"name": "m",', "invalid JSON"),
        ('{"no_such_field": 1}', "no_such_field"),
        ('{"max_batch_size": "lots"}', "max_batch_size"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_parse_json_errors(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_json_config(text, "load request for 'm'")
    assert fragment in str(info.value)
    assert "load request for 'm'" in str(info.value)


def _normalised_like() -> ModelConfig:
    cfg = parse_pbtxt(SIMPLE, "x")
    cfg.version_policy.latest.num_versions = 1
    cfg.model_transaction_policy.SetInParent()
    cfg.response_cache.SetInParent()
    group = cfg.instance_group.add()
    group.name, group.kind, group.count = "simple", 2, 1
    return cfg


def test_to_json_dict_prints_defaults_and_int64_as_numbers() -> None:
    rendered = to_json_dict(_normalised_like())
    assert rendered["input"][0]["dims"] == [16]
    assert isinstance(rendered["input"][0]["dims"][0], int)
    assert rendered["output"][0]["reshape"] == {"shape": [4, 4]}
    assert rendered["input"][0]["data_type"] == "TYPE_INT32"
    assert rendered["input"][0]["format"] == "FORMAT_NONE"
    assert rendered["input"][0]["is_shape_tensor"] is False
    assert rendered["output"][0]["label_filename"] == ""
    assert rendered["batch_input"] == []
    assert rendered["runtime"] == ""
    assert rendered["instance_group"][0]["kind"] == "KIND_CPU"
    assert rendered["instance_group"][0]["gpus"] == []
    assert rendered["version_policy"] == {"latest": {"num_versions": 1}}
    assert rendered["model_transaction_policy"] == {"decoupled": False}
    assert rendered["response_cache"] == {"enable": False}
    assert rendered["parameters"]["execution_mode"] == {"string_value": "1"}
    assert rendered["cc_model_filenames"] == {}


def test_to_json_dict_omits_unset_scheduler() -> None:
    rendered = to_json_dict(_normalised_like())
    assert "dynamic_batching" not in rendered
    assert "sequence_batching" not in rendered
    assert "ensemble_scheduling" not in rendered


def test_to_json_dict_converts_nested_64_bit_fields() -> None:
    cfg = ModelConfig(name="m", max_batch_size=4)
    db = cfg.dynamic_batching
    db.max_queue_delay_microseconds = 100
    db.priority_levels = 2
    db.default_priority_level = 1
    db.default_queue_policy.default_timeout_microseconds = 7
    db.priority_queue_policy[2].default_timeout_microseconds = 9
    cfg.version_policy.specific.versions.extend([1, 3])
    cfg.instance_group.add().secondary_devices.add().device_id = 3
    rendered = to_json_dict(cfg)
    dyn = rendered["dynamic_batching"]
    assert dyn["max_queue_delay_microseconds"] == 100
    assert dyn["priority_levels"] == 2
    assert dyn["default_priority_level"] == 1
    assert dyn["default_queue_policy"]["default_timeout_microseconds"] == 7
    assert dyn["priority_queue_policy"]["2"]["default_timeout_microseconds"] == 9
    assert rendered["version_policy"]["specific"]["versions"] == [1, 3]
    assert rendered["instance_group"][0]["secondary_devices"][0]["device_id"] == 3
    # the whole document is plain JSON with numbers, never quoted 64-bit ints
    assert '"7"' not in json.dumps(rendered)


def test_to_json_dict_ensemble_model_version_is_a_number() -> None:
    cfg = parse_pbtxt(
        'name: "e" platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" '
        'model_version: -1 input_map { key: "x" value: "X" } } ] }',
        "e/config.pbtxt",
    )
    step = to_json_dict(cfg)["ensemble_scheduling"]["step"][0]
    assert step["model_version"] == -1
    assert step["input_map"] == {"x": "X"}


def test_to_json_dict_sequence_batching_defaults() -> None:
    cfg = parse_pbtxt(
        """
        name: "seq" max_batch_size: 2
        sequence_batching {
          max_sequence_idle_microseconds: 5000000
          control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START
            int32_false_true: [ 0, 1 ] } ] } ]
          state [ { input_name: "i" output_name: "o" data_type: TYPE_FP32 dims: [ -1 ] } ]
        }
        """,
        "seq/config.pbtxt",
    )
    seq = to_json_dict(cfg)["sequence_batching"]
    assert seq["max_sequence_idle_microseconds"] == 5_000_000
    assert seq["control_input"][0]["control"][0]["kind"] == "CONTROL_SEQUENCE_START"
    assert seq["state"][0]["dims"] == [-1]
    assert "dynamic_batching" not in to_json_dict(cfg)


def test_spec_from_proto_builds_typed_view() -> None:
    cfg = _normalised_like()
    cfg.dynamic_batching.preferred_batch_size.extend([4, 8])
    cfg.dynamic_batching.max_queue_delay_microseconds = 100
    cfg.dynamic_batching.priority_levels = 2
    cfg.dynamic_batching.default_priority_level = 2
    cfg.dynamic_batching.priority_queue_policy[1].timeout_action = 1
    cfg.dynamic_batching.priority_queue_policy[1].max_queue_size = 3
    spec = spec_from_proto(cfg)
    assert spec.name == "simple"
    assert spec.max_batch_size == 8
    assert spec.inputs[0].datatype.name == "INT32"
    assert spec.inputs[0].dims == (16,)
    assert spec.outputs[0].reshape == (4, 4)
    assert spec.inputs[0].reshape is None
    assert spec.instance_groups[0].kind == "KIND_CPU"
    assert spec.parameters == {"intra_op_thread_count": "2", "execution_mode": "1"}
    assert spec.dynamic_batching is not None
    assert spec.dynamic_batching.preferred_batch_sizes == (4, 8)
    assert spec.dynamic_batching.max_queue_delay_us == 100
    policy = spec.dynamic_batching.priority_queue_policy[1]
    assert (policy.timeout_action, policy.max_queue_size) == ("DELAY", 3)
    assert spec.config == to_json_dict(cfg)
    assert from_json_dict(spec.config) == cfg
    assert spec.decoupled is False


def test_spec_holds_warmup_and_optimization_as_plain_data() -> None:
    cfg = parse_pbtxt(
        'name: "w" max_batch_size: 2 input [ { name: "x" data_type: TYPE_FP32 dims: [3] } ] '
        "optimization { graph { level: 1 } execution_accelerators { "
        'gpu_execution_accelerator [ { name: "tensorrt" } ] } } '
        'model_warmup [ { name: "zeros" batch_size: 2 count: 3 inputs { key: "x" value: '
        "{ data_type: TYPE_FP32 dims: [3] zero_data: true } } }, "
        '{ name: "file" inputs { key: "x" value: { data_type: TYPE_FP32 dims: [3] '
        'input_data_file: "x.bin" } } } ]',
        "w",
    )
    spec = spec_from_proto(cfg)
    assert spec.optimization.graph_level == 1
    assert spec.optimization.gpu_accelerators == ("tensorrt",)
    zeros, file = spec.warmups
    assert (zeros.name, zeros.batch_size, zeros.count) == ("zeros", 2, 3)
    assert zeros.inputs["x"].datatype.name == "FP32"
    assert zeros.inputs["x"].dims == (3,)
    assert zeros.inputs["x"].source == "zero_data"
    assert file.inputs["x"].source == "input_data_file"
    assert file.inputs["x"].input_data_file == "x.bin"
    assert spec_from_proto(parse_pbtxt('name: "n"', "n")).optimization.graph_level is None


def test_no_protobuf_message_in_the_domain_types() -> None:
    """``ModelSpec`` and everything it holds are plain data: no field is typed ``Any`` for a
    message, and a spec pickles without protobuf."""
    import dataclasses
    import pickle

    from inferd.core import model_spec

    for cls in (
        model_spec.ModelSpec,
        model_spec.TensorSpec,
        model_spec.WarmupSpec,
        model_spec.WarmupInputSpec,
        model_spec.OptimizationSpec,
        model_spec.DynamicBatchingSpec,
    ):
        assert "proto" not in {f.name for f in dataclasses.fields(cls)}
    spec = spec_from_proto(_normalised_like())
    restored = pickle.loads(pickle.dumps(spec))
    assert restored.config == spec.config


def test_spec_from_proto_without_scheduler_and_empty_reshape() -> None:
    cfg = parse_pbtxt(
        'name: "s" max_batch_size: 4 input [ { name: "x" data_type: TYPE_STRING dims: [1] '
        "reshape: { shape: [ ] } } ] model_transaction_policy { decoupled: true }",
        "s",
    )
    spec = spec_from_proto(cfg)
    assert spec.dynamic_batching is None
    assert spec.inputs[0].reshape == ()
    assert spec.inputs[0].datatype.name == "BYTES"
    assert spec.decoupled is True
