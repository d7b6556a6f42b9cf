"""A typed view of a model's ``sequence_batching`` section (plain data, no protobuf).

Control inputs and implicit-state tensors are filled by the sequence batcher, never sent by a
client: :func:`execution_tensors` lists them as the extra inputs (and state outputs) the runtime
sees, so a backend loads and validates a sequence model exactly like any other model.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from inferd.core.datatypes import DataType
from inferd.core.model_spec import ModelSpec, TensorSpec

__all__ = [
    "ControlKind",
    "ControlSpec",
    "InitialStateSpec",
    "SequenceBatchingSpec",
    "StateSpec",
    "execution_spec",
    "execution_tensors",
]


class ControlKind(enum.Enum):
    """The control signals the sequence batcher can give a model (Triton's names)."""

    START = "CONTROL_SEQUENCE_START"
    READY = "CONTROL_SEQUENCE_READY"
    END = "CONTROL_SEQUENCE_END"
    CORRID = "CONTROL_SEQUENCE_CORRID"


@dataclass(frozen=True, slots=True)
class ControlSpec:
    """One control tensor: its name, its kind, its datatype, and for the boolean kinds
    (START, READY, END) the values that mean false and true."""

    name: str
    kind: ControlKind
    datatype: DataType
    false_value: float = 0
    true_value: float = 1


@dataclass(frozen=True, slots=True)
class InitialStateSpec:
    """The value a sequence's state starts from: zeros, or the contents of a file of the model's
    ``initial_state/`` folder (raw row-major bytes)."""

    name: str
    datatype: DataType
    dims: tuple[int, ...]
    zero_data: bool
    data_file: str = ""


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One implicit state: fed to the model as ``input_name``, read back from ``output_name``."""

    input_name: str
    output_name: str
    datatype: DataType
    dims: tuple[int, ...]  # without the batch dimension; -1 = variable
    initial: InitialStateSpec | None = None


@dataclass(frozen=True, slots=True)
class SequenceBatchingSpec:
    strategy: str  # "direct" or "oldest"
    max_sequence_idle_us: int
    controls: tuple[ControlSpec, ...] = ()
    states: tuple[StateSpec, ...] = ()
    max_queue_delay_us: int = 0
    # direct: the share of an instance's slots that must be ready before a batch runs early
    minimum_slot_utilization: float = 0.0
    # oldest: sequences each instance batches from (0: max(1, max_batch_size))
    max_candidate_sequences: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()

    def control(self, kind: ControlKind) -> ControlSpec | None:
        """The control tensor of ``kind``, if the model asks for one."""
        return next((c for c in self.controls if c.kind is kind), None)


def execution_tensors(
    seq: SequenceBatchingSpec, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The inputs and outputs the runtime sees: the configured ones, then every control tensor
    (dims ``[1]``), every state input, and every state output the config does not list."""
    extra_in = [TensorSpec(c.name, c.datatype, (1,)) for c in seq.controls]
    extra_in += [TensorSpec(s.input_name, s.datatype, s.dims) for s in seq.states]
    listed = {t.name for t in outputs}
    extra_out = [
        TensorSpec(s.output_name, s.datatype, s.dims)
        for s in seq.states
        if s.output_name not in listed
    ]
    return inputs + tuple(extra_in), outputs + tuple(extra_out)


def execution_spec(spec: ModelSpec) -> ModelSpec:
    """The spec a runtime loads: for a sequence model, with its control and state tensors added
    (see :func:`execution_tensors`); any other spec unchanged."""
    seq = spec.sequence_batching
    if seq is None:
        return spec
    inputs, outputs = execution_tensors(seq, spec.inputs, spec.outputs)
    return dataclasses.replace(spec, inputs=inputs, outputs=outputs)
