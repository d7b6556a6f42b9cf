"""A typed, read-only view of a normalised model configuration.

Built once when a model loads (``inferd.codecs.model_config.spec_from_proto``) and used
instead of the protobuf message everywhere below the codecs. ``config`` keeps the normalised
configuration as plain JSON data (Triton's rendering) for the configuration endpoints and the
Python models that receive it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferd.core.datatypes import DataType

if TYPE_CHECKING:
    from inferd.core.sequence_spec import SequenceBatchingSpec

__all__ = [
    "DynamicBatchingSpec",
    "EnsembleStepSpec",
    "InstanceGroupSpec",
    "ModelSpec",
    "OptimizationSpec",
    "QueuePolicySpec",
    "TensorSpec",
    "WarmupInputSpec",
    "WarmupSpec",
]


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    datatype: DataType
    dims: tuple[int, ...]  # without the batch dimension; -1 = variable
    reshape: tuple[int, ...] | None = None
    optional: bool = False
    allow_ragged_batch: bool = False
    is_shape_tensor: bool = False
    label_filename: str = ""

    def full_shape(self, max_batch_size: int) -> list[int]:
        """The shape shown in model metadata: ``[-1] + dims`` when the model batches."""
        return [-1, *self.dims] if max_batch_size > 0 else list(self.dims)


@dataclass(frozen=True, slots=True)
class InstanceGroupSpec:
    name: str
    kind: str  # "KIND_CPU", "KIND_GPU", "KIND_MODEL"
    count: int
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class QueuePolicySpec:
    timeout_action: str = "REJECT"  # or "DELAY"
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0


@dataclass(frozen=True, slots=True)
class DynamicBatchingSpec:
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicySpec = QueuePolicySpec()
    priority_queue_policy: dict[int, QueuePolicySpec] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WarmupInputSpec:
    """One input of a warm-up sample: zeros, random values, or a file of the model's."""

    datatype: DataType
    dims: tuple[int, ...]
    source: str  # "zero_data", "random_data" or "input_data_file"
    input_data_file: str = ""


@dataclass(frozen=True, slots=True)
class WarmupSpec:
    name: str
    batch_size: int
    count: int
    inputs: dict[str, WarmupInputSpec]


@dataclass(frozen=True, slots=True)
class OptimizationSpec:
    """The config's ``optimization`` section, as far as a CPU server reads it."""

    graph_level: int | None = None  # optimization.graph.level, when the config sets it
    gpu_accelerators: tuple[str, ...] = ()  # names of gpu_execution_accelerator entries


@dataclass(frozen=True, slots=True)
class EnsembleStepSpec:
    """One step of an ensemble: the model it calls and how its tensors map to the ensemble's.

    ``input_map`` is step-model input -> ensemble tensor; ``output_map`` is step-model output
    -> ensemble tensor. ``model_version`` None means the latest ready version.
    """

    model_name: str
    model_version: int | None
    input_map: dict[str, str]
    output_map: dict[str, str]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    platform: str
    backend: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    instance_groups: tuple[InstanceGroupSpec, ...]
    parameters: dict[str, str]
    default_model_filename: str
    dynamic_batching: DynamicBatchingSpec | None = None
    has_sequence_batching: bool = False
    sequence_batching: SequenceBatchingSpec | None = None
    is_ensemble: bool = False
    ensemble_steps: tuple[EnsembleStepSpec, ...] = ()
    decoupled: bool = False
    response_cache: bool = False  # response_cache.enable: answers may come from the cache
    warmups: tuple[WarmupSpec, ...] = ()
    optimization: OptimizationSpec = OptimizationSpec()
    # the normalised configuration as Triton renders it in JSON (plain data, never modified)
    config: dict[str, Any] = field(default_factory=dict)
    input_by_name: dict[str, TensorSpec] = field(default_factory=dict)
    output_by_name: dict[str, TensorSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_by_name", {t.name: t for t in self.inputs})
        object.__setattr__(self, "output_by_name", {t.name: t for t in self.outputs})

    @property
    def metadata_platform(self) -> str:
        """``platform`` as model metadata reports it (the backend when platform is empty)."""
        return self.platform or self.backend
