"""The panels of the inferd Grafana dashboard: four rows (service, per model, rollout, drift),
each panel its title, description, queries, unit and size. ``build.py`` lays them out and writes
the dashboard's JSON; edit the panels here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RATE", "ROWS", "I", "M", "Panel", "Row", "Target"]

# label filters of every query: the instances and models chosen at the top of the dashboard
I = 'instance=~"$instance"'  # noqa: E741 (short on purpose: it is in every query)
M = 'instance=~"$instance", model=~"$model"'
RATE = "[$__rate_interval]"


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False  # one value per series (tables), not a range


@dataclass
class Panel:
    title: str
    description: str
    targets: list[Target]
    kind: str = "timeseries"  # timeseries | stat | table
    unit: str = "short"
    width: int = 12
    height: int = 8
    min: float | None = 0
    max: float | None = None
    stacked: bool = False
    thresholds: list[tuple[float, str]] = field(default_factory=list)  # (from, colour)
    mappings: dict[str, str] = field(default_factory=dict)  # value -> text (stat panels)
    log_scale: bool = False
    right_axis: dict[str, str] = field(default_factory=dict)  # refId -> unit, on the right


@dataclass
class Row:
    title: str
    panels: list[Panel]
    repeat: str | None = None  # a variable: one copy of the row per value


def _per_request(metric: str, label: str, by: str = "model") -> Target:
    """Microseconds per successful request of a cumulative Triton duration counter."""
    return Target(
        f"sum by ({by}) (rate({metric}{{{M}}}{RATE}))"
        f" / sum by ({by}) (rate(nv_inference_request_success{{{M}}}{RATE}))",
        f"v{{{{version}}}} {label}" if by == "version" else f"{{{{{by}}}}} {label}",
    )


def _quantile(q: float, metric: str, by: str, legend: str) -> Target:
    return Target(
        f"histogram_quantile({q}, sum by ({by}le) (rate({metric}_bucket{{{M}}}{RATE})))",
        legend,
    )


def service_row() -> Row:
    ok = f"sum(rate(nv_inference_request_success{{{M}}}{RATE}))"
    failed = f"sum(rate(nv_inference_request_failure{{{M}}}{RATE}))"
    return Row(
        "Service",
        [
            Panel(
                "Ready",
                "inferd_server_ready of each chosen instance: 1 while /v2/health/ready answers "
                "ready (every expected model loaded, not shutting down). up is Prometheus' own: "
                "0 when the metrics port cannot be scraped.",
                [
                    Target(f"min(inferd_server_ready{{{I}}})", "ready"),
                    Target(f"min(up{{{I}}})", "scraped"),
                ],
                kind="stat",
                width=4,
                height=4,
                mappings={"0": "NOT READY", "1": "ready"},
                thresholds=[(0, "red"), (1, "green")],
            ),
            Panel(
                "Requests/s",
                "Successful plus failed inference requests per second, every chosen model.",
                [Target(f"{ok} + ({failed} or vector(0))", "requests/s")],
                kind="stat",
                unit="reqps",
                width=4,
                height=4,
            ),
            Panel(
                "Failed share",
                "Failed requests over all requests (nv_inference_request_failure, every "
                "reason) in the chosen range window.",
                [Target(f"({failed} or vector(0)) / ({ok} + ({failed} or vector(0)))", "failed")],
                kind="stat",
                unit="percentunit",
                width=4,
                height=4,
                thresholds=[(0, "green"), (0.01, "orange"), (0.05, "red")],
            ),
            Panel(
                "p99 latency",
                "99th percentile of the time a request spends inside the server "
                "(inferd_request_latency_us histogram, every chosen model).",
                [_quantile(0.99, "inferd_request_latency_us", "", "p99")],
                kind="stat",
                unit="µs",
                width=4,
                height=4,
            ),
            Panel(
                "Pending requests",
                "Requests waiting for execution right now (nv_inference_pending_request_count).",
                [Target(f"sum(nv_inference_pending_request_count{{{M}}})", "pending")],
                kind="stat",
                width=4,
                height=4,
            ),
            Panel(
                "Drift alerts",
                "Features whose drift alert is raised (inferd_drift_alert; see the drift row).",
                [Target(f"sum(inferd_drift_alert{{{M}}}) or vector(0)", "features")],
                kind="stat",
                width=4,
                height=4,
                thresholds=[(0, "green"), (1, "orange")],
            ),
            Panel(
                "Requests per second",
                "Successful requests per model, and failed requests per model and reason "
                "(REJECTED: refused before execution; CANCELED; BACKEND: the model failed; "
                "OTHER).",
                [
                    Target(
                        f"sum by (model) (rate(nv_inference_request_success{{{M}}}{RATE}))",
                        "{{model}} ok",
                    ),
                    Target(
                        f"sum by (model, reason) (rate(nv_inference_request_failure{{{M}}}{RATE}))",
                        "{{model}} failed {{reason}}",
                    ),
                ],
                unit="reqps",
            ),
            Panel(
                "Failed share and refusals",
                "Failed over all requests per model, and requests refused before execution "
                "per second by reason (inferd_rejected_requests_total: queue full, queue "
                "timeout...; right axis).",
                [
                    Target(
                        f"sum by (model) (rate(nv_inference_request_failure{{{M}}}{RATE})) / "
                        f"(sum by (model) (rate(nv_inference_request_success{{{M}}}{RATE})) + "
                        f"sum by (model) (rate(nv_inference_request_failure{{{M}}}{RATE})))",
                        "{{model}} failed share",
                    ),
                    Target(
                        f"sum by (model, reason) "
                        f"(rate(inferd_rejected_requests_total{{{M}}}{RATE}))",
                        "{{model}} refused/s {{reason}}",
                    ),
                ],
                unit="percentunit",
                right_axis={"B": "reqps"},
            ),
            Panel(
                "Latency p50 / p95 / p99",
                "Percentiles of the time a request spends inside the server, from the "
                "inferd_request_latency_us histogram (every chosen model together), and the "
                "mean from nv_inference_request_duration_us.",
                [
                    _quantile(0.5, "inferd_request_latency_us", "", "p50"),
                    _quantile(0.95, "inferd_request_latency_us", "", "p95"),
                    _quantile(0.99, "inferd_request_latency_us", "", "p99"),
                    Target(
                        f"sum(rate(nv_inference_request_duration_us{{{M}}}{RATE})) / "
                        f"sum(rate(nv_inference_request_success{{{M}}}{RATE}))",
                        "mean",
                    ),
                ],
                unit="µs",
            ),
            Panel(
                "Queue time vs compute time",
                "Mean microseconds per request spent waiting in the queue and computing "
                "(input, inference, output), stacked. A queue share that grows means the "
                "instances are saturated: add instances or let the batcher form larger batches.",
                [
                    _per_request("nv_inference_queue_duration_us", "queue"),
                    _per_request("nv_inference_compute_input_duration_us", "compute input"),
                    _per_request("nv_inference_compute_infer_duration_us", "compute infer"),
                    _per_request("nv_inference_compute_output_duration_us", "compute output"),
                ],
                unit="µs",
                stacked=True,
            ),
            Panel(
                "Pending requests",
                "Requests waiting for execution per model (nv_inference_pending_request_count).",
                [
                    Target(
                        f"sum by (model) (nv_inference_pending_request_count{{{M}}})",
                        "{{model}}",
                    )
                ],
            ),
            Panel(
                "Batch size",
                "Rows per model execution: the mean (inferd_batch_size) and its 95th "
                "percentile, per model. 1 everywhere means no batching is happening.",
                [
                    Target(
                        f"sum by (model) (rate(inferd_batch_size_sum{{{M}}}{RATE})) / "
                        f"sum by (model) (rate(inferd_batch_size_count{{{M}}}{RATE}))",
                        "{{model}} mean",
                    ),
                    _quantile(0.95, "inferd_batch_size", "model, ", "{{model}} p95"),
                ],
            ),
            Panel(
                "Process CPU",
                "CPU cores the server process uses (process_cpu_seconds_total), and the "
                "host's utilization (nv_cpu_utilization, 0 to 1, on the right axis).",
                [
                    Target(
                        f"sum by (instance) (rate(process_cpu_seconds_total{{{I}}}{RATE}))",
                        "{{instance}} cores",
                    ),
                    Target(f"nv_cpu_utilization{{{I}}}", "{{instance}} host utilization"),
                ],
                right_axis={"B": "percentunit"},
            ),
            Panel(
                "Memory",
                "Resident memory of the server process (process_resident_memory_bytes) and the "
                "host's used and total memory (nv_cpu_memory_*).",
                [
                    Target(f"process_resident_memory_bytes{{{I}}}", "{{instance}} process RSS"),
                    Target(f"nv_cpu_memory_used_bytes{{{I}}}", "{{instance}} host used"),
                    Target(f"nv_cpu_memory_total_bytes{{{I}}}", "{{instance}} host total"),
                ],
                unit="bytes",
            ),
            Panel(
                "Payload log",
                "Requests written to the payload log per second, sampled requests it dropped "
                "(queue_full: the writer fell behind; write_error), and requests waiting for "
                "its writer.",
                [
                    Target(
                        f"sum by (model) (rate(inferd_payload_log_requests_total{{{M}}}{RATE}))",
                        "{{model}} written/s",
                    ),
                    Target(
                        f"sum by (model, reason) "
                        f"(rate(inferd_payload_log_dropped_total{{{M}}}{RATE}))",
                        "{{model}} dropped/s {{reason}}",
                    ),
                    Target(f"sum(inferd_payload_log_queued_requests{{{I}}})", "queued"),
                ],
            ),
            Panel(
                "Failed model loads",
                "Failed loads per model since each server started "
                "(inferd_model_load_failures_total): versions that failed to load, reloads "
                "that failed while the old version kept serving, bad configs. The index "
                "(POST /v2/repository/index) gives the reasons.",
                [
                    Target(
                        f"max by (instance, model) (inferd_model_load_failures_total{{{M}}})",
                        "{{model}} on {{instance}}",
                    )
                ],
                thresholds=[(0, "green"), (1, "red")],
            ),
            Panel(
                "Batches sent, by why",
                "Batches the dynamic batcher sent per second, by reason: full, preferred "
                "size, shape_mismatch, no_room, delay_expired, no_delay.",
                [
                    Target(
                        f"sum by (reason) (rate(inferd_batches_closed_total{{{M}}}{RATE}))",
                        "{{reason}}",
                    )
                ],
                stacked=True,
            ),
        ],
    )


def model_row() -> Row:
    """One copy per chosen model; its queries filter on that one model."""
    return Row(
        "Model $model",
        [
            Panel(
                "Requests per second, by version",
                "Successful and failed requests per second of each version of the model.",
                [
                    Target(
                        f"sum by (version) (rate(nv_inference_request_success{{{M}}}{RATE}))",
                        "v{{version}} ok",
                    ),
                    Target(
                        f"sum by (version, reason) "
                        f"(rate(nv_inference_request_failure{{{M}}}{RATE}))",
                        "v{{version}} failed {{reason}}",
                    ),
                ],
                unit="reqps",
                width=8,
            ),
            Panel(
                "Latency by version",
                "p50 and p99 of the time inside the server, per version "
                "(inferd_request_latency_us).",
                [
                    _quantile(0.5, "inferd_request_latency_us", "version, ", "v{{version}} p50"),
                    _quantile(0.99, "inferd_request_latency_us", "version, ", "v{{version}} p99"),
                ],
                unit="µs",
                width=8,
            ),
            Panel(
                "Where the time goes",
                "Mean microseconds per request: queue, compute input, inference, output.",
                [
                    _per_request("nv_inference_queue_duration_us", "queue", "version"),
                    _per_request("nv_inference_compute_input_duration_us", "input", "version"),
                    _per_request("nv_inference_compute_infer_duration_us", "infer", "version"),
                    _per_request("nv_inference_compute_output_duration_us", "output", "version"),
                ],
                unit="µs",
                stacked=True,
                width=8,
            ),
            Panel(
                "Inferences per execution",
                "nv_inference_count over nv_inference_exec_count: the mean batch the model "
                "runs (rows per execution).",
                [
                    Target(
                        f"sum by (version) (rate(nv_inference_count{{{M}}}{RATE})) / "
                        f"sum by (version) (rate(nv_inference_exec_count{{{M}}}{RATE}))",
                        "v{{version}}",
                    )
                ],
                width=8,
            ),
            Panel(
                "Pending and refused",
                "Requests waiting now, and requests refused per second by reason.",
                [
                    Target(
                        f"sum by (version) (nv_inference_pending_request_count{{{M}}})",
                        "v{{version}} pending",
                    ),
                    Target(
                        f"sum by (reason) (rate(inferd_rejected_requests_total{{{M}}}{RATE}))",
                        "refused/s {{reason}}",
                    ),
                ],
                width=8,
            ),
            Panel(
                "Response cache hit share",
                "Hits over lookups of the response cache (only models that enable it).",
                [
                    Target(
                        f"sum(rate(nv_cache_num_hits_per_model{{{M}}}{RATE})) / "
                        f"(sum(rate(nv_cache_num_hits_per_model{{{M}}}{RATE})) + "
                        f"sum(rate(nv_cache_num_misses_per_model{{{M}}}{RATE})))",
                        "hit share",
                    )
                ],
                unit="percentunit",
                max=1,
                width=8,
            ),
        ],
        repeat="model",
    )


def rollout_row() -> Row:
    by = "model, variant"
    return Row(
        "Rollout",
        [
            Panel(
                "Requests per second, by variant",
                "Requests each variant of a traffic policy answered per second.",
                [
                    Target(
                        f"sum by ({by}) (rate(inferd_rollout_requests_total{{{M}}}{RATE}))",
                        "{{model}} {{variant}}",
                    )
                ],
                unit="reqps",
                width=8,
            ),
            Panel(
                "Error share, by variant",
                "Errors over requests of each variant.",
                [
                    Target(
                        f"sum by ({by}) (rate(inferd_rollout_errors_total{{{M}}}{RATE})) / "
                        f"sum by ({by}) (rate(inferd_rollout_requests_total{{{M}}}{RATE}))",
                        "{{model}} {{variant}}",
                    )
                ],
                unit="percentunit",
                width=8,
            ),
            Panel(
                "p99 latency, by variant",
                "The 99th percentile latency of each variant, as the rollout measures it.",
                [
                    Target(
                        f"max by ({by}) (inferd_rollout_latency_p99_seconds{{{M}}})",
                        "{{model}} {{variant}}",
                    )
                ],
                unit="s",
                width=8,
            ),
            Panel(
                "Traffic share",
                "Share of each model's new requests sent to each variant now (a shadow: the "
                "share copied to it; a bandit: its chance of being chosen).",
                [
                    Target(
                        f"max by ({by}) (inferd_rollout_traffic_share{{{M}}})",
                        "{{model}} {{variant}}",
                    )
                ],
                unit="percentunit",
                max=1,
                width=8,
            ),
            Panel(
                "Reward mean and feedback",
                "Mean reward of each variant from the feedback received, and feedback per "
                "second (inferd_rollout_feedback_total).",
                [
                    Target(
                        f"max by ({by}) (inferd_rollout_reward_mean{{{M}}})",
                        "{{model}} {{variant}} reward",
                    ),
                    Target(
                        f"sum by ({by}) (rate(inferd_rollout_feedback_total{{{M}}}{RATE}))",
                        "{{model}} {{variant}} feedback/s",
                    ),
                ],
                min=None,
                width=8,
            ),
            Panel(
                "P(better)",
                "Posterior probability that each variant beats the baseline.",
                [
                    Target(
                        f"max by ({by}) (inferd_rollout_p_better{{{M}}})",
                        "{{model}} {{variant}}",
                    )
                ],
                unit="percentunit",
                max=1,
                width=8,
            ),
            Panel(
                "Shadow agreement",
                "Share of compared requests whose answers agreed (a shadow's copies, a "
                "canary's comparisons with the primary), and such requests per second.",
                [
                    Target(
                        f"max by ({by}) (inferd_rollout_shadow_agreement{{{M}}})",
                        "{{model}} {{variant}} agreement",
                    ),
                    Target(
                        f"sum by ({by}) (rate(inferd_rollout_shadow_requests_total{{{M}}}{RATE}))",
                        "{{model}} {{variant}} shadow req/s",
                    ),
                ],
                width=8,
            ),
            Panel(
                "Canary stage",
                "The stage each canary is at (0 is its first stage).",
                [
                    Target(
                        f"max by (model) (inferd_rollout_canary_stage{{{M}}})",
                        "{{model}}",
                    )
                ],
                width=8,
            ),
            Panel(
                "Canary rollbacks",
                "Rollbacks of each model's canary in the dashboard's time range (automatic, "
                "when the candidate broke a limit, or by hand).",
                [
                    Target(
                        f"sum by (model) "
                        f"(increase(inferd_rollout_canary_rollbacks_total{{{M}}}[$__range]))",
                        "{{model}}",
                    )
                ],
                kind="stat",
                width=8,
                thresholds=[(0, "green"), (1, "red")],
            ),
        ],
    )


def drift_row() -> Row:
    f = "model, version, feature"
    return Row(
        "Drift and data quality",
        [
            Panel(
                "Features with a raised alert",
                "Every feature whose drift alert is raised now (inferd_drift_alert == 1). "
                'Role "output" is prediction drift. Details: GET /v2/models/MODEL/drift.',
                [Target(f"inferd_drift_alert{{{M}}} == 1", instant=True)],
                kind="table",
                width=8,
            ),
            Panel(
                "PSI",
                "Population stability index of each feature's window against its profile "
                "(above 0.2 is drift; an alert clears under 0.1).",
                [
                    Target(
                        f"max by ({f}) (inferd_drift_psi{{{M}}})",
                        "{{model}} v{{version}} {{feature}}",
                    )
                ],
                thresholds=[(0, "green"), (0.2, "red")],
                width=8,
            ),
            Panel(
                "Kolmogorov-Smirnov p-value",
                "KS p-value of each numeric feature (log scale); under alpha divided by the "
                "number of tests is drift.",
                [
                    Target(
                        f"min by ({f}) (inferd_drift_ks_pvalue{{{M}}})",
                        "{{model}} v{{version}} {{feature}}",
                    )
                ],
                min=None,
                log_scale=True,
                width=8,
            ),
            Panel(
                "Wasserstein distance",
                "Wasserstein-1 distance of each numeric feature, in the feature's own units.",
                [
                    Target(
                        f"max by ({f}) (inferd_drift_wasserstein{{{M}}})",
                        "{{model}} v{{version}} {{feature}}",
                    )
                ],
                width=8,
            ),
            Panel(
                "Categorical and embedding tests",
                "Chi-square p-value and Jensen-Shannon distance of categorical features; MMD "
                "permutation p-value of embedding and image tensors.",
                [
                    Target(
                        f"min by ({f}) (inferd_drift_chi2_pvalue{{{M}}})",
                        "{{model}} {{feature}} chi2 p",
                    ),
                    Target(
                        f"max by ({f}) (inferd_drift_js_distance{{{M}}})",
                        "{{model}} {{feature}} JS",
                    ),
                    Target(
                        f"min by ({f}) (inferd_drift_mmd_pvalue{{{M}}})",
                        "{{model}} {{feature}} MMD p",
                    ),
                ],
                width=8,
            ),
            Panel(
                "Data quality",
                "Per second: NaN values, values outside the profile's range, unseen "
                "categories (per feature), and requests missing an optional input.",
                [
                    Target(
                        f"sum by ({f}) (rate(inferd_data_quality_nan_total{{{M}}}{RATE})) > 0",
                        "{{model}} {{feature}} NaN",
                    ),
                    Target(
                        f"sum by ({f}) "
                        f"(rate(inferd_data_quality_out_of_range_total{{{M}}}{RATE})) > 0",
                        "{{model}} {{feature}} out of range",
                    ),
                    Target(
                        f"sum by ({f}) "
                        f"(rate(inferd_data_quality_unseen_category_total{{{M}}}{RATE})) > 0",
                        "{{model}} {{feature}} unseen",
                    ),
                    Target(
                        f"sum by (model, tensor) "
                        f"(rate(inferd_data_quality_missing_total{{{M}}}{RATE})) > 0",
                        "{{model}} {{tensor}} missing",
                    ),
                ],
                width=8,
            ),
            Panel(
                "Monitor throughput",
                "Rows the drift monitor observed per second, and its evaluations per minute.",
                [
                    Target(
                        f"sum by (model) (rate(inferd_drift_observed_rows_total{{{M}}}{RATE}))",
                        "{{model}} rows/s",
                    ),
                    Target(
                        f"60 * sum by (model) (rate(inferd_drift_evaluations_total{{{M}}}{RATE}))",
                        "{{model}} evaluations/min",
                    ),
                ],
                width=8,
            ),
            Panel(
                "Monitor health",
                "Requests drift monitoring skipped (queue full) or failed to process per "
                "second, and requests waiting for its thread.",
                [
                    Target(
                        f"sum(rate(inferd_drift_dropped_requests_total{{{I}}}{RATE}))",
                        "dropped/s",
                    ),
                    Target(
                        f"sum(rate(inferd_drift_failed_requests_total{{{I}}}{RATE}))",
                        "failed/s",
                    ),
                    Target(f"sum(inferd_drift_queued_requests{{{I}}})", "queued"),
                ],
                width=8,
            ),
            Panel(
                "Window fill",
                "Rows in each version's sliding window (statistics appear once it is full).",
                [
                    Target(
                        f"max by (model, version) (inferd_drift_window_rows{{{M}}})",
                        "{{model}} v{{version}}",
                    )
                ],
                width=8,
            ),
        ],
    )


ROWS = (service_row, model_row, rollout_row, drift_row)
