"""Calibration and evaluation data for ``inferd optimize`` on the bundled examples.

    python -m inferd.examples.optimize_data digits_cnn DIR

writes ``DIR/calibration.npz`` (the training split's images, which the model was fitted on and
production images resemble) and ``DIR/eval.npz`` (the held-out images with their ``label``), in
the model's input layout, from scikit-learn's bundled digits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from inferd.examples.digits_models import digits_split

__all__ = ["write_digits_data"]


def write_digits_data(folder: Path, input_name: str, shape: tuple[int, ...]) -> tuple[Path, Path]:
    """``calibration.npz`` and ``eval.npz`` for a digits model whose input is ``input_name`` of
    ``shape`` per image (``(64,)`` for ``digits``, ``(1, 8, 8)`` for ``digits_cnn``)."""
    x_train, x_test, _, y_test = digits_split()
    folder.mkdir(parents=True, exist_ok=True)
    calibration = folder / "calibration.npz"
    evaluation = folder / "eval.npz"
    np.savez(calibration, **{input_name: x_train.reshape(-1, *shape)})
    np.savez(evaluation, **{input_name: x_test.reshape(-1, *shape), "label": y_test})
    return calibration, evaluation


_MODELS = {"digits_cnn": ("INPUT__0", (1, 8, 8)), "digits": ("input", (64,))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferd.examples.optimize_data",
        description="Write calibration.npz and eval.npz for inferd optimize on an example model.",
    )
    parser.add_argument("model", choices=sorted(_MODELS))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    name, shape = _MODELS[args.model]
    for path in write_digits_data(args.folder, name, shape):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
