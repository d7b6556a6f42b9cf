"""Language models' generation figures as Prometheus metrics (``inferd_llm_*``), read from the
``llm`` backend's statistics snapshots at scrape time, labelled by model and version."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from inferd.backends.registry import BackendRegistry
from inferd.core.llm_stats import ModelLlmStatistics

__all__ = ["LlmCollector", "llm_statistics"]


def llm_statistics(registry: BackendRegistry) -> list[ModelLlmStatistics]:
    """The loaded language models' snapshots; none until a model needed the ``llm`` backend
    (reading them never imports it)."""
    backend = registry.built("llm")
    read = getattr(backend, "statistics", None)
    if read is None:
        return []
    snapshots: list[ModelLlmStatistics] = read()
    return snapshots


_LABELS = ["model", "version"]


class LlmCollector(Collector):
    def __init__(self, read: Callable[[], Sequence[ModelLlmStatistics]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        models = self._read()

        def gauge(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=_LABELS)

        def counter(name: str, text: str, extra: Sequence[str] = ()) -> CounterMetricFamily:
            return CounterMetricFamily(name, text, labels=[*_LABELS, *extra])

        running = gauge("inferd_llm_running_sequences", "Sequences in the running batch")
        waiting = gauge(
            "inferd_llm_waiting_sequences", "Sequences waiting to run (new or preempted)"
        )
        used = gauge("inferd_llm_kv_cache_blocks_used", "KV cache blocks held by sequences")
        total = gauge("inferd_llm_kv_cache_blocks", "KV cache blocks in all")
        requests = counter(
            "inferd_llm_requests",
            "Generation requests ended: finished, cancelled (consumer gone) or failed",
            ["outcome"],
        )
        preemptions = counter(
            "inferd_llm_preemptions", "Sequences preempted to free KV blocks (recomputed later)"
        )
        prompt = counter("inferd_llm_prompt_tokens", "Prompt tokens of accepted requests")
        generated = counter("inferd_llm_generated_tokens", "Tokens generated")
        steps = counter("inferd_llm_steps", "Forward passes (steps) run")
        cached = gauge(
            "inferd_llm_kv_cache_blocks_cached",
            "KV cache blocks kept for prefix reuse (held by sequences or evictable)",
        )
        queried = counter(
            "inferd_llm_prefix_cache_queried_tokens",
            "Prompt tokens looked up in the prefix cache when their sequence was admitted",
        )
        hit = counter(
            "inferd_llm_prefix_cache_hit_tokens",
            "Prompt tokens found in the prefix cache (their KV reused, not computed)",
        )
        ttft = SummaryMetricFamily(
            "inferd_llm_time_to_first_token_seconds",
            "Time from a request's arrival to its first generated token",
            labels=_LABELS,
        )
        itl = SummaryMetricFamily(
            "inferd_llm_inter_token_latency_seconds",
            "Time between a sequence's consecutive generated tokens",
            labels=_LABELS,
        )
        for item in models:
            labels = [item.model, str(item.version)]
            s = item.stats
            running.add_metric(labels, s.running)
            waiting.add_metric(labels, s.waiting)
            used.add_metric(labels, s.kv_blocks_used)
            total.add_metric(labels, s.kv_blocks_total)
            requests.add_metric([*labels, "finished"], s.finished_total)
            requests.add_metric([*labels, "cancelled"], s.cancelled_total)
            requests.add_metric([*labels, "failed"], s.failed_total)
            preemptions.add_metric(labels, s.preemptions_total)
            prompt.add_metric(labels, s.prompt_tokens_total)
            generated.add_metric(labels, s.generated_tokens_total)
            steps.add_metric(labels, s.steps_total)
            cached.add_metric(labels, s.kv_blocks_cached)
            queried.add_metric(labels, s.prefix_cache_queried_tokens_total)
            hit.add_metric(labels, s.prefix_cache_hit_tokens_total)
            ttft.add_metric(labels, s.ttft_count, s.ttft_sum_s)
            itl.add_metric(labels, s.itl_count, s.itl_sum_s)
        yield from (running, waiting, used, total, requests, preemptions, prompt, generated)
        yield from (steps, ttft, itl, cached, queried, hit)
