"""Traffic policy metrics (``inferd_rollout_*``), read from the policies' figures at scrape
time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.core.routing import RolloutStatistics, VariantFigures

__all__ = ["RolloutCollector"]

_VARIANT = ["model", "variant"]

# (name, help, VariantFigures attribute, counter?); a gauge whose value is None is left out
_PER_VARIANT: tuple[tuple[str, str, str, bool], ...] = (
    ("inferd_rollout_requests", "Requests a variant answered or failed", "requests", True),
    ("inferd_rollout_errors", "Requests that failed on a variant", "errors", True),
    ("inferd_rollout_latency_p99_seconds",
     "99th percentile of a variant's recent latencies", "latency_p99_s", False),
    ("inferd_rollout_traffic_share",
     "Share of new requests the policy sends to a variant (a shadow: the share mirrored)",
     "share", False),
    ("inferd_rollout_reward_mean", "Mean reward posted for a variant's requests",
     "reward_mean", False),
    ("inferd_rollout_feedback", "Rewards posted for a variant's requests", "feedback", True),
    ("inferd_rollout_p_better",
     "Posterior probability that a variant's mean reward beats the baseline's",
     "p_better", False),
    ("inferd_rollout_shadow_requests",
     "Mirrored requests finished for a variant (a shadow's copies, a canary's comparisons)",
     "shadow_requests", True),
    ("inferd_rollout_shadow_agreement",
     "Share of compared mirrored requests whose answers agreed", "shadow_agreement", False),
)  # fmt: skip


class RolloutCollector(Collector):
    def __init__(self, read: Callable[[], RolloutStatistics]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        stats = self._read()
        families: list[tuple[CounterMetricFamily | GaugeMetricFamily, str]] = [
            (
                CounterMetricFamily(name, text, labels=_VARIANT)
                if counter
                else GaugeMetricFamily(name, text, labels=_VARIANT),
                attribute,
            )
            for name, text, attribute, counter in _PER_VARIANT
        ]
        stage = GaugeMetricFamily(
            "inferd_rollout_canary_stage",
            "The canary's current stage (0 = the first)",
            labels=["model"],
        )
        rollbacks = CounterMetricFamily(
            "inferd_rollout_canary_rollbacks",
            "Canary rollbacks, automatic and manual",
            labels=["model"],
        )
        for policy in stats.policies:
            for variant in policy.variants:
                labels = [policy.model, variant.name]
                for family, attribute in families:
                    value = _value(variant, attribute)
                    if value is not None:
                        family.add_metric(labels, value)
            if policy.canary_stage is not None:
                stage.add_metric([policy.model], policy.canary_stage)
                rollbacks.add_metric([policy.model], policy.canary_rollbacks)
        for family, _ in families:
            yield family
        yield stage
        yield rollbacks


def _value(variant: VariantFigures, attribute: str) -> float | None:
    value = getattr(variant, attribute)
    return None if value is None else float(value)
