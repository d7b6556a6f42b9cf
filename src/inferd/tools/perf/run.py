"""One ``inferd perf`` run over a transport: model, input data, load points, figures.

The caller builds the transport (HTTP, gRPC, or in process on its own engine) and writes the
reports; this module only measures. Everything it settles before measuring (the model, the
cost sources, what the figures mean) is returned beside the load points.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inferd.client.headers import names
from inferd.core.hostport import format_host
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.cost import CostProbe
from inferd.tools.perf.driver import Driver, Progress
from inferd.tools.perf.inputs import load_input_data
from inferd.tools.perf.llm_inputs import EndpointType, LlmOptions
from inferd.tools.perf.openai_client import OpenAITransport
from inferd.tools.perf.options import LoadMode, PerfOptions
from inferd.tools.perf.server_metrics import MetricsSampler
from inferd.tools.perf.summary import LoadPoint
from inferd.tools.perf.transport import ModelInfo, Transport


@dataclass
class PerfResult:
    points: list[LoadPoint]
    model: ModelInfo
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def check_model(model: ModelInfo, options: PerfOptions) -> None:
    """Options that cannot work with this model, refused before any load."""
    if model.max_batch_size == 0 and options.batch_size != 1:
        raise InvalidArgumentError(
            f"model '{model.name}' does not batch (max_batch_size 0): use -b 1"
        )
    if model.max_batch_size and options.batch_size > model.max_batch_size:
        raise InvalidArgumentError(
            f"-b {options.batch_size} is above model '{model.name}''s max_batch_size "
            f"{model.max_batch_size}"
        )
    if model.decoupled and options.transport not in ("grpc-stream", "in-process"):
        raise InvalidArgumentError(
            f"model '{model.name}' is decoupled (any number of responses per request): "
            "measure it with -i grpc --streaming"
        )


def settings_of(options: PerfOptions, model: ModelInfo, probe: CostProbe) -> dict[str, Any]:
    """The settings recorded with the figures (the JSON's ``settings``)."""
    return {
        "model": model.name,
        "version": options.version,
        "transport": options.transport,
        "url": options.url,
        "tls": options.https is not None or options.grpc_tls is not None,
        "headers": names(options.headers),  # the names only: values may be secrets
        "batch_size": options.batch_size,
        "mode": options.mode.value,
        "levels": options.load_levels(),
        "request_distribution": (
            options.distribution.value if options.mode is LoadMode.REQUEST_RATE else None
        ),
        "seed": options.seed,
        "measurement_interval_ms": options.measurement_interval_ms,
        "stability_percentage": options.stability_percentage,
        "max_trials": options.max_trials,
        "percentile": options.percentile,
        "sequence_model": model.sequence,
        "sequence_length": options.sequence_length if model.sequence else None,
        "input_data": list(options.input_data),
        "slip_bound_us": options.slip_bound_us,
        "server_cpu_source": probe.server_cpu_source,
        "energy_source": probe.energy_source,
        "llm": _llm_settings(options.llm),
    }


def _llm_settings(llm: LlmOptions | None) -> dict[str, Any] | None:
    if llm is None:
        return None
    return {
        "endpoint_type": llm.endpoint.value,
        "streaming": llm.streaming,
        "input_file": str(llm.input_file) if llm.input_file else None,
        "synthetic_input_tokens_mean": None if llm.input_file else llm.input_tokens_mean,
        "synthetic_input_tokens_stddev": None if llm.input_file else llm.input_tokens_stddev,
        "output_tokens_mean": llm.output_tokens_mean,
        "output_tokens_stddev": llm.output_tokens_stddev,
        "num_prompts": None if llm.input_file else llm.num_prompts,
        "tokenizer": str(llm.tokenizer) if llm.tokenizer else None,
        "server_token_count": llm.server_token_count,
    }


async def prepare(options: PerfOptions, transport: Transport) -> tuple[ModelInfo, int]:
    """Read the model, check the options against it, build its requests once; the model and
    how many distinct requests were prepared."""
    model = await transport.model_info()
    if isinstance(transport, OpenAITransport):  # prompts, built with the transport
        await transport.prepare([], 1, None)
        return model, transport.request_count
    check_model(model, options)
    data = load_input_data(
        model,
        list(options.input_data),
        shapes=dict(options.shapes),
        string_length=options.string_length,
        string_data=options.string_data,
        seed=options.seed,
    )
    requests = data.requests
    await transport.prepare(requests, options.batch_size, options.outputs)
    return model, len(requests)


async def run_perf(
    options: PerfOptions,
    transport: Transport,
    *,
    progress: Progress | None = None,
    on_settings: Callable[[dict[str, Any]], None] | None = None,
    in_process: bool = False,
) -> PerfResult:
    """Measure every load point of ``options`` through ``transport`` (which the caller closes).

    ``on_settings`` is called once the model is known and before the load starts (the CLI
    prints perf_analyzer's settings block there).
    """
    model, request_count = await prepare(options, transport)
    probe = CostProbe(
        server_pid=options.server_pid, metrics_url=options.metrics_url, in_process=in_process
    )
    await probe.start()
    sampler = await _sampler(options)
    settings = settings_of(options, model, probe)
    if sampler is not None:
        settings["metrics_url"] = sampler.url
        settings["metrics_interval_ms"] = options.metrics_interval_ms
    if on_settings is not None:
        on_settings(settings)
    driver = Driver(
        transport,
        options,
        request_count=request_count,
        sequence=model.sequence,
        probe=probe,
        progress=progress,
        llm=isinstance(transport, OpenAITransport),
        sampler=sampler,
    )
    points = await driver.run()
    notes = []
    if sampler is not None:
        notes += _metrics_notes(sampler, points)
    if isinstance(transport, OpenAITransport):
        notes += transport.notes
        llm = transport.options
        notes.append(f"input tokens {transport.counter.description}")
        if llm.server_token_count:
            notes.append("output tokens counted by the server (usage.completion_tokens)")
        elif llm.endpoint is not EndpointType.EMBEDDINGS:
            notes.append(f"output tokens {transport.counter.description}")
    if probe.server_cpu_source == "unknown":
        notes.append(
            "server CPU unknown: give --server-pid for a local server, or --metrics-url of a "
            "server that exports process_cpu_seconds_total"
        )
    if not probe.zones:
        notes.append(probe.energy_source)
    if in_process:
        notes.append(
            "in process: the server and the load generator share this process, so the CPU "
            "figures count both"
        )
    return PerfResult(points=points, model=model, settings=settings, notes=notes)


def default_metrics_url(options: PerfOptions) -> str:
    """``--metrics-url``, else port 8002 (the server's default metrics port) on -u's host."""
    if options.metrics_url:
        return options.metrics_url
    target = options.url if "://" in options.url else f"http://{options.url}"
    host = urllib.parse.urlsplit(target).hostname if options.url else None
    return format_host(host or "localhost", 8002)


async def _sampler(options: PerfOptions) -> MetricsSampler | None:
    """The sampler of ``--collect-metrics``, checked to answer before the load starts."""
    if not options.collect_metrics:
        return None
    if options.transport == "in-process" and not options.metrics_url:
        raise InvalidArgumentError(
            "--collect-metrics in process: the server here serves no metrics port; measure a "
            "running server over -i http/grpc, or give --metrics-url"
        )
    sampler = MetricsSampler(default_metrics_url(options), options.metrics_interval_ms)
    if not await sampler.check():
        raise InvalidArgumentError(
            f"--collect-metrics: nothing answered at {sampler.url}; give the server's metrics "
            "endpoint with --metrics-url host:port"
        )
    return sampler


def _metrics_notes(sampler: MetricsSampler, points: list[LoadPoint]) -> list[str]:
    notes = []
    if sampler.failures:
        notes.append(f"metrics: {sampler.failures} reads of {sampler.url} got no answer")
    read = [p.server_metrics for p in points if p.server_metrics is not None]
    if not read:
        notes.append(
            f"metrics: no reading of {sampler.url} fell inside a reported window: use a "
            "shorter --metrics-interval or a longer --measurement-interval"
        )
    elif not any(m.gpu_utilization for m in read):
        notes.append(f"metrics: {sampler.url} reports no GPU (only host figures)")
    return notes
