"""The configurations the analyzer tries for one model (pure).

A :class:`Candidate` names every setting the analyzer changes: how many CPU instances, the
largest batch, whether the dynamic batcher runs (with its queue delay and preferred sizes) and
ONNX Runtime's thread counts. A :class:`Space` holds the values to try for each setting;
:func:`enumerate_space` lists the valid combinations in a fixed order, once each.

Rules that keep the list free of configurations that cannot differ:

- with the dynamic batcher off, ``max_batch_size`` stays the model's own and no preferred sizes
  are set (the analyzer's requests carry one sample each, so the bound changes nothing);
- a preferred batch size larger than ``max_batch_size`` is not a valid config and is skipped;
- a model without a batch dimension (``max_batch_size: 0``) is tried without batching only;
- thread counts are ONNX Runtime parameters, tried only for ONNX Runtime models.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from inferd.errors import InvalidArgumentError

__all__ = [
    "Candidate",
    "ModelFacts",
    "RangeChoices",
    "Space",
    "default_space",
    "enumerate_space",
    "parse_int_list",
    "parse_preferred_list",
    "parse_switch_list",
    "parse_thread_list",
    "space_for",
]


@dataclass(frozen=True, order=True)
class Candidate:
    """One configuration to measure. ``None`` thread counts leave the parameter unset (the
    runtime's own layout)."""

    instances: int
    max_batch_size: int
    dynamic_batching: bool
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None

    @property
    def key(self) -> str:
        """A short stable name, unique per candidate (used as the results' key)."""
        parts = [f"i{self.instances}", f"b{self.max_batch_size}"]
        if self.dynamic_batching:
            parts.append(f"q{self.max_queue_delay_us}")
            if self.preferred_batch_sizes:
                parts.append("p" + "+".join(str(s) for s in self.preferred_batch_sizes))
        else:
            parts.append("off")
        if self.intra_op_threads is not None:
            parts.append(f"t{self.intra_op_threads}")
        if self.inter_op_threads is not None:
            parts.append(f"x{self.inter_op_threads}")
        return "-".join(parts)

    def describe(self) -> str:
        """Words for a table cell or a chart's hover text."""
        words = [f"{self.instances} instance{'s' if self.instances != 1 else ''}"]
        words.append(f"max batch {self.max_batch_size}")
        if self.dynamic_batching:
            batching = f"dynamic batching, delay {self.max_queue_delay_us} µs"
            if self.preferred_batch_sizes:
                sizes = ",".join(str(s) for s in self.preferred_batch_sizes)
                batching += f", preferred {sizes}"
            words.append(batching)
        else:
            words.append("no dynamic batching")
        if self.intra_op_threads is not None:
            words.append(f"intra-op threads {self.intra_op_threads}")
        if self.inter_op_threads is not None:
            words.append(f"inter-op threads {self.inter_op_threads}")
        return ", ".join(words)

    def to_dict(self) -> dict[str, Any]:
        return {
            "instances": self.instances,
            "max_batch_size": self.max_batch_size,
            "dynamic_batching": self.dynamic_batching,
            "max_queue_delay_us": self.max_queue_delay_us,
            "preferred_batch_sizes": list(self.preferred_batch_sizes),
            "intra_op_threads": self.intra_op_threads,
            "inter_op_threads": self.inter_op_threads,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(
            instances=int(data["instances"]),
            max_batch_size=int(data["max_batch_size"]),
            dynamic_batching=bool(data["dynamic_batching"]),
            max_queue_delay_us=int(data.get("max_queue_delay_us", 0)),
            preferred_batch_sizes=tuple(int(s) for s in data.get("preferred_batch_sizes", ())),
            intra_op_threads=_opt_int(data.get("intra_op_threads")),
            inter_op_threads=_opt_int(data.get("inter_op_threads")),
        )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class ModelFacts:
    """What the space's defaults depend on, read from the model's served config."""

    name: str
    max_batch_size: int  # 0: no batch dimension
    onnxruntime: bool  # thread parameters apply
    sequence: bool = False  # a sequence batcher: the dynamic batcher does not apply
    ensemble: bool = False  # no instances, no batcher of its own

    @property
    def batches(self) -> bool:
        return self.max_batch_size > 0 and not self.sequence and not self.ensemble


@dataclass(frozen=True)
class Space:
    """The values tried for each setting (every tuple non-empty)."""

    instances: tuple[int, ...]
    max_batch_sizes: tuple[int, ...]
    dynamic_batching: tuple[bool, ...]
    queue_delays_us: tuple[int, ...]
    preferred_batch_sizes: tuple[tuple[int, ...], ...] = ((),)
    intra_op_threads: tuple[int | None, ...] = (None,)
    inter_op_threads: tuple[int | None, ...] = (None,)
    # the model's own max_batch_size, kept when the dynamic batcher is off
    own_max_batch_size: int = 0
    notes: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> dict[str, str]:
        """Each setting's values as text (for the terminal and the report)."""

        def show(values: Sequence[object]) -> str:
            return ", ".join("auto" if v is None else _show(v) for v in values)

        return {
            "instances": show(self.instances),
            "max_batch_size": show(self.max_batch_sizes),
            "dynamic batching": show(["on" if v else "off" for v in self.dynamic_batching]),
            "queue delay (µs)": show(self.queue_delays_us),
            "preferred batch sizes": show(self.preferred_batch_sizes),
            "intra-op threads": show(self.intra_op_threads),
            "inter-op threads": show(self.inter_op_threads),
        }


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return "+".join(str(v) for v in value) if value else "none"
    return str(value)


def enumerate_space(space: Space) -> list[Candidate]:
    """Every valid candidate of ``space`` once, in a fixed order (instances outermost)."""
    found: dict[str, Candidate] = {}
    for instances, intra, inter in itertools.product(
        space.instances, space.intra_op_threads, space.inter_op_threads
    ):
        for candidate in _batching_choices(space, instances, intra, inter):
            found.setdefault(candidate.key, candidate)
    return list(found.values())


def _batching_choices(
    space: Space, instances: int, intra: int | None, inter: int | None
) -> Iterator[Candidate]:
    for enabled in space.dynamic_batching:
        if not enabled:
            yield Candidate(instances, space.own_max_batch_size, False, 0, (), intra, inter)
            continue
        for mbs, delay, preferred in itertools.product(
            space.max_batch_sizes, space.queue_delays_us, space.preferred_batch_sizes
        ):
            if mbs < 1 or any(size > mbs for size in preferred):
                continue
            yield Candidate(instances, mbs, True, delay, preferred, intra, inter)


def _powers_up_to(limit: int) -> list[int]:
    values, value = [], 1
    while value <= limit:
        values.append(value)
        value *= 2
    return values


def default_space(facts: ModelFacts, cores: int) -> Space:
    """Ranges that suit the machine and the model when the user names none.

    Instances: 1, 2, 4 … up to the cores (at most four values: 1 and the three largest).
    Batching models: the dynamic batcher off and on, max_batch_size the model's own plus 8 and 32
    where smaller, queue delays 0, 100 and 1000 µs. ONNX Runtime models on a machine with more
    than one core: the runtime's own thread layout and one intra-op thread per instance.
    """
    instances = _powers_up_to(max(1, cores))
    if cores not in instances:
        instances.append(cores)
    if len(instances) > 4:  # one instance, and the three largest counts
        instances = [1, *instances[-3:]]
    if facts.ensemble:
        instances = [1]
    if facts.batches:
        mbs = sorted({v for v in (8, 32) if v < facts.max_batch_size} | {facts.max_batch_size})
        batching: tuple[bool, ...] = (False, True)
        delays: tuple[int, ...] = (0, 100, 1000)
    else:
        mbs, batching, delays = [facts.max_batch_size], (False,), (0,)
    threads: tuple[int | None, ...] = (None, 1) if facts.onnxruntime and cores > 1 else (None,)
    return Space(
        instances=tuple(sorted(set(instances))),
        max_batch_sizes=tuple(mbs),
        dynamic_batching=batching,
        queue_delays_us=delays,
        intra_op_threads=threads,
        own_max_batch_size=facts.max_batch_size,
    )


# -- parsing the command line's lists -----------------------------------------------------------


def parse_int_list(text: str, what: str, *, minimum: int = 0) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``; one clear error naming ``what`` otherwise."""
    values: list[int] = []
    for item in _items(text, what):
        try:
            value = int(item)
        except ValueError:
            raise InvalidArgumentError(
                f"{what}: '{item}' is not a whole number (expected a list like 1,2,4)"
            ) from None
        if value < minimum:
            raise InvalidArgumentError(f"{what}: {value} is below the minimum of {minimum}")
        if value not in values:
            values.append(value)
    return tuple(values)


def parse_thread_list(text: str, what: str) -> tuple[int | None, ...]:
    """Thread counts; ``auto`` leaves the parameter unset (the runtime's own layout)."""
    values: list[int | None] = []
    for item in _items(text, what):
        value: int | None
        if item.lower() == "auto":
            value = None
        else:
            (value,) = parse_int_list(item, what, minimum=1)
        if value not in values:
            values.append(value)
    return tuple(values)


def parse_switch_list(text: str, what: str) -> tuple[bool, ...]:
    """``"off,on"`` -> ``(False, True)``."""
    words = {"on": True, "off": False, "true": True, "false": False}
    values: list[bool] = []
    for item in _items(text, what):
        if item.lower() not in words:
            raise InvalidArgumentError(f"{what}: '{item}' is neither on nor off")
        if words[item.lower()] not in values:
            values.append(words[item.lower()])
    return tuple(values)


def parse_preferred_list(text: str, what: str) -> tuple[tuple[int, ...], ...]:
    """Choices of preferred batch sizes: ``"none,8,4+8"`` -> ``((), (8,), (4, 8))``."""
    values: list[tuple[int, ...]] = []
    for item in _items(text, what):
        choice = (
            ()
            if item.lower() == "none"
            else parse_int_list(item.replace("+", ","), what, minimum=1)
        )
        choice = tuple(sorted(choice))
        if choice not in values:
            values.append(choice)
    return tuple(values)


def _items(text: str, what: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise InvalidArgumentError(f"{what}: expected a comma-separated list, got '{text}'")
    return items


@dataclass(frozen=True)
class RangeChoices:
    """The values the user named on the command line (None: the default for the model)."""

    instances: tuple[int, ...] | None = None
    max_batch_sizes: tuple[int, ...] | None = None
    dynamic_batching: tuple[bool, ...] | None = None
    queue_delays_us: tuple[int, ...] | None = None
    preferred_batch_sizes: tuple[tuple[int, ...], ...] | None = None
    intra_op_threads: tuple[int | None, ...] | None = None
    inter_op_threads: tuple[int | None, ...] | None = None


def space_for(facts: ModelFacts, cores: int, choices: RangeChoices) -> Space:
    """The model's default space with the user's values in place of the defaults.

    Values that cannot apply to this model are left out with a note (several models may share
    one command line); values that are never valid raise InvalidArgumentError.
    """
    base = default_space(facts, cores)
    notes: list[str] = []
    batching_flags = {
        "--max-batch-sizes": choices.max_batch_sizes,
        "--queue-delays-us": choices.queue_delays_us,
        "--preferred-batch-sizes": choices.preferred_batch_sizes,
    }
    if choices.dynamic_batching is not None and True in choices.dynamic_batching:
        batching_flags["--dynamic-batching on"] = choices.dynamic_batching
    mbs, batching = base.max_batch_sizes, base.dynamic_batching
    delays, preferred = base.queue_delays_us, base.preferred_batch_sizes
    if not facts.batches:
        given = [flag for flag, value in batching_flags.items() if value is not None]
        if given:
            notes.append(
                f"model '{facts.name}' {_why_no_batching(facts)}: {', '.join(given)} not tried"
            )
    else:
        if choices.max_batch_sizes is not None:
            if 0 in choices.max_batch_sizes:
                raise InvalidArgumentError(
                    "--max-batch-sizes: 0 would take the batch dimension out of the model's "
                    "inputs; give sizes of 1 or more"
                )
            mbs = choices.max_batch_sizes
        batching = choices.dynamic_batching or batching
        delays = choices.queue_delays_us or delays
        preferred = choices.preferred_batch_sizes or preferred
    thread_flags = {
        "--threads": choices.intra_op_threads,
        "--inter-op-threads": choices.inter_op_threads,
    }
    intra, inter = base.intra_op_threads, base.inter_op_threads
    if not facts.onnxruntime:
        given = [flag for flag, value in thread_flags.items() if value is not None]
        if given:
            notes.append(
                f"model '{facts.name}' does not run on ONNX Runtime: {', '.join(given)} not tried"
            )
    else:
        intra = choices.intra_op_threads or intra
        inter = choices.inter_op_threads or inter
    instances = choices.instances or base.instances
    if facts.ensemble and choices.instances is not None:
        notes.append(f"model '{facts.name}' is an ensemble: --instances not tried")
        instances = base.instances
    return Space(
        instances=instances,
        max_batch_sizes=mbs,
        dynamic_batching=batching,
        queue_delays_us=delays,
        preferred_batch_sizes=preferred,
        intra_op_threads=intra,
        inter_op_threads=inter,
        own_max_batch_size=facts.max_batch_size,
        notes=tuple(notes),
    )


def _why_no_batching(facts: ModelFacts) -> str:
    if facts.sequence:
        return "uses the sequence batcher"
    if facts.ensemble:
        return "is an ensemble"
    return "does not batch (max_batch_size 0)"
