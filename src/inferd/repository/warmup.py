"""Model warm-up: run the config's ``model_warmup`` samples on every instance before READY."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import ModelInstance
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec, WarmupInputSpec
from inferd.errors import ConfigError, InferdError
from inferd.repository.paths import resolve_inside

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


def warm_up(spec: ModelSpec, instances: Sequence[ModelInstance], model_dir: Path) -> None:
    """Run each warm-up sample ``count`` times (at least once) on every instance. Blocking."""
    rng = np.random.default_rng(0)
    for warmup in spec.warmups:
        batch = max(1, warmup.batch_size)
        try:
            inputs = {
                name: _sample(spec, name, item, batch, model_dir, rng)
                for name, item in warmup.inputs.items()
            }
        except (OSError, ValueError) as exc:
            raise ConfigError(f"warmup '{warmup.name}' cannot build its inputs: {exc}") from exc
        request = InferRequest(spec.name, inputs, id=f"warmup:{warmup.name}")
        for instance in instances:
            for _ in range(max(1, warmup.count)):
                (result,) = instance.execute([request])
                if isinstance(result, InferdError):
                    raise ConfigError(f"warmup '{warmup.name}' failed: {result}")
