"""A short fine-tuning pass for a pruned network, with the loss measured before and after.

The objective follows the training data: labels that are integers train a classifier with
cross-entropy (on the logits before a final Softmax, when the graph ends with one), floating-point
labels a regressor with mean squared error; without labels the pruned network learns to give the
baseline's own outputs again (mean squared error to the baseline's logits, i.e. its outputs
before a final Softmax). The pass is bounded by ``epochs`` and ``max_steps`` and is
deterministic for a given seed.

Imports torch when imported: the pruning builders import it once they know torch is installed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch.nn import functional

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.torch_graph import GraphModule

__all__ = ["FineTuning", "Objective", "TrainingRows", "TuneResult", "fine_tune", "objective_for"]


class TrainingRows(Protocol):
    """What fine-tuning reads of a :class:`~inferd.tools.optimize.data.Dataset`."""

    @property
    def inputs(self) -> Mapping[str, np.ndarray[Any, Any]]: ...

    @property
    def labels(self) -> np.ndarray[Any, Any] | None: ...

    @property
    def source(self) -> str: ...


@dataclass(frozen=True)
class FineTuning:
    """Bounds of the pass: at most ``epochs`` passes over at most ``max_rows`` rows, and at most
    ``max_steps`` optimizer steps of ``batch_size`` rows (Adam, ``learning_rate``)."""

    epochs: int = 5
    max_steps: int = 400
    batch_size: int = 64
    learning_rate: float = 1e-3
    max_rows: int = 20_000
    seed: int = 0


@dataclass(frozen=True)
class TuneResult:
    objective: str
    loss_before: float
    loss_after: float
    epochs: int
    steps: int
    rows: int
    learning_rate: float

    def recipe(self) -> dict[str, object]:
        return {
            "objective": self.objective,
            "loss_before": round(self.loss_before, 6),
            "loss_after": round(self.loss_after, 6),
            "epochs": self.epochs,
            "steps": self.steps,
            "rows": self.rows,
            "learning_rate": self.learning_rate,
        }


@dataclass(frozen=True)
class Objective:
    """The tensor to train (``head``), its targets (one per row) and the loss."""

    description: str
    head: str
    targets: torch.Tensor
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def model_inputs(module: GraphModule, rows: TrainingRows, limit: int) -> list[torch.Tensor]:
    """The rows' arrays in the module's input order, as float32 tensors (at most ``limit``)."""
    missing = [name for name in module.input_names if name not in rows.inputs]
    if missing:
        raise InvalidArgumentError(
            f"{rows.source}: has no data for the model input(s) {', '.join(missing)}"
        )
    return [
        torch.from_numpy(np.array(rows.inputs[name][:limit], dtype=np.float32))
        for name in module.input_names
    ]


def _head(module: GraphModule, output: str) -> tuple[str, str | None]:
    """The tensor to train for ``output`` and the final normalisation it skips, if any."""
    step = module.producer(output)
    if step is not None and step.op in ("Softmax", "LogSoftmax"):
        return step.inputs[0], step.op
    return output, None


def _evaluate(
    module: GraphModule, objective: Objective, inputs: Sequence[torch.Tensor], batch: int
) -> float:
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(objective.targets), batch):
            part = [x[start : start + batch] for x in inputs]
            (value,) = module.run(part, [objective.head])
            target = objective.targets[start : start + batch]
            total += float(objective.loss(value, target)) * len(target)
            count += len(target)
    return total / max(count, 1)


def _batched(
    module: GraphModule, tensor: str, inputs: Sequence[torch.Tensor], batch: int
) -> torch.Tensor:
    with torch.no_grad():
        parts = [
            module.run([x[start : start + batch] for x in inputs], [tensor])[0]
            for start in range(0, len(inputs[0]), batch)
        ]
    return torch.cat(parts)


def objective_for(
    module: GraphModule,
    baseline: GraphModule,
    rows: TrainingRows,
    inputs: Sequence[torch.Tensor],
    output: str | None = None,
    batch: int = 256,
) -> Objective:
    """The loss fine-tuning minimises for these rows (see the module's docstring)."""
    if output is None:
        output = module.output_names[0]
    elif output not in module.output_names:
        raise InvalidArgumentError(
            f"the model has no output '{output}' (outputs: {', '.join(module.output_names)})"
        )
    head, normalised = _head(module, output)
    labels = rows.labels
    if labels is None:
        targets = _batched(baseline, head, inputs, batch)
        what = "logits" if normalised else f"output '{output}'"
        return Objective(f"MSE to the baseline's {what}", head, targets, functional.mse_loss)
    labels = np.asarray(labels)[: len(inputs[0])]
    if labels.dtype.kind in "iub":
        classes = torch.from_numpy(labels.reshape(len(labels)).astype(np.int64))
        if normalised == "LogSoftmax":
            return Objective("cross-entropy on the labels", output, classes, functional.nll_loss)
        return Objective("cross-entropy on the labels", head, classes, functional.cross_entropy)
    if labels.dtype.kind != "f":
        raise InvalidArgumentError(
            f"{rows.source}: labels of type {labels.dtype} fit neither a classifier (integers) "
            "nor a regressor (floats)"
        )
    values = torch.from_numpy(np.array(labels, dtype=np.float32))

    def mse(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return functional.mse_loss(prediction.reshape(target.shape), target)

    return Objective("MSE to the labels", output, values, mse)


def fine_tune(
    module: GraphModule,
    objective: Objective,
    inputs: Sequence[torch.Tensor],
    settings: FineTuning,
) -> TuneResult:
    """Train every parameter of ``module`` on ``objective`` within ``settings``' bounds.

    The module stays in evaluation mode (batch-norm statistics are kept; ONNX graphs hold no
    dropout), so only the weights move. KeyboardInterrupt passes through untouched.
    """
    rows = len(objective.targets)
    before = _evaluate(module, objective, inputs, 256)
    optimizer = torch.optim.Adam(
        [p for p in module.parameters() if p.requires_grad], lr=settings.learning_rate
    )
    order = torch.Generator().manual_seed(settings.seed)
    steps = epochs = 0
    module.eval()
    while epochs < settings.epochs and steps < settings.max_steps:
        epochs += 1
        shuffled = torch.randperm(rows, generator=order)
        for start in range(0, rows, settings.batch_size):
            if steps >= settings.max_steps:
                break
            chosen = shuffled[start : start + settings.batch_size]
            optimizer.zero_grad()
            (value,) = module.run([x[chosen] for x in inputs], [objective.head])
            loss = objective.loss(value, objective.targets[chosen])
            torch.autograd.backward(loss)
            optimizer.step()
            steps += 1
    after = _evaluate(module, objective, inputs, 256)
    return TuneResult(
        objective.description, before, after, epochs, steps, rows, settings.learning_rate
    )
