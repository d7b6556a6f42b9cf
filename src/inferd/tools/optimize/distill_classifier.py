"""Knowledge distillation of a classifier into a smaller multilayer perceptron.

The teacher is an ONNX file, or a model folder of a repository (its ``config.pbtxt`` names the
inputs and outputs; its newest version holds ``model.onnx`` or a TorchScript ``model.pt``). Its
outputs over the data are the soft targets: logits, or probabilities (recognised by rows that
are non-negative and sum to 1), whose logarithms serve as logits. The student
(:func:`inferd.tools.optimize.students.classifier_student`) learns the teacher's distribution
softened by a temperature T (Kullback-Leibler divergence, scaled by T squared so its gradients
keep their size as T changes), plus cross-entropy on the labels when the data has them. Rows
are split once into training and held-out ones by a seeded permutation; the figures on the
held-out rows are the top-1 agreement with the teacher and, with labels, the accuracy of both.

The student is exported to ONNX with the teacher's input and output names, ending in a Softmax
when the teacher gives probabilities. Imports torch when imported.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.datatypes import from_dtype
from inferd.core.model_spec import TensorSpec
from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.distill import NoProgress, Progress
from inferd.tools.optimize.finetune import TrainingRows
from inferd.tools.optimize.prune import export_onnx
from inferd.tools.optimize.students import classifier_student, parse_classifier_spec

__all__ = [
    "ClassifierRun",
    "ClassifierSettings",
    "Teacher",
    "distill_classifier",
    "export_classifier",
    "load_classifier_teacher",
]


@dataclass(frozen=True)
class ClassifierSettings:
    epochs: int = 30
    batch_size: int = 64
    learning_rate: float = 3e-3
    temperature: float = 4.0
    soft_weight: float = 0.7  # share of the softened teacher loss when there are labels
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise InvalidArgumentError("the temperature must be above 0")
        if not 0.0 <= self.soft_weight <= 1.0:
            raise InvalidArgumentError("the soft-target weight must be between 0 and 1")
        if self.epochs < 1 or self.batch_size < 1:
            raise InvalidArgumentError("epochs and batch size must be at least 1")


@dataclass(frozen=True)
class Teacher:
    """A classifier to learn from: its one input, the output learnt, and how to run it."""

    source: str
    input: TensorSpec
    output: str
    run: Callable[[np.ndarray], np.ndarray]


@dataclass
class ClassifierRun:
    student: nn.Module
    teacher: Teacher
    probabilities: bool
    row_shape: tuple[int, ...]
    before: dict[str, float]
    after: dict[str, float]
    recipe: dict[str, object] = field(default_factory=dict)


def _onnx_teacher(path: Path, output: str | None, source: str) -> Teacher:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise InvalidArgumentError(f"{source}: classifier distillation takes models of one input")
    floats = [o.name for o in session.get_outputs() if o.type == "tensor(float)"]
    name = _output(output, floats, source)
    first = inputs[0]
    if first.type != "tensor(float)":
        raise InvalidArgumentError(f"{source}: input '{first.name}' is not float32")
    dims = tuple(d if isinstance(d, int) and d > 0 else -1 for d in first.shape[1:])
    spec = TensorSpec(first.name, from_dtype(np.dtype(np.float32)), dims)

    def run(rows: np.ndarray) -> np.ndarray:
        return np.asarray(session.run([name], {first.name: rows})[0])

    return Teacher(source, spec, name, run)


def _output(wanted: str | None, floats: list[str], source: str) -> str:
    if wanted is None:
        if not floats:
            raise InvalidArgumentError(f"{source}: has no float32 output to learn from")
        return floats[0]
    if wanted not in floats:
        raise InvalidArgumentError(
            f"{source}: has no float32 output '{wanted}' (float32 outputs: {', '.join(floats)})"
        )
    return wanted


def _torchscript_teacher(path: Path, spec: TensorSpec, output: str, source: str) -> Teacher:
    jit_load: Callable[..., Any] = torch.jit.load
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.9+ deprecates TorchScript
        module = jit_load(str(path), map_location="cpu").eval()

    def run(rows: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            result = module(torch.from_numpy(rows))
        first = result[0] if isinstance(result, tuple | list) else result
        return np.asarray(first.numpy())

    return Teacher(source, spec, output, run)


def load_classifier_teacher(path: Path, output: str | None = None) -> Teacher:
    """The teacher at ``path``: an ONNX file, or a repository's model folder."""
    if path.is_file() and path.suffix == ".onnx":
        return _onnx_teacher(path, output, str(path))
    config_file = path / "config.pbtxt"
    if not config_file.is_file():
        raise InvalidArgumentError(
            f"{path}: give an .onnx file, a model folder of a repository (with config.pbtxt), "
            "or a Hugging Face encoder folder (with config.json)"
        )
    spec = spec_from_proto(parse_pbtxt(config_file.read_text(), str(config_file)))
    versions = sorted(int(p.name) for p in path.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions:
        raise InvalidArgumentError(f"{path}: has no version folder (1/, 2/, ...)")
    version = path / str(versions[-1])
    names = [spec.default_model_filename] if spec.default_model_filename else []
    names += ["model.onnx", "model.pt"]
    model = next((version / n for n in names if (version / n).is_file()), None)
    if model is None:
        raise InvalidArgumentError(f"{version}: holds no model.onnx or model.pt")
    if model.suffix == ".onnx":
        return _onnx_teacher(model, output, str(path))
    if len(spec.inputs) != 1:
        raise InvalidArgumentError(f"{path}: classifier distillation takes models of one input")
    floats = [t.name for t in spec.outputs if t.datatype.name == "FP32"]
    if floats and floats[0] != spec.outputs[0].name:
        raise InvalidArgumentError(f"{path}: the TorchScript model's first output is not FP32")
    name = _output(output, floats[:1], str(path))
    return _torchscript_teacher(model, spec.inputs[0], name, str(path))


def _outputs(teacher: Teacher, rows: np.ndarray, batch: int = 256) -> np.ndarray:
    parts = [teacher.run(rows[i : i + batch]) for i in range(0, len(rows), batch)]
    out = np.concatenate(parts).astype(np.float32)
    return out.reshape(len(rows), -1)


def _is_probabilities(values: np.ndarray) -> bool:
    return bool(np.all(values >= 0) and np.allclose(values.sum(axis=1), 1.0, atol=1e-3))


def _figures(
    student: nn.Module, rows: torch.Tensor, teacher_top: np.ndarray, labels: np.ndarray | None
) -> dict[str, float]:
    with torch.inference_mode():
        top = student(rows).argmax(dim=1).numpy()
    figures = {"agreement": float(np.mean(top == teacher_top))}
    if labels is not None:
        figures["accuracy"] = float(np.mean(top == labels))
        figures["teacher_accuracy"] = float(np.mean(teacher_top == labels))
    return figures


def distill_classifier(
    teacher: Teacher,
    data: TrainingRows,
    spec_text: str,
    held_out: int,
    settings: ClassifierSettings,
    progress: Progress | None = None,
) -> ClassifierRun:
    """Train the student ``spec_text`` (``hidden=...``) on the teacher's outputs over ``data``
    (all rows but ``held_out``, which give the figures). KeyboardInterrupt passes through."""
    progress = progress or NoProgress()
    spec = parse_classifier_spec(spec_text)
    if teacher.input.name not in data.inputs:
        raise InvalidArgumentError(f"{data.source}: has no data for input '{teacher.input.name}'")
    rows = np.asarray(data.inputs[teacher.input.name], dtype=np.float32)
    if not 1 <= held_out < len(rows):
        raise InvalidArgumentError(
            f"{data.source}: {len(rows)} rows; the held-out count must be between 1 and "
            f"{len(rows) - 1}"
        )
    progress.phase("teacher outputs", 1)
    soft = _outputs(teacher, rows)
    progress.advance(1)
    probabilities = _is_probabilities(soft)
    logits = np.log(np.clip(soft, 1e-12, None)) if probabilities else soft
    labels = None if data.labels is None else np.asarray(data.labels).reshape(len(rows))
    if labels is not None and labels.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{data.source}: classifier labels must be integers")

    order = np.random.default_rng(settings.seed).permutation(len(rows))
    held, train = order[:held_out], order[held_out:]
    x = torch.from_numpy(rows)
    targets = torch.from_numpy(logits)
    classes = logits.shape[1]
    torch_labels = None if labels is None else torch.from_numpy(labels.astype(np.int64))
    features = int(np.prod(rows.shape[1:]))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)  # the student's first weights
        student = classifier_student(features, classes, spec)
    teacher_top = logits[held].argmax(axis=1)
    held_labels = None if labels is None else labels[held]
    before = _figures(student.eval(), x[held], teacher_top, held_labels)

    t = settings.temperature
    weight = settings.soft_weight if torch_labels is not None else 1.0
    optimizer = torch.optim.Adam(student.parameters(), lr=settings.learning_rate)
    generator = torch.Generator().manual_seed(settings.seed)
    train_index = torch.from_numpy(train)
    steps = math.ceil(len(train) / settings.batch_size) * settings.epochs
    progress.phase(f"training {spec.describe()}", steps)
    student.train()
    for _ in range(settings.epochs):
        shuffled = train_index[torch.randperm(len(train_index), generator=generator)]
        for start in range(0, len(shuffled), settings.batch_size):
            chosen = shuffled[start : start + settings.batch_size]
            scores = student(x[chosen])
            soft_loss = functional.kl_div(
                functional.log_softmax(scores / t, dim=1),
                functional.log_softmax(targets[chosen] / t, dim=1),
                log_target=True,
                reduction="batchmean",
            ) * (t * t)
            loss = weight * soft_loss
            if torch_labels is not None and weight < 1.0:
                loss = loss + (1 - weight) * functional.cross_entropy(scores, torch_labels[chosen])
            optimizer.zero_grad()
            torch.autograd.backward(loss)
            optimizer.step()
            progress.advance(1, float(loss.detach()))
    student.eval()
    after = _figures(student, x[held], teacher_top, held_labels)
    recipe: dict[str, object] = {
        "method": "knowledge distillation of a classifier (softened logits)",
        "teacher": teacher.source,
        "student": spec.describe(),
        "teacher_output": teacher.output + (" (probabilities)" if probabilities else " (logits)"),
        "temperature": t,
        "soft_weight": weight,
        "labels": torch_labels is not None,
        "epochs": settings.epochs,
        "batch_size": settings.batch_size,
        "learning_rate": settings.learning_rate,
        "seed": settings.seed,
        "train_rows": len(train),
        "held_out_rows": held_out,
        "data": data.source,
    }
    row_shape = tuple(int(d) for d in rows.shape[1:])
    return ClassifierRun(student, teacher, probabilities, row_shape, before, after, recipe)


class _WithSoftmax(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.inner(rows), dim=1)


def export_classifier(run: ClassifierRun, path: Path) -> None:
    """Write the student as ONNX with the teacher's input and output names and a dynamic batch
    (a Softmax at the end when the teacher gives probabilities)."""
    model = _WithSoftmax(run.student) if run.probabilities else run.student
    name, output = run.teacher.input.name, run.teacher.output
    example = (torch.zeros((2, *run.row_shape)),)
    axes: dict[str, dict[int, str]] = {name: {0: "batch"}, output: {0: "batch"}}
    export_onnx(model.eval(), example, path, [name], [output], axes)
