"""Column-per-input files: Parquet (a file or a folder of files), NPZ and CSV."""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError
from inferd.tools.batch.arrow_columns import arrow_to_column, table_columns
from inferd.tools.batch.blocks import Block, require_pyarrow
from inferd.tools.batch.rows import Column, InputPlan

__all__ = ["CsvSource", "NpzSource", "ParquetSource", "csv_columns"]


def _missing(plans: tuple[InputPlan, ...], have: set[str], what: str) -> None:
    lacking = [p.name for p in plans if not p.optional and p.name not in have]
    if lacking:
        raise InvalidArgumentError(
            f"{what} has no column for the model's input(s) {', '.join(lacking)} "
            f"(it has: {', '.join(sorted(have)) or 'none'})"
        )


class ParquetSource:
    """Row groups of one Parquet file or of every ``*.parquet`` file in a folder, in order."""

    def __init__(self, path: Path, plans: tuple[InputPlan, ...]) -> None:
        require_pyarrow()
        import pyarrow.parquet as pq

        files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
        if not files:
            raise InvalidArgumentError(f"the folder {path} holds no *.parquet file")
        self._names = [p.name for p in plans]
        self._pieces: list[tuple[Any, int]] = []  # (file, row group)
        self._starts: list[int] = []  # first row of each piece
        rows = 0
        for file in files:
            try:
                handle = pq.ParquetFile(file)
            except Exception as exc:  # pyarrow raises several types for a damaged file
                raise InvalidArgumentError(
                    f"{file} is not a readable Parquet file: {exc}"
                ) from None
            _missing(plans, set(handle.schema_arrow.names), str(file))
            for group in range(handle.metadata.num_row_groups):
                self._pieces.append((handle, group))
                self._starts.append(rows)
                rows += handle.metadata.row_group(group).num_rows
        self.rows = rows
        self._cached: tuple[int, Any] | None = None

    def _piece(self, index: int) -> Any:
        if self._cached is not None and self._cached[0] == index:
            return self._cached[1]
        handle, group = self._pieces[index]
        have = set(handle.schema_arrow.names)
        table = handle.read_row_group(group, columns=[n for n in self._names if n in have])
        self._cached = (index, table)
        return table

    def read(self, start: int, stop: int) -> Block:
        import pyarrow as pa

        parts = []
        index = bisect.bisect_right(self._starts, start) - 1
        while index < len(self._pieces) and self._starts[index] < stop:
            table = self._piece(index)
            lo = max(start - self._starts[index], 0)
            hi = min(stop - self._starts[index], table.num_rows)
            parts.append(table.slice(lo, hi - lo))
            index += 1
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        return Block(start, stop - start, table_columns(table, self._names))

    def close(self) -> None:
        self._cached = None


class NpzSource:
    """``numpy.savez`` arrays named like the inputs (loaded without pickles)."""

    def __init__(self, path: Path, plans: tuple[InputPlan, ...]) -> None:
        try:
            archive = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InvalidArgumentError(f"{path} is not a readable .npz file: {exc}") from None
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise InvalidArgumentError(f"{path} holds one array, not an .npz archive of arrays")
        _missing(plans, set(archive.files), str(path))
        try:
            self._arrays = {p.name: archive[p.name] for p in plans if p.name in archive.files}
        except ValueError as exc:  # an object array would need pickles
            raise InvalidArgumentError(f"{path}: {exc}") from None
        finally:
            archive.close()
        counts = {name: a.shape[0] if a.ndim else 0 for name, a in self._arrays.items()}
        if len(set(counts.values())) > 1:
            raise InvalidArgumentError(
                f"{path}: the arrays have different numbers of rows "
                f"({', '.join(f'{k}: {v}' for k, v in counts.items())})"
            )
        self.rows = next(iter(counts.values()), 0)

    def read(self, start: int, stop: int) -> Block:
        columns: dict[str, Column] = {}
        for name, array in self._arrays.items():
            part = array[start:stop]
            columns[name] = list(part) if part.dtype.kind in "US" else part
        return Block(start, stop - start, columns)

    def close(self) -> None:
        self._arrays = {}


def csv_columns(table: Any, plans: tuple[InputPlan, ...], what: str) -> dict[str, Column]:
    """The model's inputs from a CSV table: a column per input, or every column as the
    features of the model's only, 1-D input."""
    names = set(table.column_names)
    if all(p.name in names for p in plans if not p.optional):
        return table_columns(table, [p.name for p in plans])
    if len(plans) == 1 and len(plans[0].dims) == 1:
        plan = plans[0]
        width = plan.dims[0]
        if width not in (-1, table.num_columns):
            raise InvalidArgumentError(
                f"{what} has {table.num_columns} columns and no column named "
                f"'{plan.name}'; the model's input '{plan.name}' takes {width} features per row "
                "(one column each)"
            )
        features = []
        for i, column in enumerate(table.columns):
            values = arrow_to_column(column)
            if isinstance(values, list):
                values = np.array([np.nan if v is None else v for v in values], dtype=object)
                try:
                    values = values.astype(np.float64)
                except (TypeError, ValueError):
                    raise InvalidArgumentError(
                        f"{what}: column {table.column_names[i]!r} is not numeric"
                    ) from None
            features.append(values)
        return {plan.name: np.stack(features, axis=1) if features else np.empty((0, 0))}
    raise InvalidArgumentError(
        f"{what} needs a column per input ({', '.join(p.name for p in plans)}); a CSV file "
        "feeds a model with several inputs only that way"
    )


class CsvSource:
    """A CSV file with a header line, read whole."""

    def __init__(self, path: Path, plans: tuple[InputPlan, ...]) -> None:
        require_pyarrow()
        import pyarrow as pa
        import pyarrow.csv as pacsv

        try:
            table = pacsv.read_csv(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InvalidArgumentError(f"{path} is not a readable CSV file: {exc}") from None
        self._columns = csv_columns(table, plans, str(path))
        self.rows = table.num_rows

    def read(self, start: int, stop: int) -> Block:
        return Block(
            start, stop - start, {name: c[start:stop] for name, c in self._columns.items()}
        )

    def close(self) -> None:
        self._columns = {}
