"""Knowledge distillation of a BERT-like sentence encoder into a student with fewer layers.

The recipe: the teacher is a Hugging Face model folder read offline (``local_files_only``); its
sentence embedding is what ``bench/export_minilm.py`` serves (mean pooling over the attention
mask, then L2 normalisation). The student is the teacher with fewer layers
(:func:`inferd.tools.optimize.students.encoder_student`), trained on unlabelled sentences to give
the teacher's embeddings: a cosine loss (``1 - cos``), or the mean squared error between the
pooled embeddings before normalisation, or both. The teacher's embeddings are computed once;
training uses AdamW with a linear warm-up and decay, batches of sentences of similar lengths,
no dropout (on 3,000 sentences it fit MiniLM's embeddings better without), and a fixed seed.
The figures are the cosine between student and teacher embeddings on held-out sentences, before
training (the student as taken from the teacher) and after.

The student is exported to ONNX with the served graph's interface: ``input_ids`` and
``attention_mask`` (INT64 [batch, seq]) to ``sentence_embedding`` (FP32 [batch, dim]).

Imports torch and transformers when imported: ``inferd distill`` imports it once they are known
to be installed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from inferd.errors import InternalError, InvalidArgumentError
from inferd.tools.optimize.corpus import Corpus
from inferd.tools.optimize.students import EncoderSpec, encoder_student

__all__ = [
    "LOSSES",
    "Agreement",
    "EncoderRun",
    "EncoderSettings",
    "NoProgress",
    "Progress",
    "SentenceEncoder",
    "distill_encoder",
    "export_encoder",
    "length_batches",
    "load_encoder_teacher",
]

LOSSES = ("cosine", "mse", "both")
_CHUNK_BATCHES = 50  # batches drawn together, then grouped by length


class Progress(Protocol):
    def phase(self, what: str, total: int) -> None: ...

    def advance(self, count: int = 1, loss: float | None = None) -> None: ...


class NoProgress:
    def phase(self, what: str, total: int) -> None:
        pass

    def advance(self, count: int = 1, loss: float | None = None) -> None:
        pass


@dataclass(frozen=True)
class EncoderSettings:
    epochs: int = 2
    batch_size: int = 32
    max_seq_len: int = 128
    learning_rate: float = 5e-4
    warmup: float = 0.05  # fraction of the steps
    loss: str = "cosine"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise InvalidArgumentError(f"loss must be one of {', '.join(LOSSES)}, not {self.loss}")
        for name in ("epochs", "batch_size", "max_seq_len"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"{name.replace('_', ' ')} must be at least 1")
        if self.max_seq_len < 2:
            raise InvalidArgumentError("max seq len must leave room for the special tokens")


@dataclass(frozen=True)
class Agreement:
    """Cosine similarity of student to teacher embeddings over held-out sentences."""

    mean_cosine: float
    min_cosine: float
    p05_cosine: float
    sentences: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "mean_cosine": round(self.mean_cosine, 6),
            "min_cosine": round(self.min_cosine, 6),
            "p05_cosine": round(self.p05_cosine, 6),
            "sentences": self.sentences,
        }


class SentenceEncoder(nn.Module):
    """A transformer's sentence embedding: mean pooling over the attention mask, L2-normalised."""

    def __init__(self, transformer: nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = self.transformer(input_ids=input_ids, attention_mask=attention_mask)[
            0
        ]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return functional.normalize(self.pooled(input_ids, attention_mask), p=2.0, dim=1)


@dataclass
class EncoderRun:
    student: SentenceEncoder
    tokenizer: Any
    before: Agreement
    after: Agreement
    recipe: dict[str, object] = field(default_factory=dict)


def load_encoder_teacher(folder: Path) -> tuple[Any, nn.Module]:
    """The tokenizer and model of a local Hugging Face folder (never a download)."""
    from transformers import AutoModel, AutoTokenizer

    if not (folder / "config.json").is_file():
        raise InvalidArgumentError(f"{folder}: not a Hugging Face model folder (no config.json)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModel.from_pretrained(
            str(folder), local_files_only=True, attn_implementation="eager"
        )
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"{folder}: cannot load the model: {exc}") from None
    return tokenizer, model.eval()


def _tokenize(tokenizer: Any, sentences: Sequence[str], max_len: int) -> list[list[int]]:
    encoded = tokenizer(list(sentences), truncation=True, max_length=max_len)
    return [list(ids) for ids in encoded["input_ids"]]


def _pad(rows: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(rows), width), dtype=torch.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.int64)
        mask[i, : len(row)] = 1
    return ids, mask


def length_batches(
    lengths: Sequence[int], size: int, generator: torch.Generator
) -> list[list[int]]:
    """Every index once, in batches of ``size`` (the last may be short): indices are shuffled,
    grouped by length within chunks of several batches (less padding), and the batches shuffled."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    batches: list[list[int]] = []
    chunk = size * _CHUNK_BATCHES
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i])
        batches += [part[i : i + size] for i in range(0, len(part), size)]
    shuffle = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffle]


def _embed(
    encoder: SentenceEncoder,
    tokens: Sequence[list[int]],
    pad_id: int,
    batch: int,
    progress: Progress,
    *,
    normalise: bool = False,
) -> torch.Tensor:
    """Pooled embeddings (L2-normalised when ``normalise``), rows in the order of ``tokens``."""
    order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
    out: torch.Tensor | None = None
    encoder.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            chosen = order[start : start + batch]
            ids, mask = _pad([tokens[i] for i in chosen], pad_id)
            pooled = encoder.pooled(ids, mask)
            if out is None:
                out = torch.empty((len(tokens), pooled.shape[1]), dtype=pooled.dtype)
            out[torch.tensor(chosen)] = pooled
            progress.advance(len(chosen))
    if out is None:
        raise InvalidArgumentError("no sentences to embed")
    out = out.clone()  # a normal tensor: one made under inference_mode cannot join autograd
    return functional.normalize(out) if normalise else out


def _agreement(student: torch.Tensor, teacher: torch.Tensor) -> Agreement:
    cosine = functional.cosine_similarity(student, teacher, dim=1).numpy()
    return Agreement(
        float(cosine.mean()),
        float(cosine.min()),
        float(np.percentile(cosine, 5)),
        int(cosine.size),
    )


def _loss(kind: str, pooled: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    cosine = 1.0 - functional.cosine_similarity(pooled, target, dim=1).mean()
    if kind == "cosine":
        return cosine
    mse = functional.mse_loss(pooled, target)
    return mse if kind == "mse" else cosine + mse


def _schedule(optimizer: torch.optim.Optimizer, total: int, warmup: float) -> Any:
    warm = max(1, math.ceil(total * warmup))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total - step) / max(1, total - warm))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def distill_encoder(
    teacher_dir: Path,
    corpus: Corpus,
    spec_text: str,
    settings: EncoderSettings,
    progress: Progress | None = None,
) -> EncoderRun:
    """Train the student ``spec_text`` (``layers=N``) of the encoder in ``teacher_dir`` on the
    corpus' training sentences; figures on its held-out ones. KeyboardInterrupt passes through."""
    from inferd.tools.optimize.students import parse_encoder_spec

    progress = progress or NoProgress()
    tokenizer, bert = load_encoder_teacher(teacher_dir)
    teacher_layers = int(getattr(bert.config, "num_hidden_layers", 0))
    spec: EncoderSpec = parse_encoder_spec(spec_text, teacher_layers)
    pad_id = int(tokenizer.pad_token_id or 0)
    teacher = SentenceEncoder(bert)
    student_bert, picked = encoder_student(bert, spec)
    student = SentenceEncoder(student_bert)

    train_tokens = _tokenize(tokenizer, corpus.train, settings.max_seq_len)
    held_tokens = _tokenize(tokenizer, corpus.held_out, settings.max_seq_len)
    batch = settings.batch_size
    progress.phase("teacher embeddings", len(train_tokens) + len(held_tokens))
    targets = _embed(teacher, train_tokens, pad_id, batch, progress)
    held_targets = _embed(teacher, held_tokens, pad_id, batch, progress, normalise=True)
    progress.phase("student before training", len(held_tokens))
    before = _agreement(
        _embed(student, held_tokens, pad_id, batch, progress, normalise=True), held_targets
    )
    if settings.loss == "cosine":
        targets = functional.normalize(targets)

    steps_per_epoch = math.ceil(len(train_tokens) / batch)
    total = steps_per_epoch * settings.epochs
    optimizer = torch.optim.AdamW(student.parameters(), lr=settings.learning_rate)
    schedule = _schedule(optimizer, total, settings.warmup)
    generator = torch.Generator().manual_seed(settings.seed)
    lengths = [len(t) for t in train_tokens]
    progress.phase(f"training {spec.describe()}", total)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)  # the caller's random state is restored after
        student.eval()  # no dropout: the student fits fixed targets, and fits them better so
        for _ in range(settings.epochs):
            for chosen in length_batches(lengths, batch, generator):
                ids, mask = _pad([train_tokens[i] for i in chosen], pad_id)
                loss = _loss(settings.loss, student.pooled(ids, mask), targets[chosen])
                optimizer.zero_grad()
                torch.autograd.backward(loss)
                optimizer.step()
                schedule.step()
                progress.advance(1, float(loss.detach()))
    student.eval()
    progress.phase("student after training", len(held_tokens))
    after = _agreement(
        _embed(student, held_tokens, pad_id, batch, progress, normalise=True), held_targets
    )
    recipe: dict[str, object] = {
        "method": "knowledge distillation of sentence embeddings",
        "teacher": str(teacher_dir),
        "student": spec.describe(),
        "teacher_layers": teacher_layers,
        "initialised_from_teacher_layers": picked,
        "loss": settings.loss,
        "epochs": settings.epochs,
        "batch_size": batch,
        "max_seq_len": settings.max_seq_len,
        "learning_rate": settings.learning_rate,
        "warmup": settings.warmup,
        "seed": settings.seed,
        "train_sentences": len(corpus.train),
        "held_out_sentences": len(corpus.held_out),
        "corpus": corpus.source,
        "pooling": "mean over the attention mask, L2-normalised",
    }
    return EncoderRun(student, tokenizer, before, after, recipe)


def export_encoder(run: EncoderRun, path: Path, max_seq_len: int) -> float:
    """Write the student as ONNX (opset 17) with the served encoder's interface; the largest
    difference between ONNX Runtime and torch on a padded check batch."""
    import onnxruntime as ort

    tokenizer = run.tokenizer
    sentences = [
        "A short one.",
        "A longer sentence, so that the first row of the batch carries padding in its mask.",
    ]
    encoded = tokenizer(sentences, padding=True, truncation=True, max_length=max_seq_len)
    ids = torch.tensor(encoded["input_ids"], dtype=torch.int64)
    mask = torch.tensor(encoded["attention_mask"], dtype=torch.int64)
    encoder = run.student.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracing notes
        torch.onnx.export(
            encoder,
            (ids, mask),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["sentence_embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "seq"},
                "attention_mask": {0: "batch", 1: "seq"},
                "sentence_embedding": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )
    check = tokenizer(
        [*sentences, "Three rows, padded to the longest length the encoder takes."],
        padding="max_length",
        truncation=True,
        max_length=max_seq_len,
    )
    check_ids = np.asarray(check["input_ids"], dtype=np.int64)
    check_mask = np.asarray(check["attention_mask"], dtype=np.int64)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": check_ids, "attention_mask": check_mask})[0]
    with torch.no_grad():
        want = encoder(torch.from_numpy(check_ids), torch.from_numpy(check_mask)).numpy()
    error = float(np.max(np.abs(got - want)))
    if error > 1e-3:
        raise InternalError(f"the exported student disagrees with torch (max abs error {error})")
    return error
