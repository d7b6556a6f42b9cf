"""Flags that several commands share, declared once: the "results" group of ``inferd analyze``
and ``inferd optimize``, opening with ``--results DIR`` and closing with ``--quiet``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["results_group"]


@contextmanager
def results_group(
    p: argparse.ArgumentParser, *, default: Path, help: str
) -> Iterator[argparse._ArgumentGroup]:
    """The "results" group: ``--results DIR`` (default ``default``, described by ``help``), then
    the flags the command adds to the group inside the ``with`` block, then ``--quiet``."""
    out = p.add_argument_group("results")
    out.add_argument("--results", type=Path, default=default, metavar="DIR", help=help)
    yield out
    out.add_argument("--quiet", action="store_true", help="no progress bar")
