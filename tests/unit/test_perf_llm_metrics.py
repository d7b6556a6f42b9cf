"""The LLM figures of ``inferd perf -i openai``: the ITL definition, percentiles, token rates,
and how they reach the CSV, the JSON and the terminal."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from inferd.tools.perf.llm_metrics import (
    LlmSample,
    Spread,
    itl_ns,
    llm_figures,
    percentile_values,
)
from inferd.tools.perf.report import csv_text, json_text, llm_csv_header, point_text, summary_text
from inferd.tools.perf.summary import Window, merge

MS = 1_000_000


def streamed(first_ms: float, last_ms: float, latency_ms: float, tokens: int) -> LlmSample:
    return LlmSample(
        int(first_ms * MS), int(last_ms * MS), int(latency_ms * MS), 10, tokens, streamed=True
    )


def test_itl_is_the_span_of_the_tokens_over_the_gaps_between_them() -> None:
    # 5 tokens, the first at 20 ms and the last at 60 ms: 4 gaps of 10 ms
    assert itl_ns(streamed(20, 60, 61, 5)) == pytest.approx(10 * MS)
    # 2 tokens: one gap
    assert itl_ns(streamed(20, 23, 24, 2)) == pytest.approx(3 * MS)


def test_itl_is_undefined_for_one_token_and_for_whole_answers() -> None:
    assert itl_ns(streamed(20, 20, 21, 1)) is None
    assert itl_ns(streamed(20, 20, 21, 0)) is None
    whole = LlmSample(30 * MS, 30 * MS, 30 * MS, 10, 8, streamed=False)
    assert itl_ns(whole) is None


def test_percentiles_take_the_sorted_value_at_the_rounded_index() -> None:
    values = list(range(1, 101))  # 1..100
    found = percentile_values(values[::-1], (50, 90, 99))
    # index round(p/100 * 99): 50 -> 50 (value 51), 90 -> 89 (90), 99 -> 98 (99)
    assert found == {50: 51.0, 90: 90.0, 99: 99.0}
    assert percentile_values([], (50,)) is None
    assert percentile_values([7.0], (50, 99)) == {50: 7.0, 99: 7.0}


def test_figures_of_a_window() -> None:
    samples = [streamed(10, 10 + 9 * i, 12 + 9 * i, 1 + i) for i in range(1, 5)]
    # one second of measurement
    figures = llm_figures(samples, 1_000_000_000)
    assert figures.request_count == 4
    assert figures.requests_per_s == pytest.approx(4.0)
    assert figures.output_tokens_per_s == pytest.approx(2 + 3 + 4 + 5)
    assert figures.avg_output_tokens == pytest.approx(3.5)
    assert figures.avg_input_tokens == pytest.approx(10)
    assert figures.ttft_us is not None
    assert figures.ttft_us.percentiles[50] == pytest.approx(10_000)
    # ITLs: 9 ms / 1, 18 ms / 2, 27 ms / 3, 36 ms / 4: each 9 ms
    assert figures.itl_us is not None
    assert figures.itl_us.avg == pytest.approx(9_000)
    assert list(figures.itl_us.percentiles.values()) == pytest.approx([9_000] * 3)
    per_request = sorted(s.output_tokens * 1e9 / s.latency_ns for s in samples)
    assert figures.tokens_per_s_per_request is not None
    assert figures.tokens_per_s_per_request.avg == pytest.approx(np.mean(per_request))
    assert figures.latency_us is not None
    assert figures.latency_us.percentiles[99] == pytest.approx(48_000)


def test_figures_of_no_samples_are_zero_and_undefined() -> None:
    figures = llm_figures([], 1_000_000_000)
    assert figures.request_count == 0
    assert figures.requests_per_s == 0.0
    assert figures.ttft_us is None
    assert figures.itl_us is None


def test_spread_scales_and_reports_avg_and_percentiles() -> None:
    spread = Spread.of([1000, 2000, 3000], 1e-3)
    assert spread is not None
    assert spread.as_dict() == {"avg": 2.0, "p50": 2.0, "p90": 3.0, "p99": 3.0}


def _point(samples: list[LlmSample], errors: int = 0) -> object:
    window = Window(
        duration_ns=2_000_000_000,
        latencies_ns=np.array([s.latency_ns for s in samples], dtype=np.int64),
        llm=tuple(samples),
        errors=errors,
    )
    return merge([window], mode="concurrency", level=2, batch_size=1, stable=True, percentile=None)


def test_a_load_point_merges_its_windows_samples_into_the_reports() -> None:
    # TTFT 10, 20, 30 ms; 4 tokens each over 30 ms: ITL 10 ms; 12 tokens in 2 s
    samples = [streamed(10, 40, 41, 4), streamed(20, 50, 52, 4), streamed(30, 60, 60, 4)]
    point = _point(samples, errors=2)
    assert point.llm is not None  # type: ignore[attr-defined]
    assert point.llm.requests_per_s == pytest.approx(1.5)  # type: ignore[attr-defined]
    rows = list(csv.DictReader(io.StringIO(csv_text([point]))))  # type: ignore[list-item]
    assert set(llm_csv_header()) <= set(rows[0])
    row = rows[0]
    assert row["Requests/Second"] == "1.5"
    assert row["Output Tokens/Second"] == "6"
    assert row["Failed Requests"] == "2"
    assert row["Avg Time To First Token"] == "20000"
    assert row["p50 Time To First Token"] == "20000"
    assert row["p90 Time To First Token"] == "30000"
    assert row["p50 Inter Token Latency"] == "10000"
    document = json.loads(json_text([point], {"transport": "openai"}))  # type: ignore[list-item]
    llm = document["points"][0]["llm"]
    assert llm["ttft_us"]["p50"] == pytest.approx(20_000)
    assert llm["itl_us"]["p90"] == pytest.approx(10_000)
    assert llm["output_tokens_per_s"] == pytest.approx(6.0)
    text = point_text(point)  # type: ignore[arg-type]
    assert "Time to first token: avg 20000 usec (p50 20000, p90 30000, p99 30000)" in text
    assert "TTFT p50 20000 usec" in summary_text([point])  # type: ignore[list-item]


def test_tensor_model_points_keep_perf_analyzers_columns_alone() -> None:
    window = Window(duration_ns=10**9, latencies_ns=np.array([1000], dtype=np.int64))
    point = merge([window], mode="concurrency", level=1, batch_size=1, stable=True, percentile=None)
    assert point.llm is None
    header = csv_text([point]).splitlines()[0]
    assert "Time To First Token" not in header
    assert json.loads(json_text([point], {}))["points"][0]["llm"] is None
