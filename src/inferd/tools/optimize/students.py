"""The smaller models distillation trains, and the ``--student`` specs that describe them.

A spec is ``key=value`` pairs joined by commas; lists inside a value are joined by ``x``:

- ``layers=N`` for a BERT-like sentence encoder: the teacher with N of its transformer layers,
  started from the teacher's own weights (its embeddings and layers spread evenly from its first
  to its last, every other one or so, as DistilBERT was made).
- ``hidden=AxB...`` for a classifier: a multilayer perceptron over the flattened input with
  hidden layers of A, B... units (ReLU), ending in one unit per class.

Parsing is pure; building imports torch.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    import torch

__all__ = [
    "ClassifierSpec",
    "EncoderSpec",
    "classifier_student",
    "encoder_layer_count",
    "encoder_student",
    "parse_classifier_spec",
    "parse_encoder_spec",
    "pick_layers",
]


@dataclass(frozen=True)
class EncoderSpec:
    layers: int

    def describe(self) -> str:
        return f"layers={self.layers}"


@dataclass(frozen=True)
class ClassifierSpec:
    hidden: tuple[int, ...]

    def describe(self) -> str:
        return "hidden=" + "x".join(str(h) for h in self.hidden)


def _pairs(text: str, allowed: tuple[str, ...], example: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key or not value:
            raise InvalidArgumentError(
                f"--student '{text}': expected key=value pairs joined by commas, like {example}"
            )
        if key not in allowed:
            raise InvalidArgumentError(
                f"--student '{text}': unknown key '{key}' for this teacher "
                f"(known: {', '.join(allowed)})"
            )
        if key in pairs:
            raise InvalidArgumentError(f"--student '{text}': '{key}' is given twice")
        pairs[key] = value.strip()
    return pairs


def _positive(text: str, value: str, what: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise InvalidArgumentError(f"--student '{text}': {what} must be a positive whole number")
    return number


def parse_encoder_spec(text: str, teacher_layers: int) -> EncoderSpec:
    """``layers=N`` with 1 <= N < the teacher's layer count."""
    pairs = _pairs(text, ("layers",), "layers=3")
    if "layers" not in pairs:
        raise InvalidArgumentError(f"--student '{text}': an encoder student needs layers=N")
    layers = _positive(text, pairs["layers"], "layers")
    if layers >= teacher_layers:
        raise InvalidArgumentError(
            f"--student '{text}': the teacher has {teacher_layers} layers; a student has fewer"
        )
    return EncoderSpec(layers)


def parse_classifier_spec(text: str) -> ClassifierSpec:
    """``hidden=A`` or ``hidden=AxB...`` (``hidden=0`` for no hidden layer: a linear model)."""
    pairs = _pairs(text, ("hidden",), "hidden=64 or hidden=128x64")
    if "hidden" not in pairs:
        raise InvalidArgumentError(f"--student '{text}': a classifier student needs hidden=...")
    if pairs["hidden"] == "0":
        return ClassifierSpec(())
    return ClassifierSpec(
        tuple(_positive(text, v, "each hidden size") for v in pairs["hidden"].split("x"))
    )


def encoder_layer_count(folder: Path) -> int:
    """The transformer layers of the Hugging Face model in ``folder`` (from its config.json)."""
    config = folder / "config.json"
    try:
        layers = json.loads(config.read_text()).get("num_hidden_layers")
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"{config}: cannot be read ({exc})") from None
    if not isinstance(layers, int) or layers < 1:
        raise InvalidArgumentError(
            f"{config}: has no num_hidden_layers: only BERT-like encoders are distilled by layers"
        )
    return layers


def pick_layers(teacher_layers: int, student_layers: int) -> list[int]:
    """The teacher layers a student starts from: spread evenly from the first to the last, as
    DistilBERT took 0, 2, 4, 7, 9 and 11 of BERT's 12 (0, 3 and 5 of 6; a single layer is the
    last one, whose output the pooling was trained on)."""
    if not 1 <= student_layers <= teacher_layers:
        raise InvalidArgumentError(
            f"a student of {student_layers} layers cannot be taken from {teacher_layers}"
        )
    if student_layers == 1:
        return [teacher_layers - 1]
    step = (teacher_layers - 1) / (student_layers - 1)
    return [int(i * step + 0.5) for i in range(student_layers)]


def encoder_student(teacher: Any, spec: EncoderSpec) -> tuple[Any, list[int]]:
    """A copy of the teacher (a Hugging Face BERT-like model with ``encoder.layer``) that keeps
    its embeddings and the layers :func:`pick_layers` chooses; the layers it kept."""
    import torch

    stack = getattr(getattr(teacher, "encoder", None), "layer", None)
    if not isinstance(stack, torch.nn.ModuleList):
        raise InvalidArgumentError(
            f"the teacher ({type(teacher).__name__}) has no encoder.layer list: only BERT-like "
            "encoders are distilled by layers"
        )
    picked = pick_layers(len(stack), spec.layers)
    student = copy.deepcopy(teacher)
    student.encoder.layer = torch.nn.ModuleList([student.encoder.layer[i] for i in picked])
    student.config.num_hidden_layers = spec.layers
    for index, layer in enumerate(student.encoder.layer):
        attention: Any = getattr(layer, "attention", None)
        inner: Any = getattr(attention, "self", attention)
        if hasattr(inner, "layer_idx"):
            inner.layer_idx = index
    return student, picked


def classifier_student(features: int, classes: int, spec: ClassifierSpec) -> torch.nn.Module:
    """Flatten, then Linear + ReLU per hidden size, then a Linear to ``classes`` logits."""
    from torch import nn

    layers: list[nn.Module] = [nn.Flatten()]
    width = features
    for size in spec.hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)
