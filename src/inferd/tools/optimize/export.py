"""A PyTorch model exported to ONNX, as the baseline the ONNX candidates start from.

The exported model answers the same requests as the served one: its inputs and outputs keep
the served names (Triton's ``INPUT__0`` / ``OUTPUT__0`` for ``pytorch_libtorch`` models) and the
batch dimension stays dynamic. Which exporter runs depends on the model (torch 2.13):

- an ``nn.Module`` or a ``torch.export`` program (``model.pt2``) goes through the
  ``torch.export``-based exporter (``torch.onnx.export(..., dynamo=True)``, which needs
  ``onnxscript``); a module it cannot export (one that calls TorchScript inside, say) is
  recorded by the TorchScript-based exporter instead;
- a TorchScript file (``model.pt``) cannot: ``torch.export`` does not take a ScriptModule, in
  either strict or non-strict mode. It goes through the TorchScript-based exporter
  (``dynamo=False``), which torch 2.13 keeps though deprecated, and which records the scripted
  graph as it runs on the sample.

The ONNX model's outputs are what ``forward`` returns, in its order, named after the served
outputs (:func:`returned_names`). It is then run on the sample rows, and on a single row to
prove the batch dimension is free, and compared with torch's own answers.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import UnavailableError
from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.verify import (
    EXACT,
    INSTALL_HINT,
    Tolerance,
    check_agreement,
    head_rows,
    onnx_session,
    run_onnx,
)

__all__ = [
    "EXPORT_OPSET",
    "build_onnx_baseline",
    "forward_order",
    "output_positions",
    "returned_names",
]

log = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]

#: the ONNX opset both exporters write (ONNX Runtime and OpenVINO read it)
EXPORT_OPSET = 18

_INDEXED = re.compile(r"^(.*)__(\d+)$")


def _index(name: str) -> int | None:
    match = _INDEXED.match(name)
    return int(match.group(2)) if match else None


def forward_order(names: Sequence[str]) -> list[str]:
    """Served input names in ``forward()``'s argument order: by the ``__<index>`` suffix when
    every name has one (Triton's convention), else as given (names after the arguments)."""
    indices = [_index(n) for n in names]
    if all(i is not None for i in indices):
        return [n for _, n in sorted(zip(indices, names, strict=True), key=lambda p: p[0] or 0)]
    return list(names)


def output_positions(names: Sequence[str]) -> list[int]:
    """Which element of a returned tuple each served output is: its ``__<index>`` suffix, or
    its position among the outputs."""
    return [i if (i := _index(n)) is not None else p for p, n in enumerate(names)]


def returned_names(result: Any, output_names: Sequence[str]) -> list[str]:
    """A name for every tensor ``forward`` returns, in the order the exporters flatten them:
    a dict's keys; a tuple's elements named by the served outputs' positions
    (:func:`output_positions`), the others ``unserved__<index>``; a lone tensor the one served
    output. Raises :class:`CandidateSkipped` for results the exporters would not name so."""
    served = list(output_names)
    if isinstance(result, dict):
        names = [str(key) for key in result]
        values = list(result.values())
    elif isinstance(result, (tuple, list)):
        by_position = dict(zip(output_positions(served), served, strict=True))
        names = [by_position.get(i, f"unserved__{i}") for i in range(len(result))]
        values = list(result)
    else:
        if len(served) != 1:
            raise CandidateSkipped(
                f"the model returns one tensor but {len(served)} outputs are served"
            )
        return served
    if not all(hasattr(v, "shape") for v in values):
        raise CandidateSkipped(
            "the model returns nested values; only tensors, or a tuple or dict of tensors, "
            "can be exported with their served names"
        )
    missing = [name for name in served if name not in names]
    if missing:
        raise CandidateSkipped(
            f"the served output(s) {', '.join(repr(m) for m in missing)} are not among what "
            f"the model returns ({', '.join(names)})"
        )
    return names


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise UnavailableError(f"PyTorch is not installed: {INSTALL_HINT}") from None
    return torch


def _load(model: Path) -> tuple[Any, str]:
    """What a model file holds, and its kind: ``torchscript`` or ``program``."""
    torch = _torch()
    try:
        if model.suffix == ".pt2":
            return torch.export.load(str(model)), "program"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is deprecated
            return torch.jit.load(str(model), map_location="cpu"), "torchscript"
    except Exception as exc:
        raise CandidateSkipped(f"PyTorch could not load {model}: {exc}") from exc


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Torch's exporters warn about their own internals (deprecations, axis names, optional
    torchvision ops): nothing the user can act on, and errors where warnings are errors."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for category in (DeprecationWarning, FutureWarning, UserWarning):
                warnings.simplefilter("ignore", category)
            yield
    finally:
        logger.setLevel(level)


def _export(
    model: Any,
    kind: str,
    args: tuple[Any, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
) -> str:
    """Write the ONNX file; returns which exporter wrote it."""
    torch = _torch()
    if kind == "torchscript":
        _export_torchscript(model, args, path, input_names, output_names)
        return "torchscript"
    try:
        import onnxscript  # noqa: F401  (the dynamo exporter writes ONNX through it)
    except ImportError:
        raise UnavailableError(
            f"exporting a PyTorch module to ONNX needs onnxscript: {INSTALL_HINT}"
        ) from None
    # a program keeps the dynamic dimensions it was exported with
    batch = torch.export.Dim("batch")
    shapes = None if kind == "program" else tuple({0: batch} for _ in args)
    try:
        with _quiet_exporter(), torch.no_grad():
            torch.onnx.export(
                model,
                args,
                str(path),
                input_names=input_names,
                output_names=output_names,
                dynamic_shapes=shapes,
                opset_version=EXPORT_OPSET,
                dynamo=True,
                verbose=False,
            )
    except Exception as exc:
        if kind == "program":
            raise
        # e.g. a module that calls TorchScript inside: record it as it runs instead
        log.info("torch.export could not export the module (%s); recording it instead", exc)
        _export_torchscript(model, args, path, input_names, output_names)
        return "torchscript"
    return "torch.export"


def _export_torchscript(
    module: Any, args: tuple[Any, ...], path: Path, input_names: list[str], output_names: list[str]
) -> None:
    torch = _torch()
    axes = {name: {0: "batch"} for name in [*input_names, *output_names]}
    with _quiet_exporter(), torch.no_grad():
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=axes,
            opset_version=EXPORT_OPSET,
            dynamo=False,
        )


def _two_rows(sample: Mapping[str, Array]) -> dict[str, Array]:
    """At least two rows: torch.export takes a dimension of size 1 for a constant."""
    rows = head_rows(sample)
    return {name: np.concatenate([a, a]) if a.shape[0] == 1 else a for name, a in rows.items()}


def build_onnx_baseline(
    model: Path | Any,
    out_dir: Path,
    *,
    sample: Mapping[str, Array],
    output_names: Sequence[str],
    tolerance: Tolerance = EXACT,
    parent: str | None = None,
) -> Candidate:
    """Export a PyTorch model (a TorchScript ``.pt`` / ``torch.export`` ``.pt2`` file, or an
    ``nn.Module``) to ``<out_dir>/baseline-onnx/model.onnx``.

    ``sample`` holds a few input rows keyed by the served input names, in ``forward()``'s
    argument order (:func:`forward_order`); ``output_names`` are the served outputs, each
    picked from what ``forward`` returns as the pytorch backend does (a dict by key, a tuple
    by ``__<index>`` suffix or position, a single tensor).
    """
    torch = _torch()
    if isinstance(model, Path):
        loaded, kind = _load(model)
        origin = str(model)
    else:
        loaded = model
        kind = "torchscript" if isinstance(model, torch.jit.ScriptModule) else "module"
        origin = type(model).__name__
        model.eval()
    runnable = loaded.module() if kind == "program" else loaded
    feeds = _two_rows(sample)
    input_names = list(feeds)
    args = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in feeds.values())
    try:
        with torch.inference_mode():
            result = runnable(*args)
    except Exception as exc:
        raise CandidateSkipped(f"{origin} does not run on the sample rows: {exc}") from exc
    names = returned_names(result, output_names)
    flat = list(result.values()) if isinstance(result, dict) else result
    flat = flat if isinstance(flat, (tuple, list)) else [flat]
    returned = {
        name: value.detach().numpy().copy() for name, value in zip(names, flat, strict=True)
    }
    want = {name: returned[name] for name in output_names}
    name = "baseline-onnx"
    path = out_dir / name / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        exporter = _export(loaded, kind, args, path, input_names, names)
    except UnavailableError:
        raise
    except Exception as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        raise CandidateSkipped(
            f"PyTorch could not export {origin} to ONNX: {lines[-1] if lines else exc}"
        ) from exc
    try:
        session = onnx_session(path)
        got = run_onnx(session, feeds, list(output_names))
        first = run_onnx(session, {k: v[:1] for k, v in feeds.items()}, list(output_names))
    except Exception as exc:
        raise CandidateSkipped(f"the exported ONNX model does not run: {exc}") from exc
    found = check_agreement(want, got, tolerance, "the exported ONNX model")
    check_agreement(
        {k: v[:1] for k, v in want.items()}, first, tolerance, "the exported model on one row"
    )
    return Candidate(
        name=name,
        kind="baseline-onnx",
        path=path,
        recipe={
            "method": f"torch.onnx.export ({exporter})",
            "opset": EXPORT_OPSET,
            "inputs": input_names,
            "outputs": list(output_names),
            "max_abs_error": max(a.max_abs_error for a in found),
        },
        notes=(
            f"Exported from {'TorchScript' if kind == 'torchscript' else 'PyTorch'} with the "
            f"{exporter}-based exporter, dynamic batch dimension, served names kept.",
        ),
        parent=parent,
    )
