"""Decoupled steps in an ensemble: which steps run once per response of which decoupled step
(pure, checked when the ensemble loads).

As in Triton, every ensemble tensor has an *origin*: 0 for the ensemble's inputs and whatever
the steps compute from them once per request, and a new origin for the outputs of each
decoupled step (each of its responses is one *iteration* of everything computed from them). A
step reads tensors of one origin only (Triton's check: "receives inputs originated from
different decoupled models"); a step that is not decoupled writes tensors of the origin it
reads, so it runs once per iteration of that origin. An ensemble with any decoupled step is
itself decoupled: it answers once per iteration of its outputs' origin (zero, one or many
times), then sends the final flag. Triton pairs outputs of different origins by iteration
number; inferd refuses such an ensemble at load, naming the outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from inferd.core.model_spec import ModelSpec
from inferd.errors import ConfigError, UnsupportedError
from inferd.scheduling.ensemble_graph import EnsembleGraph, describe_step

__all__ = ["Origins", "trace_origins"]


@dataclass(frozen=True, slots=True)
class Origins:
    """Per origin (index): the steps that are not decoupled and run in each of its iterations,
    in dependency order, and the decoupled steps that read it (each opening the origin given
    by ``opens``). ``output`` is the origin of the ensemble's outputs."""

    steps: tuple[tuple[int, ...], ...]
    children: tuple[tuple[int, ...], ...]
    opens: Mapping[int, int]  # decoupled step -> the origin of its outputs
    output: int

    @property
    def decoupled(self) -> bool:
        return len(self.steps) > 1


def trace_origins(graph: EnsembleGraph, models: Mapping[str, ModelSpec]) -> Origins:
    """The origins of ``graph``'s tensors, given the step models' configurations by name."""
    name = graph.name
    origin = dict.fromkeys(graph.inputs, 0)
    steps: list[list[int]] = [[]]
    children: list[list[int]] = [[]]
    opens: dict[int, int] = {}
    for index in graph.order:
        step = graph.steps[index]
        read = {origin[tensor] for tensor in step.input_map.values()}
        if len(read) > 1:
            raise ConfigError(
                f"in ensemble '{name}', {describe_step(index, step)} receives inputs originated "
                "from different decoupled models"
            )
        source = read.pop()
        if models[step.model_name].decoupled:
            written = len(steps)
            steps.append([])
            children.append([])
            children[source].append(index)
            opens[index] = written
        else:
            written = source
            steps[source].append(index)
        for tensor in step.output_map.values():
            origin[tensor] = written
    outputs = {tensor: origin[tensor] for tensor in graph.outputs}
    found = set(outputs.values())
    if len(found) > 1:
        by_origin = ", ".join(
            f"'{tensor}' ({'once per request' if o == 0 else _origin_name(graph, opens, o)})"
            for tensor, o in outputs.items()
        )
        raise UnsupportedError(
            f"ensemble '{name}' has outputs of different origins: {by_origin}; every output "
            "of an ensemble with decoupled steps must come from the same decoupled step's "
            "responses (or all from none)"
        )
    return Origins(
        tuple(tuple(s) for s in steps),
        tuple(tuple(c) for c in children),
        opens,
        found.pop() if found else 0,
    )


def _origin_name(graph: EnsembleGraph, opens: Mapping[int, int], origin: int) -> str:
    step = next(i for i, o in opens.items() if o == origin)
    return f"per response of {describe_step(step, graph.steps[step])}"
