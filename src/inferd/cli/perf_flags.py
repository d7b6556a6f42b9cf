"""``inferd perf``'s flag value types, and perf_analyzer's flags it does not carry out, each
refused by name.

A script written for perf_analyzer either runs with the same meaning or stops at the first
flag it would lose, with what to do instead; no flag is accepted and then ignored.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be at least 1")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"'{text}' must be above 0")
    return value


# (flags, takes a value, what to do instead)
REFUSED: tuple[tuple[tuple[str, ...], bool, str], ...] = (
    (("--max-threads",), True, "every context runs on one event loop; leave it out"),
    (("-c",), True, "use --concurrency-range START:END:STEP"),
    (("-d",), False, "use --concurrency-range START:END:STEP"),
    (("--binary-search",), False, "list the load points with --concurrency-range"),
    (("--measurement-mode",), True, "only time windows (--measurement-interval) are measured"),
    (("--measurement-request-count",), True, "use --measurement-interval"),
    (("--shared-memory",), True, "inputs travel in the requests; leave it out"),
    (("--output-shared-memory-size",), True, "outputs travel in the answers; leave it out"),
    (("--grpc-compression-algorithm",), True, "requests are sent uncompressed; leave it out"),
    (("--trace-file",), True, "use the server's own tracing"),
    (("--trace-level",), True, "use the server's own tracing"),
    (("--trace-rate",), True, "use the server's own tracing"),
    (("--trace-count",), True, "use the server's own tracing"),
    (("--log-frequency",), True, "use the server's own tracing"),
    (("--profile-export-file",), True, "use --json-output for every figure"),
    (("--periodic-concurrency-range",), True, "use --concurrency-range"),
    (("--request-period",), True, "use --concurrency-range"),
    (("--request-parameter",), True, "custom request parameters are not sent"),
    (("--sequence-length-variation",), True, "sequences have exactly --sequence-length"),
    (("--sequence-id-range",), True, "sequence ids count up from 1"),
    (("--serial-sequences",), False, "closed-loop contexts already send one at a time"),
    (("--bls-composing-models",), True, "composing models are not reported apart"),
    (("--model-signature-name",), True, "only Triton's protocol is spoken"),
    (("--triton-server-directory",), True, "use -i in-process --model-repository R"),
    (("--data-directory",), True, "use --input-data DIRECTORY"),
    (("--endpoint",), True, "only Triton's protocol is spoken"),
    (("--request-count",), True, "use --measurement-interval and --max-trials"),
    (("--warmup-request-count",), True, "the stability rule discards warm-up windows"),
    (("--fixed-schedule",), False, "use --request-intervals FILE"),
    (("--session-concurrency",), True, "use --concurrency-range"),
    (("--grpc-method",), True, "only inference (ModelInfer / ModelStreamInfer) is measured"),
    (("--enable-mpi",), False, "run one inferd perf per machine"),
)


class _Refuse(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.advice = kwargs.pop("advice")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        raise argparse.ArgumentError(
            self, f"perf_analyzer's {option_string} is not supported by inferd perf: {self.advice}"
        )


def add_refused_flags(parser: argparse.ArgumentParser) -> None:
    """Register every refused flag, hidden from ``--help``."""
    for flags, takes_value, advice in REFUSED:
        parser.add_argument(
            *flags,
            action=_Refuse,
            nargs=None if takes_value else 0,
            advice=advice,
            help=argparse.SUPPRESS,
            dest=f"refused_{flags[0].lstrip('-').replace('-', '_')}",
        )
