"""The composition root: build every component from a ServerConfig, start and stop in stages."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd import __version__
from inferd.backends.python.shm import PREFIX as PYTHON_SHM_PREFIX
from inferd.backends.registry import BackendRegistry, default_registry
from inferd.backends.threads import available_cores
from inferd.core.observe import InferenceObserver
from inferd.core.tracing import RequestTracer
from inferd.engine import EXTENSIONS, Engine
from inferd.errors import InferdError, UnavailableError
from inferd.frontends.shared_memory import (
    SHARED_MEMORY_EXTENSIONS,
    SharedMemoryRegistry,
    descriptor_shortfall,
)
from inferd.monitoring.drift.monitor import DriftMonitor
from inferd.monitoring.payload_log import PayloadLogger
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from inferd.repository.memory import (
    container_limit,
    limit_malloc_arenas,
    machine_bytes,
    resolve_budget,
)
from inferd.repository.on_demand import OnDemandSettings
from inferd.repository.recent import RecentRequests
from inferd.rollout.service import Rollout
from inferd.scheduling.response_cache import ResponseCache
from inferd.server.config import ServerConfig
from inferd.server.exposure import exposure_warnings

if TYPE_CHECKING:
    from inferd.metrics.snapshots import LoopReads

_log = logging.getLogger("inferd.server")


class StartupError(InferdError):
    """The server could not start (a model failed with --exit-on-error, a port was taken...)."""


@dataclass(slots=True)
class _Listener:
    name: str
    port: int
    stop: Any  # async callable(grace_s)


@dataclass(slots=True)
class Server:
    """One inferd server. ``await start()``, read ``ports``, ``await stop()``."""

    config: ServerConfig
    registry: BackendRegistry | None = None
    # watchers of answered requests (payload log, drift monitor) besides those the config builds
    observers: Sequence[InferenceObserver] = ()
    # the request tracer, instead of the one the config's tracing settings build
    tracer: RequestTracer | None = None
    manager: RepositoryManager = field(init=False)
    engine: Engine = field(init=False)
    shared_memory: SharedMemoryRegistry = field(init=False)
    response_cache: ResponseCache | None = field(default=None, init=False)
    payload_log: PayloadLogger | None = field(default=None, init=False)
    drift: DriftMonitor | None = field(default=None, init=False)
    # traffic policies: on for a model with a rollout.yaml or one set over the admin API
    rollout: Rollout = field(init=False)
    ports: dict[str, int] = field(default_factory=dict, init=False)
    _listeners: list[_Listener] = field(default_factory=list, init=False)
    _poller: asyncio.Task[None] | None = field(default=None, init=False)
    _stopped: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        cfg = self.config
        if cfg.response_cache_bytes is not None:
            self.response_cache = ResponseCache(cfg.response_cache_bytes)
        recent = RecentRequests(cfg.warmup_from_recent) if cfg.warmup_from_recent > 0 else None
        if self.registry is None:
            self.registry = default_registry(
                backend_options={"sklearn": {"allow_pickle": cfg.allow_pickle_models}}
            )
        on_demand = _on_demand_settings(cfg)
        self.manager = RepositoryManager(
            cfg.model_repositories,
            self.registry,
            mode=cfg.model_control_mode,
            options=LoadOptions(
                auto_complete=cfg.auto_complete_config,
                config_name=cfg.model_config_name,
                default_max_batch_size=cfg.default_max_batch_size,
                max_instances=cfg.model_max_instances,
                max_threads=cfg.model_max_threads,
                inline_max_us=cfg.inline_execution_max_us,
                response_cache=self.response_cache is not None,
                bounded_memory=on_demand is not None and on_demand.budget_bytes is not None,
            ),
            load_parallelism=cfg.model_load_thread_count,
            allow_model_upload=cfg.allow_model_upload,
            allow_code_upload=cfg.allow_code_upload,
            response_cache=self.response_cache,
            recent=recent,
            on_change=lambda name, model_dir: self.rollout.model_changed(name, model_dir),
            on_demand=on_demand,
        )
        self.rollout = Rollout(self.manager)
        self.shared_memory = SharedMemoryRegistry(
            enabled=cfg.allow_shared_memory,
            # the Python backend's segments, and those of Triton's python backend
            reserved_prefixes=(PYTHON_SHM_PREFIX, "triton_python_backend_shm_region_"),
            max_regions=cfg.shared_memory_max_regions,
            max_bytes=cfg.shared_memory_max_bytes,
            log=logging.getLogger("inferd.shared_memory"),
        )
        if cfg.allow_shared_memory:
            shortfall = descriptor_shortfall(cfg.shared_memory_max_regions)
            if shortfall is not None:
                logging.getLogger("inferd.shared_memory").warning("%s", shortfall)
        observers = list(self.observers)
        if recent is not None:
            observers.append(recent)  # recent requests warm up a model's next version
        if cfg.payload_log is not None:
            self.payload_log = PayloadLogger(cfg.payload_log)
            observers.append(self.payload_log)
        if cfg.drift is not None:
            self.drift = DriftMonitor(
                cfg.drift,
                cfg.model_repositories,
                serving=lambda name, version: self.engine.model_ready(name, str(version)),
            )
            observers.append(self.drift)
        if self.tracer is None and cfg.tracing is not None:
            from inferd.monitoring.tracing.otel import OtelTracer

            self.tracer = OtelTracer(cfg.tracing)
        self.engine = Engine(
            self.manager,
            extensions=EXTENSIONS + (SHARED_MEMORY_EXTENSIONS if cfg.allow_shared_memory else ()),
            server_version=__version__,
            strict_readiness=cfg.strict_readiness,
            response_cache=self.response_cache,
            observers=observers,
            tracer=self.tracer,
            router=self.rollout,
        )

    async def start(self) -> None:
        cfg = self.config
        missing = [r for r in cfg.model_repositories if not await asyncio.to_thread(Path(r).is_dir)]
        if missing:
            raise StartupError(f"model repository '{missing[0]}' does not exist or is not a folder")
        if self.payload_log is not None:
            try:
                await asyncio.to_thread(self.payload_log.start)
            except InferdError as exc:
                raise StartupError(str(exc)) from None
        if self.drift is not None:
            self.drift.start()
        failures = await self.manager.startup(cfg.load_models)
        for name, reason in failures.items():
            _log.error("model '%s' failed to load: %s", name, reason)
        if failures and cfg.exit_on_error:
            await self.manager.close()
            await self._stop_observers()
            raise StartupError(
                f"{len(failures)} model(s) failed to load ({', '.join(sorted(failures))}); "
                "fix them or start with --exit-on-error=false to serve the others"
            )
        try:
            await self._start_listeners()
        except BaseException:
            # nothing was served yet: a short grace lets the started listeners close quietly
            await self._stop_listeners(1.0)
            await self.manager.close()
            await self._stop_observers()
            raise
        if cfg.model_control_mode is ControlMode.POLL:
            self._poller = asyncio.create_task(
                self.manager.run_polling(cfg.repository_poll_secs), name="inferd-poll"
            )
        for listener in self._listeners:
            _log.info("Started %s service at port %d", listener.name, listener.port)
        for warning in exposure_warnings(cfg):
            _log.warning("%s", warning)
        # the file first: whoever sees the "ready" line may read it straight away
        if cfg.ready_file is not None:
            _write_ready_file(cfg.ready_file, self.ports)
        _log.info("inferd ready: %s", json.dumps(self.ports))

    def _openai_app(self) -> Any:
        """The /v1 API (OpenAI-compatible), served on the HTTP port and on --openai-port."""
        from inferd.frontends.openai.app import OpenAIApp
        from inferd.frontends.openai.tokenizer import TokenizerStore

        cfg = self.config
        return OpenAIApp(
            self.engine,
            tokenizers=TokenizerStore(cfg.model_repositories, cfg.openai_tokenizer),
            log=logging.getLogger("inferd.openai"),
            limits=cfg.openai_limits(),
            access=cfg.http_access(),
        )

    def _console_app(self) -> Any:
        """The web console, served on the HTTP port under /console."""
        from inferd.frontends.console.app import ConsoleApp, ConsoleInfo

        cfg = self.config
        info = ConsoleInfo(
            control_mode=cfg.model_control_mode.value,
            ports=self.ports,
            drift=self.drift is not None,
            rollout=True,
            stopping=lambda: self._stopped,
        )
        return ConsoleApp(
            self.engine,
            info=info,
            log=logging.getLogger("inferd.console"),
            access=cfg.http_access(),
        )

    async def _start_listeners(self) -> None:
        cfg = self.config
        openai = self._openai_app() if cfg.allow_http or cfg.openai_port is not None else None
        if cfg.frontends > 1:  # front-end processes serve HTTP, gRPC and --openai-port
            await self._start_frontends(openai)
        elif cfg.allow_http:
            from inferd.frontends.http.server import start_http_server

            app = self._http_app(openai)
            async with _starting("HTTP", cfg.http_address, cfg.http_port, "--http-port"):
                handle, port = await start_http_server(
                    app,
                    cfg.http_address,
                    cfg.http_port,
                    timeout_keep_alive_s=cfg.http_idle_timeout_s,
                    header_timeout_s=cfg.http_header_timeout_s,
                    body_timeout_s=cfg.http_body_timeout_s,
                    max_connections=cfg.http_max_connections,
                    tls=cfg.http_tls,
                )
            self._add("HTTP", port, handle.stop)
        if cfg.openai_port is not None and cfg.frontends == 1:
            from inferd.frontends.http.server import start_http_server

            async with _starting("OpenAI", cfg.http_address, cfg.openai_port, "--openai-port"):
                # the HTTP front end's server, connection limits, timeouts and TLS
                handle, port = await start_http_server(
                    openai,
                    cfg.http_address,
                    cfg.openai_port,
                    timeout_keep_alive_s=cfg.http_idle_timeout_s,
                    header_timeout_s=cfg.http_header_timeout_s,
                    body_timeout_s=cfg.http_body_timeout_s,
                    max_connections=cfg.http_max_connections,
                    tls=cfg.http_tls,
                )
            self._add("OpenAI", port, handle.stop)
        if cfg.allow_grpc and cfg.frontends == 1:
            from inferd.frontends.grpc.server import start_grpc_server

            async with _starting("GRPC", cfg.grpc_address, cfg.grpc_port, "--grpc-port"):
                grpc_server, port = await start_grpc_server(
                    self.engine,
                    cfg.grpc_address,
                    cfg.grpc_port,
                    log=logging.getLogger("inferd.grpc"),
                    access=cfg.grpc_access(),
                    tls=cfg.grpc_tls,
                    shared_memory=self.shared_memory,
                )
            self._add("GRPC", port, grpc_server.stop)
        if cfg.allow_metrics:
            from inferd.frontends.http.server import start_http_server
            from inferd.metrics.endpoint import MetricsApp, build_registry
            from inferd.metrics.snapshots import LoopReads

            address = cfg.metrics_address or cfg.http_address
            reads = LoopReads()
            registry = build_registry(self.engine, self._collectors(reads), reads)
            async with _starting("Metrics", address, cfg.metrics_port, "--metrics-port"):
                # the HTTP front end's server, connection limits and timeouts
                handle, port = await start_http_server(
                    MetricsApp(registry, reads),
                    address,
                    cfg.metrics_port,
                    timeout_keep_alive_s=cfg.http_idle_timeout_s,
                    header_timeout_s=cfg.http_header_timeout_s,
                    body_timeout_s=cfg.http_body_timeout_s,
                    max_connections=cfg.http_max_connections,
                )
            self._add("Metrics", port, handle.stop)

    def _http_app(self, openai: Any) -> Any:
        """The HTTP front end's app over this process's engine."""
        from inferd.frontends.http.app import HttpApp

        cfg = self.config
        return HttpApp(
            self.engine,
            max_body_bytes=cfg.http_max_input_bytes,
            max_json_body_bytes=cfg.http_max_json_input_bytes,
            access=cfg.http_access(),
            log=logging.getLogger("inferd.http"),
            shared_memory=self.shared_memory,
            drift_report=self._drift_report if self.drift is not None else None,
            rollout=self.rollout,
            openai=openai,
            console=self._console_app() if cfg.allow_console else None,
        )

    async def _start_frontends(self, openai: Any) -> None:
        """``--frontends K``: K processes serve HTTP and gRPC on the ports and hand requests
        to this process's engine; the rest of each request is answered here, in one place."""
        from inferd.frontends.grpc.servicer import GrpcInferenceServicer
        from inferd.server.frontends.bridge import EngineBridge
        from inferd.server.frontends.supervisor import Supervisor

        cfg = self.config
        servicer = None
        if cfg.allow_grpc:
            servicer = GrpcInferenceServicer(
                self.engine, log=logging.getLogger("inferd.grpc"), shared_memory=self.shared_memory
            )
        apps = {"http": self._http_app(openai)} if cfg.allow_http else {}
        if cfg.openai_port is not None:
            apps["openai"] = openai
        bridge = EngineBridge(
            self.engine,
            http_apps=apps,
            servicer=servicer,
            log=logging.getLogger("inferd.frontends"),
        )
        log = logging.getLogger("inferd.frontends")
        supervisor = Supervisor(cfg, bridge, cfg.frontends, log=log)
        async with _starting("front-end", cfg.http_address, cfg.http_port, "--http-port"):
            await supervisor.start()
        stop: Any = supervisor.stop  # one stop for all the front ends' services
        for name, port in supervisor.ports.items():
            self._add({"openai": "OpenAI"}.get(name, name.upper()), port, stop)
            stop = _nothing_to_stop
        _log.info("%d front-end processes serve %s", cfg.frontends, ", ".join(supervisor.ports))

    def _collectors(self, reads: LoopReads) -> list[Any]:
        """The metrics collectors of the components besides the models; each reads its
        component's statistics through ``reads`` (a ``LoopReads``: taken on the event loop)."""
        from inferd.metrics.rollout import RolloutCollector

        collectors: list[Any] = [RolloutCollector(reads(self.rollout.statistics))]
        if self.registry is not None:
            from inferd.metrics.llm import LlmCollector, llm_statistics

            backends = self.registry
            collectors.append(LlmCollector(reads(lambda: llm_statistics(backends))))
        if self.config.model_control_mode is ControlMode.ON_DEMAND:
            from inferd.metrics.on_demand import OnDemandCollector

            collectors.append(OnDemandCollector(reads(self.manager.on_demand_statistics)))
        if self.payload_log is not None:
            from inferd.metrics.payload_log import PayloadLogCollector

            collectors.append(PayloadLogCollector(reads(self.payload_log.statistics)))
        if self.drift is not None:
            from inferd.metrics.drift import DriftCollector

            collectors.append(DriftCollector(reads(self.drift.statistics)))
        return collectors

    def _drift_report(self, model: str, version: str) -> dict[str, Any]:
        from inferd.monitoring.drift.report import drift_report

        assert self.drift is not None
        return drift_report(self.drift.statistics(), self.drift.settings, model, version)

    def _add(self, name: str, port: int, stop: Any) -> None:
        self._listeners.append(_Listener(name, port, stop))
        self.ports[name.lower()] = port

    async def stop(self) -> None:
        """Not ready, refuse new requests, finish in-flight (grace period), close, unload."""
        if self._stopped:
            return
        self._stopped = True
        grace = self.config.exit_timeout_secs
        self.engine.stop_accepting()
        await self.rollout.close()  # mirrored requests are not waited for
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        loop = asyncio.get_running_loop()
        started = loop.time()
        if not await self.manager.drain(grace):
            _log.warning("in-flight requests did not finish within %.1f s", grace)
        remaining = max(0.0, grace - (loop.time() - started))
        await self._stop_listeners(remaining)
        self.shared_memory.close()
        await self.manager.close()
        await self._stop_observers()
        if self.config.ready_file is not None:
            with contextlib.suppress(OSError):
                self.config.ready_file.unlink()

    async def _stop_observers(self) -> None:
        """Write what the payload log still holds and close its files (after the last request
        was answered)."""
        if self.payload_log is not None:
            await asyncio.to_thread(self.payload_log.stop)
        if self.tracer is not None:
            await asyncio.to_thread(self.tracer.shutdown)
        if self.drift is not None:
            await asyncio.to_thread(self.drift.stop)

    async def _stop_listeners(self, grace_s: float) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in reversed(listeners):
            try:
                await listener.stop(grace_s)
            except Exception:
                _log.exception("stopping the %s service failed", listener.name)

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@contextlib.asynccontextmanager
async def _starting(service: str, address: str, port: int, flag: str) -> AsyncIterator[None]:
    """A listener that cannot start is one line naming the service, address and flag."""
    try:
        yield
    except (InferdError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StartupError(
            f"cannot start the {service} service on {address}:{port}: {reason} "
            f"(is another server using the port? choose another with {flag})"
        ) from None


async def _nothing_to_stop(grace_s: float) -> None:
    return None


def _on_demand_settings(cfg: ServerConfig) -> OnDemandSettings | None:
    """On-demand mode's settings, the budget in bytes (a share: of the container's limit)."""
    if cfg.model_control_mode is not ControlMode.ON_DEMAND:
        return None
    budget = None
    if cfg.model_memory_budget is not None:
        limit = container_limit()
        budget = resolve_budget(cfg.model_memory_budget, limit, machine_bytes())
        of = ""
        if cfg.model_memory_budget.share is not None:
            of = " of the container's limit" if limit is not None else " of the machine's memory"
        _log.info("memory budget: %d bytes (%s%s)", budget, cfg.model_memory_budget, of)
        arenas = max(2, available_cores())
        if limit_malloc_arenas(arenas):
            _log.info(
                "malloc arenas capped at %d (one per core) so that memory freed by unloads is "
                "not held apart in many arenas; set MALLOC_ARENA_MAX to choose",
                arenas,
            )
    return OnDemandSettings(
        budget_bytes=budget,
        pins=frozenset(cfg.model_pins),
        min_residency_s=cfg.model_min_residency_s,
        wait_s=cfg.model_load_wait_s,
        load_retry_s=cfg.model_load_retry_s,
        eviction=cfg.model_eviction,
        load_threads=cfg.model_load_thread_count,
    )


def _write_ready_file(path: Path, ports: dict[str, int]) -> None:
    """Write the bound ports atomically so a watcher never reads a half-written file."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), **ports}) + "\n")
    os.replace(tmp, path)


__all__ = ["Server", "ServerConfig", "StartupError", "UnavailableError"]
