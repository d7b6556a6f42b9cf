"""Model warm-up: run the config's ``model_warmup`` samples on every instance before READY, or,
for a model without them, the requests it answered last (``repository/recent.py``).

A sample runs straight on each instance, as Triton runs it: no scheduler, so a sequence model's
warm-up takes no sequence slot and leaves no implicit state behind. A sample may list a sequence
model's control and state inputs (Triton's way); those it leaves out are filled so that each
row is a whole one-request sequence: START, READY and END true, the correlation ids 1, 2, ...
(as text for a string CORRID), and every implicit state at its initial value.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import ModelInstance
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec, WarmupInputSpec, WarmupSpec
from inferd.core.sequence_spec import ControlKind
from inferd.core.validation import validate_request
from inferd.errors import ConfigError, InferdError, ModelLoadError
from inferd.repository.paths import resolve_inside
from inferd.scheduling.state import initial_value

_log = logging.getLogger("inferd.repository")

WARMUP_DIR = "warmup"


def _data_file(spec: ModelSpec, name: str, item: WarmupInputSpec, model_dir: Path) -> Path:
    """The warm-up file of input ``name``, which must lie in the model's warmup directory."""
    return resolve_inside(
        model_dir / WARMUP_DIR,
        item.input_data_file,
        f"warmup input '{name}' of model '{spec.name}': input_data_file",
    )


def _sample(
    spec: ModelSpec,
    name: str,
    item: WarmupInputSpec,
    batch: int,
    model_dir: Path,
    rng: np.random.Generator,
) -> np.ndarray[Any, Any]:
    dtype = item.datatype
    dims = list(item.dims)
    if any(d < 0 for d in dims):
        raise ConfigError(f"warmup input '{name}' of model '{spec.name}' has a variable dim {dims}")
    shape = ([batch] if spec.max_batch_size > 0 else []) + dims
    count = int(np.prod(shape)) if shape else 1
    which = item.source
    if dtype.is_bytes:
        if which == "input_data_file":
            raw = _data_file(spec, name, item, model_dir).read_bytes()
            values = [raw] * count
        else:
            values = [
                b"0" if which == "zero_data" else bytes(rng.integers(48, 58, 4).tolist())
            ] * count
        out = np.empty(count, dtype=object)
        out[:] = values
        return out.reshape(shape)
    if which == "input_data_file":
        path = _data_file(spec, name, item, model_dir)
        data = np.fromfile(path, dtype=dtype.dtype)
        if data.size < count:
            raise ConfigError(
                f"warmup file '{path}' holds {data.size} elements, input '{name}' needs {count}"
            )
        return data[:count].reshape(shape)
    if which == "random_data":
        if dtype.dtype.kind == "f":
            return rng.random(shape).astype(dtype.dtype)
        if dtype.dtype.kind == "b":
            return rng.integers(0, 2, shape).astype(dtype.dtype)
        return rng.integers(0, 8, shape).astype(dtype.dtype)
    return np.zeros(shape, dtype=dtype.dtype)


def _check_names(spec: ModelSpec, warmup: WarmupSpec) -> None:
    """Refuse a sample input that is not an input the model receives (a name left as it is
    would be dropped or fail in the runtime with a less clear message)."""
    known = [t.name for t in spec.inputs]
    seq = spec.sequence_batching
    if seq is not None:
        known += [c.name for c in seq.controls] + [s.input_name for s in seq.states]
    for name in warmup.inputs:
        if name not in known:
            raise ConfigError(
                f"warmup '{warmup.name}' of model '{spec.name}' gives input '{name}', which the "
                f"model does not have; its inputs: {', '.join(known)}"
            )


def sequence_fill(
    spec: ModelSpec, listed: Sequence[str], batch: int, model_dir: Path
) -> dict[str, np.ndarray[Any, Any]]:
    """The control and state inputs of a sequence model that a warm-up sample does not list:
    each of the ``batch`` rows a one-request sequence (START, READY and END true, correlation
    ids 1..batch) with every implicit state at its initial value. ``{}`` for other models."""
    seq = spec.sequence_batching
    if seq is None:
        return {}
    batched = spec.max_batch_size > 0
    shape = (batch, 1) if batched else (1,)
    filled: dict[str, np.ndarray[Any, Any]] = {}
    for control in seq.controls:
        if control.name in listed:
            continue
        dtype = control.datatype.dtype
        if control.kind is ControlKind.CORRID:
            ids = np.arange(1, shape[0] + 1).reshape(shape)
            if control.datatype.is_bytes:
                value = np.array([str(i).encode() for i in ids.flat], dtype=object).reshape(shape)
            else:
                value = ids.astype(dtype)
        else:  # START, READY and END all true: a whole sequence in one request
            value = np.full(shape, control.true_value, dtype=dtype)
        filled[control.name] = value
    for state in seq.states:
        if state.input_name not in listed:
            initial = initial_value(state, model_dir, batched)
            filled[state.input_name] = np.repeat(initial, batch, axis=0) if batched else initial
    return filled


def warm_up(spec: ModelSpec, instances: Sequence[ModelInstance], model_dir: Path) -> None:
    """Run each warm-up sample ``count`` times (at least once) on every instance, a sample of
    ``batch_size`` 0 not at all (Triton skips it; a warning says so). Blocking."""
    rng = np.random.default_rng(0)
    for warmup in spec.warmups:
        if warmup.batch_size <= 0:
            _log.warning(
                "warmup '%s' of model '%s' has batch_size 0 and is skipped, as Triton skips "
                "it; set batch_size: 1 or more to run it",
                warmup.name,
                spec.name,
            )
            continue
        _check_names(spec, warmup)
        batch = warmup.batch_size
        try:
            inputs = {
                name: _sample(spec, name, item, batch, model_dir, rng)
                for name, item in warmup.inputs.items()
            }
            inputs.update(sequence_fill(spec, list(warmup.inputs), batch, model_dir))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"warmup '{warmup.name}' cannot build its inputs: {exc}") from exc
        request = InferRequest(spec.name, inputs, id=f"warmup:{warmup.name}")
        for instance in instances:
            for _ in range(max(1, warmup.count)):
                (result,) = instance.execute([request])
                if isinstance(result, InferdError):
                    raise ConfigError(f"warmup '{warmup.name}' failed: {result}")


def warm_up_with_requests(
    spec: ModelSpec, instances: Sequence[ModelInstance], requests: Sequence[InferRequest]
) -> int:
    """Run each of ``requests`` (requests an earlier version answered) once on every instance;
    return how many were run. A request the configuration ``spec`` no longer accepts (an input
    renamed, a smaller batch) is left out; one the model fails on fails the warm-up. Blocking."""
    fitting: list[InferRequest] = []
    for request in requests:
        try:
            validate_request(request, spec)
        except InferdError:
            continue
        fitting.append(InferRequest(spec.name, request.inputs, id="warmup:recent"))
    for instance in instances:
        for number, request in enumerate(fitting, start=1):
            (result,) = instance.execute([request])
            if isinstance(result, InferdError):
                raise ModelLoadError(
                    f"warm-up with recent request {number} of {len(fitting)} failed: {result}"
                )
    return len(fitting)
