"""Calibration and evaluation data: rows of model inputs (and labels) read from a file or folder.

Three formats, chosen by what the path is:

- ``.npz``: one array per input name, rows along the first dimension; the labels under the
  name given (default: ``label``, else ``labels``).
- ``.parquet``: one column per input, one row per sample. A scalar column gives one value per
  row; a list column (nested lists too) is reshaped to the input's dims, a variable dim being
  taken from the cells when the rest of the shape fixes it.
- a folder of ``*.json`` files, each a KServe v2 inference request
  (``{"inputs": [{"name", "shape", "datatype", "data"}, ...]}``) decoded by the server's own
  codec; the requests are joined along their first (batch) dimension, in file-name order. Labels
  are a tensor of the request named like the labels.

Every input of the model must be present (optional ones may be missing), and nothing else
besides the labels. Dims are those of one row (without the batch dimension); ``-1`` takes any
size. Values are converted to the input's datatype only when nothing is lost: integers must fit,
floats given for integer inputs must be whole, numbers given for BOOL must be 0 or 1, and
integers given for floating-point inputs must be exactly representable. Floats narrowed to a
smaller floating-point type are rounded (that is what a client sending them would do) but must
stay finite. Every problem is one :class:`InvalidArgumentError` line naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from inferd.codecs.v2_http import decode_infer_request
from inferd.core.datatypes import BY_NAME, DataType
from inferd.core.model_spec import TensorSpec
from inferd.errors import InferdError, InvalidArgumentError

__all__ = ["LABEL_NAMES", "Dataset", "load_dataset"]

#: the names tried for the labels when none is given
LABEL_NAMES = ("label", "labels")
_FLOATS = frozenset({"FP16", "FP32", "FP64", "BF16"})

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Dataset:
    """Rows of model inputs, each array with the rows along its first dimension."""

    inputs: Mapping[str, Array]
    labels: Array | None
    source: str

    def __post_init__(self) -> None:
        if not self.inputs:
            raise InvalidArgumentError(f"{self.source}: holds no input data")
        counts = {name: len(array) for name, array in self.inputs.items()}
        if self.labels is not None:
            counts["labels"] = len(self.labels)
        if len(set(counts.values())) != 1:
            listed = ", ".join(f"{name}: {count}" for name, count in counts.items())
            raise InvalidArgumentError(
                f"{self.source}: the arrays hold different numbers of rows ({listed})"
            )

    @property
    def rows(self) -> int:
        return len(next(iter(self.inputs.values())))

    def batches(self, size: int) -> Iterator[dict[str, Array]]:
        """The inputs in batches of ``size`` rows, in order; the last one may be shorter."""
        if size < 1:
            raise InvalidArgumentError(f"batch size must be at least 1, got {size}")
        for start in range(0, self.rows, size):
            yield {name: array[start : start + size] for name, array in self.inputs.items()}

    def head(self, rows: int) -> Dataset:
        """The first ``rows`` rows (all of them when there are fewer)."""
        labels = None if self.labels is None else self.labels[:rows]
        inputs = {name: array[:rows] for name, array in self.inputs.items()}
        return Dataset(inputs, labels, self.source)


def load_dataset(path: Path, inputs: Sequence[TensorSpec], label: str | None = None) -> Dataset:
    """The rows held in ``path`` for a model with ``inputs``; ``label`` names the labels."""
    if path.is_dir():
        return _load_requests(path, inputs, label)
    if not path.is_file():
        raise InvalidArgumentError(f"{path}: no such file or folder")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _load_npz(path, inputs, label)
    if suffix == ".parquet":
        return _load_parquet(path, inputs, label)
    raise InvalidArgumentError(
        f"{path}: unsupported data format '{path.suffix}'; give a .npz archive, a .parquet "
        "table or a folder of KServe v2 JSON inference requests"
    )


# --- checks shared by every format ------------------------------------------------------------


def _label_name(names: Sequence[str], label: str | None, source: str) -> str | None:
    """The name holding the labels among ``names``, if any (an explicit one must be there)."""
    if label is not None:
        if label not in names:
            raise InvalidArgumentError(
                f"{source}: no labels named '{label}' (it holds {', '.join(names) or 'nothing'})"
            )
        return label
    found = [name for name in LABEL_NAMES if name in names]
    if len(found) > 1:
        raise InvalidArgumentError(
            f"{source}: holds both {' and '.join(repr(f) for f in found)}; name the labels to use"
        )
    return found[0] if found else None


def _check_names(
    names: Sequence[str], specs: Sequence[TensorSpec], labels: str | None, source: str
) -> None:
    wanted = {spec.name for spec in specs}
    missing = [spec.name for spec in specs if spec.name not in names and not spec.optional]
    if missing:
        raise InvalidArgumentError(
            f"{source}: no data for input {', '.join(repr(m) for m in missing)} "
            f"(it holds {', '.join(names) or 'nothing'})"
        )
    extra = [name for name in names if name not in wanted and name != labels]
    if extra:
        raise InvalidArgumentError(
            f"{source}: {', '.join(repr(e) for e in extra)} is neither an input of the model "
            f"({', '.join(sorted(wanted))}) nor the labels"
        )


def _fits(dims: Sequence[int], shape: Sequence[int]) -> bool:
    return len(dims) == len(shape) and all(d in (-1, s) for d, s in zip(dims, shape, strict=True))


def _fit(array: Array, spec: TensorSpec, what: str) -> Array:
    """``array`` checked against the dims of one row and converted to the input's datatype."""
    if array.ndim == 0 or not _fits(spec.dims, array.shape[1:]):
        raise InvalidArgumentError(
            f"{what}: shape {list(array.shape)} does not fit the input: expected rows along "
            f"the first dimension, each of shape {list(spec.dims)}"
        )
    return _convert(array, spec.datatype, what)


def _convert(array: Array, dtype: DataType, what: str) -> Array:
    """``array`` as ``dtype``, refusing any conversion that changes a value (see the module)."""
    if array.dtype == dtype.dtype:
        return array
    kind = array.dtype.kind
    if dtype.is_bytes:
        if kind not in "USO":
            raise InvalidArgumentError(f"{what}: BYTES input needs text, got {array.dtype} data")
        return _as_bytes(array, what)
    if kind in "USO":
        raise InvalidArgumentError(f"{what}: {dtype.name} input cannot take text data")
    bfloat16 = array.dtype == BY_NAME["BF16"].dtype
    if kind not in "biuf" and not bfloat16:
        raise InvalidArgumentError(f"{what}: {dtype.name} input cannot take {array.dtype} data")
    if dtype.name in _FLOATS:
        return _to_float(array, dtype, what)
    if kind == "f" or bfloat16:
        values = array.astype(np.float64)
        if not np.isfinite(values).all():
            raise InvalidArgumentError(f"{what}: {dtype.name} input cannot take NaN or infinity")
        if not (np.floor(values) == values).all():
            bad = float(values[np.floor(values) != values].flat[0])
            raise InvalidArgumentError(
                f"{what}: {dtype.name} input needs whole numbers, got {bad!r}"
            )
    if dtype.name == "BOOL":
        if not np.isin(array, (0, 1)).all():
            raise InvalidArgumentError(f"{what}: BOOL input needs 0 or 1, got other values")
        return array.astype(np.bool_)
    info = np.iinfo(dtype.dtype)
    if array.size and (array.min() < info.min or array.max() > info.max):
        raise InvalidArgumentError(
            f"{what}: values from {array.min()!s} to {array.max()!s} do not fit {dtype.name} "
            f"([{info.min}, {info.max}])"
        )
    return array.astype(dtype.dtype)


def _to_float(array: Array, dtype: DataType, what: str) -> Array:
    with np.errstate(over="ignore", invalid="ignore"):
        out = array.astype(dtype.dtype)
    if array.dtype.kind == "b":
        return out
    if array.dtype.kind in "iu":
        # compared as 64-bit integers: a double cannot tell 2**53 + 1 from 2**53
        back = out.astype(np.float64)
        unsigned = array.dtype.kind == "u"
        lo, hi = (0.0, 2.0**64) if unsigned else (-(2.0**63), 2.0**63)
        inside = (back >= lo) & (back < hi)
        wide = np.uint64 if unsigned else np.int64
        same = np.where(inside, back, 0).astype(wide) == array.astype(wide)
        if not (inside & same).all():
            raise InvalidArgumentError(
                f"{what}: integers too large to be held exactly by {dtype.name}"
            )
        return out
    overflow = np.isfinite(array) & ~np.isfinite(out.astype(np.float64))
    if overflow.any():
        raise InvalidArgumentError(
            f"{what}: {float(array[overflow].flat[0])!r} is beyond the range of {dtype.name}"
        )
    return out


def _as_bytes(array: Array, what: str) -> Array:
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for index, value in enumerate(array.reshape(-1).tolist()):
        if isinstance(value, str):
            flat[index] = value.encode()
        elif isinstance(value, bytes):
            flat[index] = value
        else:
            raise InvalidArgumentError(
                f"{what}: BYTES input needs text, got a {type(value).__name__}"
            )
    return out


def _dataset(
    arrays: Mapping[str, Array],
    specs: Sequence[TensorSpec],
    labels: Array | None,
    source: str,
    what: str = "input",
) -> Dataset:
    fitted = {}
    for spec in specs:
        if spec.name in arrays:
            fitted[spec.name] = _fit(arrays[spec.name], spec, f"{source}: {what} '{spec.name}'")
    data = Dataset(fitted, labels, source)
    if data.rows == 0:
        raise InvalidArgumentError(f"{source}: holds no rows")
    return data


# --- .npz -------------------------------------------------------------------------------------


def _load_npz(path: Path, specs: Sequence[TensorSpec], label: str | None) -> Dataset:
    source = str(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"{source}: cannot read the archive ({exc})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InvalidArgumentError(f"{source}: not a .npz archive of named arrays")
    with archive:
        names = list(archive.files)
        labels_name = _label_name(names, label, source)
        _check_names(names, specs, labels_name, source)
        arrays = {name: _npz_array(archive, name, source) for name in names}
    labels = None if labels_name is None else arrays.pop(labels_name)
    return _dataset(arrays, specs, labels, source, "array")


def _npz_array(archive: Any, name: str, source: str) -> Array:
    try:
        return np.asarray(archive[name])
    except ValueError as exc:  # object arrays need pickles, which are refused
        raise InvalidArgumentError(
            f"{source}: array '{name}' cannot be read ({exc}); store text as str arrays"
        ) from None


# --- .parquet ---------------------------------------------------------------------------------


def _load_parquet(path: Path, specs: Sequence[TensorSpec], label: str | None) -> Dataset:
    source = str(path)
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InvalidArgumentError(
            f"{source}: reading .parquet data needs pyarrow: pip install 'inferd[optimize]'"
        ) from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"{source}: cannot read the table ({exc})") from None
    names = list(table.column_names)
    labels_name = _label_name(names, label, source)
    _check_names(names, specs, labels_name, source)
    arrays: dict[str, Array] = {}
    for spec in specs:
        if spec.name in names:
            what = f"{source}: column '{spec.name}'"
            flat, shape = _column_values(table.column(spec.name), what)
            arrays[spec.name] = _reshape(flat, shape, table.num_rows, spec.dims, what)
    labels = None
    if labels_name is not None:
        what = f"{source}: column '{labels_name}'"
        flat, shape = _column_values(table.column(labels_name), what)
        labels = flat.reshape(table.num_rows, *shape)
    return _dataset(arrays, specs, labels, source, "column")


def _column_values(column: Any, what: str) -> tuple[Array, tuple[int, ...]]:
    """The column's values flattened, and the shape every cell has (``()`` for scalars)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = column.combine_chunks()
    shape: list[int] = []
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    while any(is_list(array.type) for is_list in lists):
        if array.null_count:
            raise InvalidArgumentError(f"{what}: has empty (null) cells")
        lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
        if len(lengths) and (lengths != lengths[0]).any():
            raise InvalidArgumentError(
                f"{what}: cells hold lists of different lengths ({int(lengths.min())} to "
                f"{int(lengths.max())}); every row must have the same shape"
            )
        shape.append(int(lengths[0]) if len(lengths) else 0)
        array = array.flatten()
    if array.null_count:
        raise InvalidArgumentError(f"{what}: has empty (null) cells")
    return np.asarray(array.to_numpy(zero_copy_only=False)), tuple(shape)


def _reshape(
    flat: Array, shape: tuple[int, ...], rows: int, dims: tuple[int, ...], what: str
) -> Array:
    """The flat values of ``rows`` cells of ``shape`` as rows of the input's ``dims``."""
    if _fits(dims, shape):
        return flat.reshape(rows, *shape)
    count = prod(shape)
    fixed = prod(d for d in dims if d != -1)
    variable = sum(d == -1 for d in dims)
    if variable == 0 and fixed == count:
        return flat.reshape(rows, *dims)
    if variable == 1 and fixed and count % fixed == 0:
        return flat.reshape(rows, *(count // fixed if d == -1 else d for d in dims))
    raise InvalidArgumentError(
        f"{what}: cells of shape {list(shape)} ({count} values) do not fit the input's shape "
        f"{list(dims)}"
    )


# --- a folder of KServe v2 JSON requests -----------------------------------------------------


def _load_requests(folder: Path, specs: Sequence[TensorSpec], label: str | None) -> Dataset:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".json" and p.is_file())
    if not files:
        raise InvalidArgumentError(f"{folder}: no .json inference requests in this folder")
    parts: list[Dataset] = []
    for file in files:
        source = str(file)
        try:
            request = decode_infer_request("", "", file.read_bytes(), None)
        except InferdError as exc:
            raise InvalidArgumentError(f"{source}: {exc}") from None
        except OSError as exc:
            raise InvalidArgumentError(f"{source}: cannot read it ({exc})") from None
        names = list(request.inputs)
        labels_name = _label_name(names, label, source)
        _check_names(names, specs, labels_name, source)
        tensors = dict(request.inputs)
        labels = None if labels_name is None else tensors.pop(labels_name)
        parts.append(_dataset(tensors, specs, labels, source))
    return _join(parts, str(folder))


def _join(parts: Sequence[Dataset], source: str) -> Dataset:
    first = parts[0]
    for part in parts[1:]:
        if set(part.inputs) != set(first.inputs):
            raise InvalidArgumentError(
                f"{part.source}: has inputs {', '.join(sorted(part.inputs))}, but "
                f"{first.source} has {', '.join(sorted(first.inputs))}"
            )
        if (part.labels is None) != (first.labels is None):
            raise InvalidArgumentError(
                f"{part.source}: {'has' if part.labels is not None else 'lacks'} labels, "
                f"unlike {first.source}"
            )
        shapes = [d.labels.shape[1:] for d in (part, first) if d.labels is not None]
        if len(shapes) == 2 and shapes[0] != shapes[1]:
            raise InvalidArgumentError(
                f"{part.source}: labels of shape {list(shapes[0])} per row, but "
                f"{first.source} has {list(shapes[1])}"
            )
        for name, array in part.inputs.items():
            if array.shape[1:] != first.inputs[name].shape[1:]:
                raise InvalidArgumentError(
                    f"{part.source}: input '{name}' has rows of shape {list(array.shape[1:])}, "
                    f"but {first.source} has {list(first.inputs[name].shape[1:])}"
                )
    inputs = {name: np.concatenate([p.inputs[name] for p in parts]) for name in first.inputs}
    labels = None
    if first.labels is not None:
        labels = np.concatenate([p.labels for p in parts if p.labels is not None])
    return Dataset(inputs, labels, source)
