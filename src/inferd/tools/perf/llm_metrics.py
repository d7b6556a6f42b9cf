"""The figures LLM users read, from one record per answered request (pure).

Each answered request of the ``openai`` transport yields an :class:`LlmSample`: when its first
and last pieces of text arrived (nanoseconds after the send), its whole latency, and how many
tokens it sent and received. :func:`llm_figures` turns the samples of a window or a load point
into:

* **TTFT**, time to first token: the send to the first piece of text. A whole (not streamed)
  answer brings its first token with everything else, so its TTFT is its latency.
* **ITL**, inter-token latency: ``(last piece - first piece) / (output tokens - 1)``, per
  request; defined for streamed answers of at least two tokens only.
* **output tokens per second**: every output token over the measured time (total), and each
  request's output tokens over its own latency (per request).
* **requests per second**: answered requests over the measured time.

Percentiles use the load generator's rule (:func:`summary.percentile_index`): the sorted value
at index ``round(p / 100 * (n - 1))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

LLM_PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class LlmSample:
    """One answered request, times in nanoseconds after its send."""

    first_token_ns: int  # the first piece of text (a whole answer: its end)
    last_token_ns: int  # the last piece of text (a whole answer: its end)
    latency_ns: int  # the send to the end of the answer
    input_tokens: int
    output_tokens: int
    streamed: bool


def itl_ns(sample: LlmSample) -> float | None:
    """The request's inter-token latency: (last - first piece) / (output tokens - 1); None for
    a whole answer or fewer than two output tokens."""
    if not sample.streamed or sample.output_tokens < 2:
        return None
    return (sample.last_token_ns - sample.first_token_ns) / (sample.output_tokens - 1)


def percentile_values(values: Sequence[float], wanted: Sequence[int]) -> dict[int, float] | None:
    """``{p: value}`` by the load generator's index rule; None when there are no values."""
    if not values:
        return None
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)
    return {p: float(ordered[int(p / 100.0 * (n - 1) + 0.5)]) for p in wanted}


@dataclass(frozen=True)
class Spread:
    """The average and percentiles of one figure (microseconds, or tokens per second)."""

    avg: float
    percentiles: dict[int, float]

    @classmethod
    def of(cls, values: Sequence[float], scale: float = 1.0) -> Spread | None:
        """The distribution of ``values`` times ``scale``; None when there are none."""
        if not values:
            return None
        scaled = [v * scale for v in values]
        found = percentile_values(scaled, LLM_PERCENTILES)
        assert found is not None
        return cls(float(np.mean(scaled)), found)

    def as_dict(self) -> dict[str, Any]:
        return {"avg": self.avg, **{f"p{p}": v for p, v in self.percentiles.items()}}


@dataclass(frozen=True)
class LlmFigures:
    """The LLM figures of a window or a load point (times in microseconds)."""

    request_count: int
    requests_per_s: float
    output_tokens_per_s: float  # every output token over the measured time
    ttft_us: Spread | None
    itl_us: Spread | None  # None: no streamed answer of two tokens or more
    latency_us: Spread | None
    tokens_per_s_per_request: Spread | None  # each request's output tokens / latency
    avg_input_tokens: float
    avg_output_tokens: float

    def as_dict(self) -> dict[str, Any]:
        """The JSON report's ``llm`` entry."""

        def dist(d: Spread | None) -> dict[str, Any] | None:
            return None if d is None else d.as_dict()

        return {
            "request_count": self.request_count,
            "requests_per_s": self.requests_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "ttft_us": dist(self.ttft_us),
            "itl_us": dist(self.itl_us),
            "latency_us": dist(self.latency_us),
            "output_tokens_per_s_per_request": dist(self.tokens_per_s_per_request),
            "avg_input_tokens": self.avg_input_tokens,
            "avg_output_tokens": self.avg_output_tokens,
        }


def llm_figures(samples: Sequence[LlmSample], duration_ns: int) -> LlmFigures:
    """The figures of ``samples``, answered during ``duration_ns``."""
    n = len(samples)
    seconds = duration_ns / 1e9
    output = sum(s.output_tokens for s in samples)
    itls = [v for v in (itl_ns(s) for s in samples) if v is not None]
    per_request = [s.output_tokens * 1e9 / s.latency_ns for s in samples if s.latency_ns > 0]
    return LlmFigures(
        request_count=n,
        requests_per_s=n / seconds if seconds > 0 else 0.0,
        output_tokens_per_s=output / seconds if seconds > 0 else 0.0,
        ttft_us=Spread.of([s.first_token_ns for s in samples], 1e-3),
        itl_us=Spread.of(itls, 1e-3),
        latency_us=Spread.of([s.latency_ns for s in samples], 1e-3),
        tokens_per_s_per_request=Spread.of(per_request),
        avg_input_tokens=sum(s.input_tokens for s in samples) / n if n else 0.0,
        avg_output_tokens=output / n if n else 0.0,
    )


__all__ = ["LLM_PERCENTILES", "LlmFigures", "LlmSample", "Spread", "itl_ns", "llm_figures"]
