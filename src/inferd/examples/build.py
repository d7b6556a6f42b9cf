"""Build (or rebuild) inferd's example model repository.

The repository is laid out the way Triton expects: one folder per model holding a
``config.pbtxt`` and a version folder ``1/`` with the model file. The graphs are written with
``onnx.helper`` (the three ``simple*`` models) or trained and exported with scikit-learn and
skl2onnx (``digits``); ``digits_cnn`` is a small CNN trained with PyTorch and written as ONNX,
so that every model of the repository serves with the default install. The same CNN as
TorchScript, ``digits_cnn_torch`` (:data:`TORCH_MODEL_NAMES`), goes to a repository of its own
(``examples/models-torch``), since it serves only where PyTorch is installed. Both are skipped
with a message when PyTorch is not installed. Every model is run once through its
runtime before it is moved into place; a wrong answer stops the build. The example language
model ``tiny_llm`` (:data:`LLM_MODEL_NAMES`, :mod:`inferd.examples.tiny_llm`) is trained into a
repository of its own as well (``--llm-output``, ``examples/models-llm`` in a clone), since it
serves only on the ``llm`` backend; a ``tiny_llm`` already built from the same seed and recipe
is kept as it is.

Run it as ``python -m inferd.examples.build --output examples/models --force``, or call
:func:`build_examples` from Python.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from inferd.errors import AlreadyExistsError, UnavailableError
from inferd.examples.common import Built, ExampleBuildError, ExampleSkipped
from inferd.examples.digits_models import build_digits, build_python, digits_split
from inferd.examples.embedding_models import build_minilm_embeddings
from inferd.examples.ensemble_models import build_pipeline, build_postprocess
from inferd.examples.names import EXAMPLE_COUNT, MODEL_NAMES, TORCH_MODEL_NAMES
from inferd.examples.sequence_models import (
    build_signal_filter,
    build_simple_dyna_sequence,
    build_simple_sequence,
    build_simple_string_dyna_sequence,
)
from inferd.examples.simple_models import build_simple
from inferd.examples.streaming_models import build_streaming
from inferd.examples.tabular_models import build_fraud_xgboost, build_wine_pipeline, fraud_split
from inferd.examples.tiny_llm import LLM_MODEL_NAMES, build_tiny_llm, tiny_llm_is_built
from inferd.examples.torch_models import build_digits_cnn, build_digits_cnn_torch

__all__ = [
    "EXAMPLE_COUNT",
    "LLM_MODEL_NAMES",
    "MODEL_NAMES",
    "TORCH_MODEL_NAMES",
    "ExampleBuildError",
    "ExampleSkipped",
    "build_examples",
    "digits_split",
    "fraud_split",
    "main",
]

_BUILDERS: dict[str, Callable[[str, Path], Built]] = {
    "simple": build_simple,
    "simple_int8": build_simple,
    "simple_string": build_simple,
    "digits": build_digits,
    "simple_identity": build_python,
    "digits_preprocess": build_python,
    "digits_postprocess": build_postprocess,
    "digits_pipeline": build_pipeline,
    "digits_cnn": build_digits_cnn,
    "fraud_xgboost": build_fraud_xgboost,
    "wine_pipeline": build_wine_pipeline,
    "simple_sequence": build_simple_sequence,
    "simple_dyna_sequence": build_simple_dyna_sequence,
    "simple_string_dyna_sequence": build_simple_string_dyna_sequence,
    "signal_filter": build_signal_filter,
    "repeat_int32": build_streaming,
    "bls_router": build_streaming,
    "digits_cnn_torch": build_digits_cnn_torch,
    # built as its own step (python -m inferd.examples.embedding_models)
    "minilm_embeddings": build_minilm_embeddings,
    "tiny_llm": build_tiny_llm,
}
#: builders whose output is kept when it is already there and current (checked by these)
_UP_TO_DATE: dict[str, Callable[[Path], bool]] = {"tiny_llm": tiny_llm_is_built}


# --------------------------------------------------------------------------------------------
# the driver


def _folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _human(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB"


class _Progress:
    """A tqdm bar on a terminal (when tqdm is installed); elsewhere (a pipe, a log) only the line
    of each model once it is built, never a bar redrawn at every step."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._enabled = enabled
        self._bar: Any = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self._bar = tqdm(total=total, desc="building examples", unit="model")

    def start(self, name: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(name)

    def finish(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line)
            self._bar.update(1)
        elif self._enabled:
            print(line, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str("")
            self._bar.close()


def build_examples(
    output: Path,
    *,
    force: bool = False,
    progress: bool = True,
    names: Sequence[str] = MODEL_NAMES,
) -> list[str]:
    """Write the example models ``names`` (by default :data:`MODEL_NAMES`, the repository that
    serves without PyTorch; :data:`TORCH_MODEL_NAMES` for the one that needs it) into the
    repository folder ``output`` and return the names of those built.

    Models are built and checked in a scratch folder inside ``output`` and moved into place only
    when they pass, so a failed build leaves nothing half-written behind. An existing model
    folder is replaced only when ``force`` is true; otherwise :class:`AlreadyExistsError` is
    raised before anything is written. Other folders in ``output`` are never touched. A model
    that records how it was built (``tiny_llm``) is kept, unless ``force``, when that record
    matches what would be built now.
    """
    output = Path(output)
    unknown = [name for name in names if name not in _BUILDERS]
    if unknown:
        raise ExampleBuildError(f"no example model is called {', '.join(unknown)}")
    current = {
        name
        for name in names
        if not force and name in _UP_TO_DATE and _UP_TO_DATE[name](output / name)
    }
    clashes = [name for name in names if name not in current and (output / name).exists()]
    if clashes and not force:
        raise AlreadyExistsError(
            f"{', '.join(clashes)} already exist in {output}; pass force=True (--force) "
            "to replace them"
        )
    output.mkdir(parents=True, exist_ok=True)

    bar = _Progress(len(names), progress)
    built: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix=".inferd-build-", dir=output) as scratch:
            for name in names:
                bar.start(name)
                if name in current:
                    bar.finish(f"{name}: already built (same seed and recipe), kept")
                    continue
                staged = Path(scratch) / name
                try:
                    result = _BUILDERS[name](name, staged)
                except ExampleSkipped as skipped:
                    bar.finish(f"{name}: skipped, {skipped}")
                    continue
                target = output / name
                if target.exists():
                    shutil.rmtree(target)
                staged.rename(target)
                built.append(name)
                line = f"{name}: {_human(_folder_size(target))}"
                bar.finish(f"{line}, {result.note}" if result.note else line)
    finally:
        bar.close()
    return built


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferd.examples.build",
        description=f"Build inferd's {EXAMPLE_COUNT} example models "
        f"({', '.join(MODEL_NAMES)} into --output; {', '.join(TORCH_MODEL_NAMES)}, which needs "
        "PyTorch to serve, into --torch-output) and check every model on known inputs.",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("examples/models"),
        help="repository folder to write into (default: examples/models)",
    )
    parser.add_argument(
        "--torch-output",
        type=Path,
        metavar="DIR",
        help="also build the examples that need PyTorch to serve "
        f"({', '.join(TORCH_MODEL_NAMES)}) into this repository folder "
        "(examples/models-torch in a clone)",
    )
    parser.add_argument(
        "--llm-output",
        type=Path,
        metavar="DIR",
        help="also train the example language model for the llm backend "
        f"({', '.join(LLM_MODEL_NAMES)}; needs PyTorch, transformers and tokenizers) into this "
        "repository folder (examples/models-llm in a clone); one already built from the same "
        "seed and recipe is kept",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace example models that already exist"
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")
    args = parser.parse_args(argv)
    try:
        names = build_examples(args.output, force=args.force, progress=not args.quiet)
        if args.torch_output is not None:
            torch_names = build_examples(
                args.torch_output,
                force=args.force,
                progress=not args.quiet,
                names=TORCH_MODEL_NAMES,
            )
        if args.llm_output is not None:
            llm_names = build_examples(
                args.llm_output, force=args.force, progress=not args.quiet, names=LLM_MODEL_NAMES
            )
    except (AlreadyExistsError, UnavailableError, ExampleBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"wrote {len(names)} models to {args.output}")
        if args.torch_output is not None:
            print(f"wrote {len(torch_names)} models to {args.torch_output}")
        if args.llm_output is not None:
            print(f"wrote {len(llm_names)} models to {args.llm_output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
