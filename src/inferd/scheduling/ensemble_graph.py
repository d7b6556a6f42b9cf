"""The data-flow graph of an ensemble, built and checked before the ensemble serves (pure).

An ensemble's steps are tied together by *ensemble tensors*: a step reads the tensors its
``input_map`` names and writes the ones its ``output_map`` names. :func:`build_graph` checks the
structure alone (every tensor is written once and read somewhere, every ensemble output is
written, no cycle) and orders the steps; :func:`check_step_models` then checks the steps against
the configurations of the models they call (every input mapped, names that exist, data types and
shapes that agree, batch sizes). Both raise :class:`ConfigError` naming the ensemble, the step
and the tensor at fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from inferd.core.model_spec import EnsembleStepSpec, ModelSpec, TensorSpec
from inferd.errors import ConfigError

__all__ = ["EnsembleGraph", "build_graph", "check_step_models", "describe_step"]


@dataclass(frozen=True, slots=True)
class EnsembleGraph:
    """The steps of one ensemble in an order that respects their data dependencies."""

    name: str
    steps: tuple[EnsembleStepSpec, ...]
    order: tuple[int, ...]  # step indices, each after every step it depends on
    depends_on: tuple[tuple[int, ...], ...]  # per step: the steps whose outputs it reads
    inputs: tuple[str, ...]  # the ensemble's inputs
    outputs: tuple[str, ...]  # the ensemble's outputs

    @property
    def is_chain(self) -> bool:
        """True when each step (in order) reads the previous one's outputs, so no two steps
        could ever run at the same time."""
        return all(
            self.order[k - 1] in self.depends_on[self.order[k]] for k in range(1, len(self.order))
        )

    def composing_models(self) -> tuple[str, ...]:
        """The names of the models the steps call, once each, in step order."""
        return tuple(dict.fromkeys(step.model_name for step in self.steps))


def describe_step(index: int, step: EnsembleStepSpec) -> str:
    """``step 1 (model 'classifier')``: how messages name a step."""
    return f"step {index} (model '{step.model_name}')"


# -- structure ----------------------------------------------------------------------------------


def build_graph(spec: ModelSpec) -> EnsembleGraph:
    """Check the structure of ``spec``'s ensemble and order its steps."""
    name = spec.name
    steps = spec.ensemble_steps
    if not spec.is_ensemble:
        raise ConfigError(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not 'ensemble'"
        )
    if not steps:
        raise ConfigError(f"must specify 'step' for ensemble '{name}'")
    if spec.warmups:
        raise ConfigError(f"model_warmup can not be specified for ensemble '{name}'")
    inputs = tuple(t.name for t in spec.inputs)
    outputs = tuple(t.name for t in spec.outputs)
    writer: dict[str, int] = {}
    for index, step in enumerate(steps):
        if not step.model_name:
            raise ConfigError(f"must specify 'model_name' in step {index} of ensemble '{name}'")
        where = describe_step(index, step)
        if not step.input_map:
            raise ConfigError(f"must specify 'input_map' in {where} of ensemble '{name}'")
        if not step.output_map:
            raise ConfigError(f"must specify 'output_map' in {where} of ensemble '{name}'")
        for tensor in step.output_map.values():
            if tensor in inputs:
                raise ConfigError(
                    f"in ensemble '{name}', {where} writes ensemble tensor '{tensor}', which is "
                    "an input of the ensemble"
                )
            first = writer.get(tensor)
            if first is not None:
                raise ConfigError(
                    f"in ensemble '{name}', ensemble tensor '{tensor}' is written by both "
                    f"{describe_step(first, steps[first])} and {where}; each tensor must have "
                    "one writer"
                )
            writer[tensor] = index
    readers: dict[str, list[int]] = {}
    depends_on: list[tuple[int, ...]] = []
    for index, step in enumerate(steps):
        deps: dict[int, None] = {}
        for model_input, tensor in step.input_map.items():
            readers.setdefault(tensor, []).append(index)
            if tensor in writer:
                deps[writer[tensor]] = None
            elif tensor not in inputs:
                raise ConfigError(
                    f"in ensemble '{name}', {describe_step(index, step)} maps ensemble tensor "
                    f"'{tensor}' to its input '{model_input}', but no step writes '{tensor}' and "
                    "it is not an input of the ensemble"
                )
        depends_on.append(tuple(sorted(deps)))  # a map's order is not the config's
    for tensor in inputs:
        if tensor not in readers:
            raise ConfigError(f"ensemble input '{tensor}' of ensemble '{name}' is not used")
    for tensor in outputs:
        if tensor not in writer and tensor not in inputs:
            raise ConfigError(f"output '{tensor}' of ensemble '{name}' is not written by any step")
    order = _order(name, steps, depends_on)
    for tensor, index in writer.items():
        if tensor not in readers and tensor not in outputs:
            raise ConfigError(
                f"in ensemble '{name}', ensemble tensor '{tensor}' written by "
                f"{describe_step(index, steps[index])} is unused: no step reads it and it is "
                "not an output of the ensemble"
            )
    return EnsembleGraph(name, steps, order, tuple(depends_on), inputs, outputs)


def _order(
    name: str, steps: tuple[EnsembleStepSpec, ...], depends_on: list[tuple[int, ...]]
) -> tuple[int, ...]:
    """A topological order of the steps (Kahn's algorithm, lowest index first among ready
    steps, so a config already in order keeps its order); a cycle is an error naming it."""
    waiting = [len(set(deps)) for deps in depends_on]
    followers: list[list[int]] = [[] for _ in steps]
    for index, deps in enumerate(depends_on):
        for dep in set(deps):
            followers[dep].append(index)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    order: list[int] = []
    while ready:
        ready.sort(reverse=True)
        current = ready.pop()
        order.append(current)
        for follower in followers[current]:
            waiting[follower] -= 1
            if waiting[follower] == 0:
                ready.append(follower)
    if len(order) < len(steps):
        cycle = _find_cycle(depends_on, set(range(len(steps))) - set(order))
        path = " -> ".join(describe_step(i, steps[i]) for i in cycle)
        raise ConfigError(
            f"ensemble '{name}' has a cycle: {path} (each step reads a tensor the next one writes)"
        )
    return tuple(order)


def _find_cycle(depends_on: list[tuple[int, ...]], stuck: set[int]) -> list[int]:
    """A closed path through the steps left over by the topological sort (each of which
    depends on another leftover step), as indices with the first repeated at the end."""
    current = min(stuck)
    seen: dict[int, int] = {}
    path: list[int] = []
    while current not in seen:
        seen[current] = len(path)
        path.append(current)
        current = min(d for d in depends_on[current] if d in stuck)
    cycle = path[seen[current] :]
    return [*cycle, cycle[0]]


# -- against the step models' configurations ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Seen:
    """What one ensemble tensor was first declared as, and by which model."""

    config_type: str
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]
    source: str


def _seen(tensor: TensorSpec, model: str, batching: bool, *, use_reshape: bool) -> _Seen:
    dims = tensor.reshape if use_reshape and tensor.reshape is not None else tensor.dims
    full = (-1, *dims) if batching else dims
    return _Seen(tensor.datatype.config_name, dims, full, model)


def _same_dims(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _agree(ensemble: str, tensor: str, first: _Seen, other: _Seen) -> None:
    where = f"in ensemble '{ensemble}', ensemble tensor '{tensor}'"
    if first.config_type != other.config_type:
        raise ConfigError(
            f"{where} has inconsistent data types: {first.config_type} from model "
            f"'{first.source}' but {other.config_type} from model '{other.source}'"
        )
    if not _same_dims(first.dims, other.dims) and not _same_dims(first.full_dims, other.full_dims):
        raise ConfigError(
            f"{where} has inconsistent shapes: {list(first.full_dims)} from model "
            f"'{first.source}' but {list(other.full_dims)} from model '{other.source}'"
        )


def check_step_models(
    graph: EnsembleGraph, spec: ModelSpec, models: Mapping[str, ModelSpec]
) -> None:
    """Check every step against the configuration of the model it calls.

    ``models`` holds, by model name, the configuration of each step model's version that the
    ensemble will call. Decoupled step models and sequence models are refused in an ensemble
    that enables the response cache (``ensemble_decoupled`` checks how decoupled steps'
    responses flow)."""
    name = spec.name
    batching = spec.max_batch_size > 0
    seen: dict[str, _Seen] = {}
    for own in (*spec.inputs, *spec.outputs):
        seen[own.name] = _seen(own, name, batching, use_reshape=True)

    def declare(tensor_name: str, declared: _Seen) -> None:
        first = seen.get(tensor_name)
        if first is None:
            seen[tensor_name] = declared
        else:
            _agree(name, tensor_name, first, declared)

    for index in graph.order:
        step = graph.steps[index]
        where = describe_step(index, step)
        model = models[step.model_name]
        if spec.response_cache and model.decoupled:
            raise ConfigError(
                f"the response cache does not support ensemble '{name}': its {where} calls a "
                "decoupled model, which makes the ensemble decoupled; set response_cache "
                "{ enable: false } on the ensemble"
            )
        if spec.response_cache and model.sequence_batching is not None:
            raise ConfigError(
                f"the response cache does not support ensemble '{name}': its {where} calls a "
                "model with the sequence batcher, whose answers depend on the sequence's state; "
                "set response_cache { enable: false } on the ensemble"
            )
        mbs = model.max_batch_size
        if mbs != 0 and mbs < spec.max_batch_size:
            raise ConfigError(
                f"ensemble '{name}' allows max_batch_size {spec.max_batch_size}, but its {where} "
                f"allows only {mbs}"
            )
        step_batching = mbs > 0
        for model_input, tensor in step.input_map.items():
            declared = model.input_by_name.get(model_input)
            if declared is None:
                raise ConfigError(
                    f"in ensemble '{name}', {where} maps ensemble tensor '{tensor}' to input "
                    f"'{model_input}', which model '{model.name}' does not have (its inputs: "
                    f"{', '.join(t.name for t in model.inputs) or 'none'})"
                )
            declare(tensor, _seen(declared, model.name, step_batching, use_reshape=False))
        for model_in in model.inputs:
            if model_in.name not in step.input_map and not model_in.optional:
                raise ConfigError(
                    f"in ensemble '{name}', input '{model_in.name}' of model '{model.name}' "
                    f"({where}) is not mapped to any ensemble tensor"
                )
        for model_output, tensor in step.output_map.items():
            declared = model.output_by_name.get(model_output)
            if declared is None:
                raise ConfigError(
                    f"in ensemble '{name}', {where} maps output '{model_output}' to ensemble "
                    f"tensor '{tensor}', but model '{model.name}' has no such output (its "
                    f"outputs: {', '.join(t.name for t in model.outputs) or 'none'})"
                )
            declare(tensor, _seen(declared, model.name, step_batching, use_reshape=False))
