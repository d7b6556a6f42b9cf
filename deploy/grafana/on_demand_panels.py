"""The dashboard's on-demand loading row (``--model-control-mode=on-demand``): loads by reason,
how often a request finds its model absent, evictions, memory against the budget, resident
models and load latency. Servers in other modes export none of these series; the panels then
show no data.
"""

from __future__ import annotations

from dashboard_panels import RATE, I, M, Panel, Row, Target

__all__ = ["on_demand_row"]

_LOADS = f"inferd_model_loads_total{{{I}}}"
_ON_REQUEST = f'inferd_model_loads_total{{{I}, reason!="startup"}}'


def _load_quantile(q: float) -> Target:
    return Target(
        f"histogram_quantile({q}, sum by (runtime, le) "
        f"(rate(inferd_model_load_duration_seconds_bucket{{{I}}}{RATE})))",
        f"{{{{runtime}}}} p{round(q * 100)}",
    )


def on_demand_row() -> Row:
    return Row(
        "On-demand loading",
        [
            Panel(
                "Loads by reason",
                "Models loaded per second by the on-demand loader (inferd_model_loads_total): "
                "startup (--load-model, --model-pin), first_request (never loaded before) and "
                "after_eviction (unloaded to make room, then asked for again). A steady "
                "after_eviction rate means the budget holds less than the working set.",
                [Target(f"sum by (reason) (rate({_LOADS}{RATE}))", "{{reason}}")],
                unit="ops",
                width=8,
                stacked=True,
            ),
            Panel(
                "Miss ratio",
                "Loads caused by requests over inference requests: the share of requests that "
                "found their model absent and waited for a load (1 - the hit ratio that "
                "`inferd plan --models` estimates).",
                [
                    Target(
                        f"sum(rate({_ON_REQUEST}{RATE})) / "
                        f"sum(rate(nv_inference_request_success{{{I}}}{RATE}))",
                        "miss ratio",
                    )
                ],
                unit="percentunit",
                width=8,
                thresholds=[(0, "green"), (0.05, "orange"), (0.2, "red")],
            ),
            Panel(
                "Evictions and thrash",
                "Idle models unloaded per second to make room (inferd_model_evictions_total), "
                "and loads held back because the models that could make room were loaded less "
                "than --model-min-residency-secs ago (inferd_model_eviction_thrash_total): "
                "when thrash grows, raise the budget or add a replica.",
                [
                    Target(f"sum(rate(inferd_model_evictions_total{{{I}}}{RATE}))", "evictions/s"),
                    Target(
                        f"sum(rate(inferd_model_eviction_thrash_total{{{I}}}{RATE}))",
                        "thrash/s",
                    ),
                ],
                unit="ops",
                width=8,
            ),
            Panel(
                "Memory against the budget",
                "Per instance: the loaded models' accounted bytes plus the server's own "
                "baseline (inferd_model_resident_bytes + inferd_model_memory_baseline_bytes), "
                "and the budget (inferd_model_memory_budget_bytes, --model-memory-budget).",
                [
                    Target(
                        f"sum by (instance) (inferd_model_resident_bytes{{{I}}}) + "
                        f"sum by (instance) (inferd_model_memory_baseline_bytes{{{I}}})",
                        "{{instance}} accounted",
                    ),
                    Target(
                        f"max by (instance) (inferd_model_memory_budget_bytes{{{I}}})",
                        "{{instance}} budget",
                    ),
                ],
                unit="bytes",
                width=8,
            ),
            Panel(
                "Resident models",
                "Each loaded model's accounted bytes (inferd_model_resident_bytes: its largest "
                "measured resident-set growth at a load, at least its size on disk), stacked.",
                [
                    Target(
                        f"sum by (model) (inferd_model_resident_bytes{{{M}}})",
                        "{{model}}",
                    )
                ],
                unit="bytes",
                width=8,
                stacked=True,
            ),
            Panel(
                "Load latency",
                "p50 and p99 of the time an on-demand load takes, warm-up included, by runtime "
                "(inferd_model_load_duration_seconds): the wait of a request that misses.",
                [_load_quantile(0.5), _load_quantile(0.99)],
                unit="s",
                width=8,
            ),
        ],
    )
