"""What one ``inferd perf`` run is asked to do: the typed options and the range syntax.

The command line is parsed once (``cli/perf.py``) into a :class:`PerfOptions`; nothing below
reads ``argparse`` results.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from inferd.client.headers import Headers
from inferd.client.tls import GrpcTlsSettings, HttpsSettings
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.llm_inputs import LlmOptions


class LoadMode(enum.Enum):
    """Closed loop (N contexts back to back), open loop at a rate, or open loop from a file."""

    CONCURRENCY = "concurrency"
    REQUEST_RATE = "request-rate"
    INTERVALS = "intervals"


class Distribution(enum.Enum):
    CONSTANT = "constant"
    POISSON = "poisson"


@dataclass(frozen=True)
class Range:
    """``START:END:STEP`` as perf_analyzer reads it (END and STEP default to START and 1)."""

    start: float
    end: float
    step: float

    def values(self) -> list[float]:
        """Every value from start to end (inclusive) by step."""
        out: list[float] = []
        value = self.start
        # a small tolerance, so 0.1:0.3:0.1 includes 0.3 despite floating point
        while value <= self.end + self.step * 1e-9:
            out.append(round(value, 9))
            value = self.start + self.step * len(out)
        return out


def parse_range(text: str, *, what: str, integer: bool) -> Range:
    """Parse ``START[:END[:STEP]]``; raise InvalidArgumentError naming ``what`` on bad input."""
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or any(p.strip() == "" for p in parts):
        raise InvalidArgumentError(f"{what} must be START[:END[:STEP]], got '{text}'")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        raise InvalidArgumentError(
            f"{what} must be numbers START[:END[:STEP]], got '{text}'"
        ) from None
    if integer and any(n != int(n) for n in numbers):
        raise InvalidArgumentError(f"{what} takes whole numbers, got '{text}'")
    start = numbers[0]
    end = numbers[1] if len(numbers) > 1 else start
    step = numbers[2] if len(numbers) > 2 else 1.0
    if start <= 0:
        raise InvalidArgumentError(f"{what} must start above 0, got '{text}'")
    if end == 0:
        raise InvalidArgumentError(
            f"{what} with END 0 (search until a latency threshold) is not supported: give an END"
        )
    if end < start:
        raise InvalidArgumentError(f"{what} END must not be below START, got '{text}'")
    if step <= 0:
        raise InvalidArgumentError(f"{what} STEP must be above 0, got '{text}'")
    return Range(start, end, step)


@dataclass(frozen=True)
class PerfOptions:
    """Everything the driver and the reports need to know about one run."""

    model: str
    version: str = ""
    transport: str = "http-binary"  # one of transport.TRANSPORT_NAMES
    url: str = ""
    headers: Headers = ()  # -H: sent with every request (HTTP headers, gRPC metadata)
    https: HttpsSettings | None = None  # HTTP over TLS (an https:// server)
    grpc_tls: GrpcTlsSettings | None = None  # gRPC over TLS (--ssl-grpc-use-ssl)
    batch_size: int = 1
    mode: LoadMode = LoadMode.CONCURRENCY
    concurrency: Range = field(default_factory=lambda: Range(1, 1, 1))
    request_rate: Range = field(default_factory=lambda: Range(1, 1, 1))
    distribution: Distribution = Distribution.CONSTANT
    intervals_us: tuple[float, ...] = ()  # --request-intervals, one send gap per entry
    measurement_interval_ms: int = 5000
    stability_percentage: float = 10.0
    max_trials: int = 10
    percentile: int | None = None  # None: stabilise on the average latency
    sequence_length: int = 20
    num_sequences: int = 4  # open loop on a sequence model: sequences kept active at once
    seed: int = 0  # Poisson arrivals: the seed of the numpy Generator
    slip_bound_us: float = 1000.0  # an open-loop send later than this behind schedule is late
    outputs: tuple[str, ...] | None = None
    input_data: tuple[str, ...] = ("random",)  # random | zero | files (see inputs.py)
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # --shape NAME:D1,D2
    string_length: int = 128
    string_data: str | None = None
    latency_threshold_ms: float | None = None  # stop visiting load points once above it
    server_pid: int | None = None
    metrics_url: str | None = None
    collect_metrics: bool = False  # read the server's GPU and host gauges while measuring
    metrics_interval_ms: float = 1000.0
    csv_file: Path | None = None
    verbose_csv: bool = False
    json_file: Path | None = None
    quiet: bool = False
    llm: LlmOptions | None = None  # the openai transport: endpoint, prompts, token counting

    @property
    def stability_ratio(self) -> float:
        """The largest max/min ratio of the last windows that still counts as stable."""
        return 1.0 + self.stability_percentage / 100.0

    def load_levels(self) -> list[float]:
        """The load points to visit: concurrencies, request rates, or one point for a file."""
        if self.mode is LoadMode.CONCURRENCY:
            return [float(int(v)) for v in self.concurrency.values()]
        if self.mode is LoadMode.REQUEST_RATE:
            return self.request_rate.values()
        return [0.0]
