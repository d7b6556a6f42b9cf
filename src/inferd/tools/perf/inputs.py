"""The input data of a load test: what every request carries, built once before the load starts.

``--input-data`` takes perf_analyzer's values: ``random`` (the default; one seeded random sample
per input, reused by every request, as perf_analyzer does), ``zero``, a perf_analyzer JSON file,
a directory of raw binary files named after the inputs, and two more: an ``.npz`` archive and a
``.parquet`` table (see :mod:`inferd.tools.perf.input_files`).

A request's tensors hold one sample without the batch dimension; :func:`batch_tensors` repeats
it to ``-b`` rows for a batching model. Variable dimensions (-1) need ``--shape NAME:D1,D2``
unless the data file gives the shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.shapes import Shapes, fits, numpy_dtype, resolve_shape
from inferd.tools.perf.transport import ModelInfo, RequestData, TensorInfo

# perf_analyzer's alphabet for random strings
STRING_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ1234567890 .?!"
DEFAULT_STRING_LENGTH = 128
RANDOM_INT_HIGH = 100  # random integers are drawn from [0, 100): valid as counts, ids, indices


@dataclass(frozen=True)
class InputData:
    """The requests to send, as streams (a sequence model plays one stream per sequence).

    ``random``, ``zero``, ``.npz`` and ``.parquet`` give one stream; a perf_analyzer JSON file
    whose ``data`` is a list of lists gives one stream per inner list.
    """

    streams: tuple[tuple[RequestData, ...], ...]

    @property
    def requests(self) -> list[RequestData]:
        """Every request, stream after stream."""
        return [request for stream in self.streams for request in stream]


def parse_shape_option(text: str) -> tuple[str, tuple[int, ...]]:
    """``"NAME:D1,D2"`` (the ``--shape`` flag) as ``("NAME", (D1, D2))``."""
    name, sep, dims = text.rpartition(":")
    if not sep or not name:
        raise InvalidArgumentError(
            f"--shape {text!r}: expected NAME:D1,D2,... (e.g. --shape INPUT0:3,224,224)"
        )
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
    except ValueError:
        raise InvalidArgumentError(
            f"--shape {text!r}: the dimensions must be integers separated by commas"
        ) from None
    if any(d < 0 for d in shape):
        raise InvalidArgumentError(f"--shape {text!r}: dimensions cannot be negative")
    return name, shape


def parse_shape_options(texts: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Every ``--shape`` flag as one mapping (a name given twice is an error)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in texts:
        name, shape = parse_shape_option(text)
        if name in shapes:
            raise InvalidArgumentError(f"--shape given twice for input '{name}'")
        shapes[name] = shape
    return shapes


def check_shape_names(model: ModelInfo, shapes: Shapes) -> None:
    """Refuse a ``--shape`` that names no input of the model."""
    names = {t.name for t in model.inputs}
    for name in shapes:
        if name not in names:
            raise InvalidArgumentError(
                f"--shape names '{name}', but model '{model.name}' has no such input "
                f"(its inputs: {', '.join(sorted(names))})"
            )


def random_strings(
    rng: np.random.Generator, count: int, length: int, fixed: str | None = None
) -> np.ndarray:
    """``count`` BYTES elements: ``fixed`` repeated, or random strings of ``length`` characters
    from perf_analyzer's alphabet."""
    out = np.empty(count, dtype=object)
    if fixed is not None:
        out[:] = [fixed.encode()] * count
        return out
    alphabet = np.frombuffer(STRING_CHARACTERS.encode(), dtype=np.uint8)
    codes = alphabet[rng.integers(0, len(alphabet), size=(count, length))]
    out[:] = [row.tobytes() for row in codes]
    return out


def generated_tensor(
    tensor: TensorInfo,
    shape: tuple[int, ...],
    rng: np.random.Generator | None,
    *,
    string_length: int = DEFAULT_STRING_LENGTH,
    string_data: str | None = None,
) -> np.ndarray:
    """One sample of ``tensor``: zeros when ``rng`` is None, else seeded random values.

    Integers are drawn from [0, 100), floats from [0, 1), booleans fair; BYTES are
    ``string_data`` or random strings of ``string_length`` characters (zero data: ``"0"``,
    which parses as a number, as zero data should).
    """
    dtype = numpy_dtype(tensor)
    count = prod(shape)
    if dtype.is_bytes:
        if rng is None:
            return random_strings(np.random.default_rng(0), count, 0, string_data or "0").reshape(
                shape
            )
        return random_strings(rng, count, string_length, string_data).reshape(shape)
    if rng is None:
        return np.zeros(shape, dtype=dtype.dtype)
    kind = dtype.dtype.kind
    if kind == "b":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if kind in "iu":
        high = min(RANDOM_INT_HIGH, int(np.iinfo(dtype.dtype).max) + 1)
        return rng.integers(0, high, size=shape).astype(dtype.dtype)
    return rng.random(size=shape, dtype=np.float64).astype(dtype.dtype)


def generated_data(
    model: ModelInfo,
    *,
    zero: bool,
    shapes: Shapes,
    string_length: int = DEFAULT_STRING_LENGTH,
    string_data: str | None = None,
    seed: int = 0,
    count: int = 1,
) -> InputData:
    """``count`` requests of random (seeded) or zero data, one stream."""
    if string_length < 0:
        raise InvalidArgumentError("--string-length cannot be negative")
    rng = None if zero else np.random.default_rng(seed)
    resolved = {t.name: resolve_shape(t, shapes) for t in model.inputs}
    requests = tuple(
        RequestData(
            {
                t.name: generated_tensor(
                    t,
                    resolved[t.name],
                    rng,
                    string_length=string_length,
                    string_data=string_data,
                )
                for t in model.inputs
            }
        )
        for _ in range(max(1, count))
    )
    return InputData((requests,))


def load_input_data(
    model: ModelInfo,
    source: str | Path | Sequence[str | Path] = "random",
    *,
    shapes: Shapes | None = None,
    string_length: int = DEFAULT_STRING_LENGTH,
    string_data: str | None = None,
    seed: int = 0,
    count: int = 1,
) -> InputData:
    """The input data ``--input-data`` names, checked against the model.

    ``source`` is ``"random"``, ``"zero"``, or one or more paths (a perf_analyzer JSON file, a
    directory of raw files, ``.npz``, ``.parquet``); several files give their streams one after
    the other. ``count`` is how many distinct random samples to draw (perf_analyzer: 1).
    """
    from inferd.tools.perf import input_files  # the file readers import pyarrow lazily

    shapes = dict(shapes or {})
    check_shape_names(model, shapes)
    sources = [source] if isinstance(source, (str, Path)) else list(source)
    if not sources:
        raise InvalidArgumentError("--input-data needs a value: random, zero or a file")
    if len(sources) == 1 and str(sources[0]) in ("random", "zero"):
        return generated_data(
            model,
            zero=str(sources[0]) == "zero",
            shapes=shapes,
            string_length=string_length,
            string_data=string_data,
            seed=seed,
            count=count,
        )
    streams: list[tuple[RequestData, ...]] = []
    for item in sources:
        if str(item) in ("random", "zero"):
            raise InvalidArgumentError(
                f"--input-data {item} cannot be combined with data files: give one or the other"
            )
        streams += input_files.read_file(model, Path(item), shapes)
    if not any(streams):
        raise InvalidArgumentError("the input data holds no requests")
    return InputData(tuple(s for s in streams if s))


def build_requests(
    model: ModelInfo, source: str | Path | Sequence[str | Path] = "random", **options: Any
) -> list[RequestData]:
    """Every request of :func:`load_input_data`, stream after stream."""
    return load_input_data(model, source, **options).requests


def batch_tensors(data: RequestData, batch_size: int, max_batch_size: int) -> dict[str, np.ndarray]:
    """The tensors of one request of ``batch_size`` rows: the sample repeated along a new first
    dimension when the model batches; the sample itself when it does not (then ``batch_size``
    must be 1)."""
    if batch_size < 1:
        raise InvalidArgumentError(f"the batch size must be at least 1, not {batch_size}")
    if max_batch_size == 0:
        if batch_size != 1:
            raise InvalidArgumentError(
                f"the model does not batch (max_batch_size 0): -b {batch_size} cannot be sent; "
                "use -b 1"
            )
        return {name: np.asarray(a) for name, a in data.tensors.items()}
    if batch_size > max_batch_size:
        raise InvalidArgumentError(
            f"-b {batch_size} is above the model's max_batch_size {max_batch_size}"
        )
    return {
        name: np.repeat(np.asarray(a)[np.newaxis, ...], batch_size, axis=0)
        for name, a in data.tensors.items()
    }


__all__ = [
    "DEFAULT_STRING_LENGTH",
    "InputData",
    "batch_tensors",
    "build_requests",
    "check_shape_names",
    "fits",
    "generated_data",
    "generated_tensor",
    "load_input_data",
    "parse_shape_option",
    "parse_shape_options",
    "resolve_shape",
]
