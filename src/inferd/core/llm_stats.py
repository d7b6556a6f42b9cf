"""A language model's generation statistics (the ``llm`` backend's engine fills them; the
metrics read them at scrape time)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LlmStatistics", "ModelLlmStatistics"]


@dataclass(frozen=True, slots=True)
class LlmStatistics:
    """A snapshot of the engine for the statistics and metrics (times in seconds)."""

    running: int
    waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    requests_total: int  # submitted and accepted
    finished_total: int
    cancelled_total: int
    failed_total: int  # aborted, timed out or failed in a step
    preemptions_total: int
    prompt_tokens_total: int
    generated_tokens_total: int
    steps_total: int
    ttft_sum_s: float
    ttft_count: int
    itl_sum_s: float
    itl_count: int
    ttft_p50_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p99_s: float
    # prefix caching: prompt tokens looked up at admission, and those found cached (not
    # computed again); both 0 when prefix caching is off
    prefix_cache_queried_tokens_total: int = 0
    prefix_cache_hit_tokens_total: int = 0
    kv_blocks_cached: int = 0  # blocks registered in the prefix cache (held or evictable)


@dataclass(frozen=True, slots=True)
class ModelLlmStatistics:
    """One loaded language model's snapshot, by name and version."""

    model: str
    version: int
    stats: LlmStatistics
