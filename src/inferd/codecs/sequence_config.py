"""``sequence_batching`` of a model configuration -> :class:`SequenceBatchingSpec` (pure).

The checks are Triton's (control kinds given once, exactly one of ``int32_false_true`` /
``fp32_false_true`` / ``bool_false_true`` with two entries for START, READY and END, a
``data_type`` for CORRID, initial states that fit their state); each failure is a
:class:`ConfigError` that names the model and the field.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.core.datatypes import BY_CONFIG_NAME, DataType
from inferd.core.sequence_spec import (
    ControlKind,
    ControlSpec,
    InitialStateSpec,
    SequenceBatchingSpec,
    StateSpec,
)
from inferd.errors import ConfigError

__all__ = ["sequence_batching_spec"]

_KIND_NAME = model_config_pb2.ModelSequenceBatching.Control.Kind.Name
_TYPE_NAME = model_config_pb2.DataType.Name
_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")


def _datatype(code: int, what: str) -> DataType:
    name = _TYPE_NAME(code)
    found = BY_CONFIG_NAME.get(name)
    if found is None:
        raise ConfigError(f"{what} has unsupported data_type {name}")
    return found


def _control(name: str, control: Any, model: str) -> ControlSpec:
    kind = ControlKind(_KIND_NAME(control.kind))
    lists = [
        (field, list(getattr(control, field)), dtype)
        for field, dtype in (
            ("int32_false_true", "TYPE_INT32"),
            ("fp32_false_true", "TYPE_FP32"),
            ("bool_false_true", "TYPE_BOOL"),
        )
        if len(getattr(control, field))
    ]
    if kind is ControlKind.CORRID:
        if lists:
            raise ConfigError(
                "sequence batching must not specify either 'int32_false_true', "
                f"'fp32_false_true' or 'bool_false_true' for {kind.value} for {model}"
            )
        type_name = _TYPE_NAME(control.data_type)
        if type_name not in _CORRID_TYPES:
            raise ConfigError(
                f"sequence batching control '{name}' ({kind.value}) of {model} must have a "
                f"data_type of {', '.join(_CORRID_TYPES)}, got {type_name}"
            )
        return ControlSpec(name, kind, _datatype(control.data_type, f"control '{name}'"))
    if not lists:
        raise ConfigError(
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            f"'bool_false_true' for {kind.value} for {model}"
        )
    if len(lists) > 1:
        raise ConfigError(
            "sequence batching specifies more than one from 'int32_false_true', "
            f"'fp32_false_true' and 'bool_false_true' for {kind.value} for {model}"
        )
    field, values, type_name = lists[0]
    if len(values) != 2:
        raise ConfigError(
            f"sequence batching control '{field}' must have exactly 2 entries for "
            f"{kind.value} for {model}"
        )
    return ControlSpec(name, kind, BY_CONFIG_NAME[type_name], values[0], values[1])


def _controls(seq: Any, model: str) -> tuple[ControlSpec, ...]:
    found: list[ControlSpec] = []
    names: set[str] = set()
    for control_input in seq.control_input:
        name = control_input.name
        if not name:
            raise ConfigError(f"sequence batching control tensor must have a name for {model}")
        if name in names:
            raise ConfigError(
                f"sequence batching control tensor '{name}' is specified for multiple control "
                f"kinds for {model}"
            )
        names.add(name)
        if len(control_input.control) != 1:
            raise ConfigError(
                f"sequence batching control tensor '{name}' of {model} must have exactly one "
                f"control, got {len(control_input.control)}"
            )
        control = _control(name, control_input.control[0], model)
        if any(c.kind is control.kind for c in found):
            raise ConfigError(
                f"sequence batching specifies multiple {control.kind.value} tensors for {model}"
            )
        found.append(control)
    return tuple(found)


def _initial_state(state: Any, datatype: DataType, dims: tuple[int, ...]) -> InitialStateSpec:
    where = f"state input '{state.input_name}'"
    if len(state.initial_state) > 1:
        raise ConfigError(f"{where} may have at most one initial_state")
    initial = state.initial_state[0]
    if initial.data_type != state.data_type:
        raise ConfigError(
            f"The data type used for 'initial_state' field of state '{state.input_name}' does "
            "not match the state data type."
        )
    if not initial.name:
        raise ConfigError(
            f"Field 'name' must be set when using initial_state for state input "
            f"'{state.input_name}'."
        )
    initial_dims = tuple(int(d) for d in initial.dims)
    if len(initial_dims) != len(dims):
        raise ConfigError(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for {where}. {len(initial_dims)} != {len(dims)}"
        )
    for got, want in zip(initial_dims, dims, strict=True):
        if got < 0:
            raise ConfigError(f"'initial_state' field for {where} contains variable dimensions.")
        if want != -1 and got != want:
            raise ConfigError(
                f"'initial_state' dim for {where} doesn't match 'state' dim description. "
                f"{got} != {want}"
            )
    which = initial.WhichOneof("state_data")
    if which is None or (which == "zero_data" and not initial.zero_data):
        raise ConfigError(f"initial_state of {where} must set zero_data: true or a data_file")
    return InitialStateSpec(
        name=initial.name,
        datatype=datatype,
        dims=initial_dims,
        zero_data=which == "zero_data",
        data_file=initial.data_file if which == "data_file" else "",
    )


def _states(seq: Any, model: str, taken: set[str]) -> tuple[StateSpec, ...]:
    states: list[StateSpec] = []
    for state in seq.state:
        if not state.input_name or not state.output_name:
            raise ConfigError(f"every state of {model} must set input_name and output_name")
        if state.input_name in taken:
            raise ConfigError(
                f"State input name '{state.input_name}' specified more than once (or also "
                f"used as an input or control) for {model}."
            )
        taken.add(state.input_name)
        datatype = _datatype(state.data_type, f"state '{state.input_name}'")
        dims = tuple(int(d) for d in state.dims)
        if not dims:
            raise ConfigError(f"state '{state.input_name}' of {model} must specify 'dims'")
        initial = _initial_state(state, datatype, dims) if len(state.initial_state) else None
        states.append(StateSpec(state.input_name, state.output_name, datatype, dims, initial))
    return tuple(states)


def sequence_batching_spec(config: ModelConfig) -> SequenceBatchingSpec | None:
    """The typed view of ``config.sequence_batching``; None when the model has none."""
    if config.WhichOneof("scheduling_choice") != "sequence_batching":
        return None
    seq = config.sequence_batching
    model = f"model '{config.name}'"
    controls = _controls(seq, model)
    taken = {t.name for t in config.input}
    for control in controls:
        if control.name in taken:
            raise ConfigError(
                f"sequence batching control tensor '{control.name}' of {model} is also listed "
                "as a model input; control tensors are filled by the server, remove it from "
                "'input'"
            )
        taken.add(control.name)
    states = _states(seq, model, taken)
    if seq.WhichOneof("strategy_choice") == "oldest":
        oldest = seq.oldest
        return SequenceBatchingSpec(
            strategy="oldest",
            max_sequence_idle_us=int(seq.max_sequence_idle_microseconds),
            controls=controls,
            states=states,
            max_queue_delay_us=int(oldest.max_queue_delay_microseconds),
            max_candidate_sequences=int(oldest.max_candidate_sequences),
            preferred_batch_sizes=tuple(sorted(int(s) for s in oldest.preferred_batch_size)),
        )
    direct = seq.direct
    utilization = float(direct.minimum_slot_utilization)
    if not 0.0 <= utilization <= 1.0:
        raise ConfigError(
            f"sequence_batching.direct.minimum_slot_utilization of {model} must be in [0, 1], "
            f"got {utilization}"
        )
    return SequenceBatchingSpec(
        strategy="direct",
        max_sequence_idle_us=int(seq.max_sequence_idle_microseconds),
        controls=controls,
        states=states,
        max_queue_delay_us=int(direct.max_queue_delay_microseconds),
        minimum_slot_utilization=utilization,
    )
