"""When an open loop sends: gaps between sends, constant, Poisson or read from a file (pure).

A schedule is an endless iterator of gaps in seconds; the driver adds them up to get each
send's due time, and sends at that time whatever the answers to earlier requests.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.options import Distribution

_POISSON_BLOCK = 4096  # gaps drawn from the Generator at once


def constant_gaps(rate: float) -> Iterator[float]:
    """``1/rate`` seconds between sends, forever."""
    if rate <= 0:
        raise InvalidArgumentError(f"a request rate must be above 0, got {rate}")
    return itertools.repeat(1.0 / rate)


def poisson_gaps(rate: float, rng: np.random.Generator) -> Iterator[float]:
    """Exponential gaps of mean ``1/rate`` seconds: Poisson arrivals at ``rate`` per second."""
    if rate <= 0:
        raise InvalidArgumentError(f"a request rate must be above 0, got {rate}")
    scale = 1.0 / rate
    while True:
        yield from rng.exponential(scale, _POISSON_BLOCK).tolist()


def file_gaps(intervals_us: Sequence[float]) -> Iterator[float]:
    """The file's gaps (microseconds) in order, starting again from the top when they run out."""
    if not intervals_us:
        raise InvalidArgumentError("the request intervals file holds no intervals")
    return itertools.cycle([us / 1e6 for us in intervals_us])


def gaps(
    distribution: Distribution, rate: float, rng: np.random.Generator | None = None
) -> Iterator[float]:
    """The gaps of ``distribution`` at ``rate`` (a Poisson schedule needs ``rng``)."""
    if distribution is Distribution.CONSTANT:
        return constant_gaps(rate)
    if rng is None:
        raise ValueError("a Poisson schedule needs a numpy Generator")
    return poisson_gaps(rate, rng)


def due_times(gap_iter: Iterator[float], count: int, start: float = 0.0) -> list[float]:
    """The first ``count`` send times of a schedule, the first one gap after ``start``."""
    return list(itertools.accumulate(itertools.islice(gap_iter, count), initial=start))[1:]


def parse_intervals(text: str, *, source: str = "the request intervals file") -> tuple[float, ...]:
    """One interval in microseconds per line (blank lines skipped), each above 0."""
    values: list[float] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            value = float(line)
        except ValueError:
            raise InvalidArgumentError(
                f"{source}, line {number}: '{line}' is not a number of microseconds"
            ) from None
        if not value > 0:
            raise InvalidArgumentError(f"{source}, line {number}: intervals must be above 0")
        values.append(value)
    if not values:
        raise InvalidArgumentError(f"{source} holds no intervals")
    return tuple(values)


def read_intervals(path: Path) -> tuple[float, ...]:
    """:func:`parse_intervals` over a file, with a clear error if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot read the request intervals file '{path}': {exc.strerror}"
        ) from exc
    return parse_intervals(text, source=f"'{path}'")
