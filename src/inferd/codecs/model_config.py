"""``config.pbtxt`` / JSON  <->  ``inference.ModelConfig``  ->  :class:`ModelSpec` (pure).

The schema is the one ``tritonclient`` ships (``tritonclient.grpc.model_config_pb2``), so a
repository that Triton accepts parses here unchanged. :func:`to_json_dict` renders a config the
way Triton's HTTP ``/config`` endpoint does: proto field names, enum names, defaults printed,
unset messages omitted, and 64-bit integers as JSON numbers rather than protobuf's strings.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.codecs.sequence_config import sequence_batching_spec
from inferd.core.datatypes import from_config_name
from inferd.core.model_spec import (
    DynamicBatchingSpec,
    EnsembleStepSpec,
    InstanceGroupSpec,
    ModelSpec,
    OptimizationSpec,
    QueuePolicySpec,
    TensorSpec,
    WarmupInputSpec,
    WarmupSpec,
)
from inferd.errors import ConfigError, InvalidArgumentError

__all__ = [
    "ModelConfig",
    "from_json_dict",
    "parse_json_config",
    "parse_pbtxt",
    "spec_from_proto",
    "to_json_dict",
]

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


# -- parsing ------------------------------------------------------------------------------------


def parse_pbtxt(text: str, source: str) -> ModelConfig:
    """Parse protobuf text format; errors name ``source``, the line:column and the problem."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        problem = str(exc)
        # protobuf prefixes "<line>:<col> : "; keep only the problem itself.
        prefix = f"{line}:{column} : "
        if problem.startswith(prefix):
            problem = problem[len(prefix) :]
        where = f"{source}:{line}:{column}" if line is not None else source
        raise ConfigError(f"failed to parse model configuration {where}: {problem}") from exc
    return config


def parse_json_config(text: str, source: str) -> ModelConfig:
    """Parse a JSON model configuration (the load API's ``config`` parameter).

    64-bit integers may be quoted (``{"max_batch_size": "16"}``) as protobuf JSON allows.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"failed to parse model configuration {source}: invalid JSON at line {exc.lineno} "
            f"column {exc.colno}: {exc.msg}"
        ) from exc
    except RecursionError:
        raise ConfigError(
            f"failed to parse model configuration {source}: the JSON is nested too deeply"
        ) from None
    if not isinstance(document, dict):
        raise ConfigError(
            f"failed to parse model configuration {source}: expected a JSON object, "
            f"got {type(document).__name__}"
        )
    config = ModelConfig()
    try:
        json_format.ParseDict(document, config)
    except json_format.ParseError as exc:
        problem = str(exc).split("\n", 1)[0]
        raise ConfigError(f"failed to parse model configuration {source}: {problem}") from exc
    except RecursionError:
        raise ConfigError(
            f"failed to parse model configuration {source}: the JSON is nested too deeply"
        ) from None
    return config


# -- rendering ----------------------------------------------------------------------------------


def to_json_dict(config: ModelConfig) -> dict[str, Any]:
    """The config as Triton prints it over HTTP (see PROTOCOL.md §3.1).

    Map keys stay strings (JSON object keys always are), also for the uint64-keyed
    ``priority_queue_policy``; every other 64-bit integer becomes a number.
    """
    result: dict[str, Any] = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,  # protobuf >= 5.26, as pyproject requires
    )
    _ints_back(result, config.DESCRIPTOR)
    return result


def _ints_back(rendered: dict[str, Any], descriptor: Descriptor) -> None:
    """Walk ``rendered`` alongside its descriptor, turning 64-bit integer strings into ints."""
    for field in descriptor.fields:
        if field.name not in rendered:
            continue
        value = rendered[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                value[key] = _convert_one(item, value_field)
        elif _is_repeated(field):
            rendered[field.name] = [_convert_one(item, field) for item in value]
        else:
            rendered[field.name] = _convert_one(value, field)


def _is_repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 6; `label` is deprecated there
    if flag is not None:
        return bool(flag)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _convert_one(value: Any, field: FieldDescriptor) -> Any:
    if field.type in _INT64_TYPES:
        return int(value)
    if field.message_type is not None and isinstance(value, dict):
        _ints_back(value, field.message_type)
    return value


# -- typed view ---------------------------------------------------------------------------------


def _tensor_spec(tensor: Any, *, is_input: bool) -> TensorSpec:
    type_name = model_config_pb2.DataType.Name(tensor.data_type)
    try:
        datatype = from_config_name(type_name)
    except InvalidArgumentError as exc:
        kind = "input" if is_input else "output"
        raise ConfigError(f"{kind} '{tensor.name}' has unsupported data_type {type_name}") from exc
    reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None
    return TensorSpec(
        name=tensor.name,
        datatype=datatype,
        dims=tuple(int(d) for d in tensor.dims),
        reshape=reshape,
        optional=bool(tensor.optional) if is_input else False,
        allow_ragged_batch=bool(tensor.allow_ragged_batch) if is_input else False,
        is_shape_tensor=bool(tensor.is_shape_tensor),
        label_filename="" if is_input else tensor.label_filename,
    )


def _queue_policy(policy: Any) -> QueuePolicySpec:
    return QueuePolicySpec(
        timeout_action="DELAY" if policy.timeout_action == 1 else "REJECT",
        default_timeout_us=int(policy.default_timeout_microseconds),
        allow_timeout_override=bool(policy.allow_timeout_override),
        max_queue_size=int(policy.max_queue_size),
    )


def _dynamic_batching(config: ModelConfig) -> DynamicBatchingSpec | None:
    if config.WhichOneof("scheduling_choice") != "dynamic_batching":
        return None
    db = config.dynamic_batching
    return DynamicBatchingSpec(
        preferred_batch_sizes=tuple(int(s) for s in db.preferred_batch_size),
        max_queue_delay_us=int(db.max_queue_delay_microseconds),
        preserve_ordering=bool(db.preserve_ordering),
        priority_levels=int(db.priority_levels),
        default_priority_level=int(db.default_priority_level),
        default_queue_policy=_queue_policy(db.default_queue_policy),
        priority_queue_policy={
            int(level): _queue_policy(policy) for level, policy in db.priority_queue_policy.items()
        },
    )


def _warmups(config: ModelConfig) -> tuple[WarmupSpec, ...]:
    type_name = model_config_pb2.DataType.Name
    return tuple(
        WarmupSpec(
            name=w.name,
            batch_size=int(w.batch_size),
            count=int(w.count),
            inputs={
                name: WarmupInputSpec(
                    datatype=from_config_name(type_name(item.data_type)),
                    dims=tuple(int(d) for d in item.dims),
                    source=item.WhichOneof("input_data_type") or "zero_data",
                    input_data_file=item.input_data_file,
                )
                for name, item in w.inputs.items()
            },
        )
        for w in config.model_warmup
    )


def _ensemble_steps(config: ModelConfig) -> tuple[EnsembleStepSpec, ...]:
    if config.WhichOneof("scheduling_choice") != "ensemble_scheduling":
        return ()
    return tuple(
        EnsembleStepSpec(
            model_name=step.model_name,
            model_version=int(step.model_version) if step.model_version > 0 else None,
            input_map=dict(step.input_map),
            output_map=dict(step.output_map),
        )
        for step in config.ensemble_scheduling.step
    )


def _optimization(config: ModelConfig) -> OptimizationSpec:
    opt = config.optimization
    return OptimizationSpec(
        graph_level=int(opt.graph.level) if opt.HasField("graph") else None,
        gpu_accelerators=tuple(
            a.name for a in opt.execution_accelerators.gpu_execution_accelerator
        ),
    )


def spec_from_proto(config: ModelConfig) -> ModelSpec:
    """The typed view of a *normalised* config; the message itself stays in the codecs and the
    repository (``spec.config`` is its JSON rendering, plain data)."""
    kind_name = model_config_pb2.ModelInstanceGroup.Kind.Name
    groups = tuple(
        InstanceGroupSpec(
            name=group.name,
            kind=kind_name(group.kind),
            count=int(group.count),
            gpus=tuple(int(g) for g in group.gpus),
        )
        for group in config.instance_group
    )
    return ModelSpec(
        name=config.name,
        platform=config.platform,
        backend=config.backend,
        max_batch_size=int(config.max_batch_size),
        inputs=tuple(_tensor_spec(t, is_input=True) for t in config.input),
        outputs=tuple(_tensor_spec(t, is_input=False) for t in config.output),
        instance_groups=groups,
        parameters={key: value.string_value for key, value in config.parameters.items()},
        default_model_filename=config.default_model_filename,
        dynamic_batching=_dynamic_batching(config),
        has_sequence_batching=config.WhichOneof("scheduling_choice") == "sequence_batching",
        sequence_batching=sequence_batching_spec(config),
        is_ensemble=config.platform == "ensemble",
        ensemble_steps=_ensemble_steps(config),
        decoupled=bool(config.model_transaction_policy.decoupled),
        response_cache=bool(config.response_cache.enable),
        warmups=_warmups(config),
        optimization=_optimization(config),
        config=to_json_dict(config),
    )


def from_json_dict(rendered: dict[str, Any]) -> ModelConfig:
    """The message back from :func:`to_json_dict`'s rendering (for the gRPC config endpoint)."""
    config = ModelConfig()
    json_format.ParseDict(rendered, config)
    return config
