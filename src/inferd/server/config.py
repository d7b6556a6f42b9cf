"""The typed server configuration, parsed once at the edge (CLI or Python) and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from inferd.core.drift import DriftSettings
from inferd.errors import InvalidArgumentError
from inferd.frontends.access import CLOSED_APIS, AccessPolicy, Api, Restriction
from inferd.frontends.openai.limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_N,
    DEFAULT_MAX_TOKENS,
    OpenAILimits,
)
from inferd.frontends.shared_memory import DEFAULT_MAX_BYTES, DEFAULT_MAX_REGIONS
from inferd.frontends.tls import TlsSettings
from inferd.monitoring.payload_log.settings import PayloadLogSettings
from inferd.monitoring.tracing.settings import TraceSettings
from inferd.repository.manager import ControlMode
from inferd.repository.memory import MemoryBudget


@dataclass(frozen=True, slots=True)
class ServerConfig:
    model_repositories: tuple[Path, ...]
    model_control_mode: ControlMode = ControlMode.NONE
    repository_poll_secs: float = 15.0
    load_models: tuple[str, ...] = ()
    model_config_name: str | None = None
    auto_complete_config: bool = True
    default_max_batch_size: int = 4
    strict_readiness: bool = True
    exit_on_error: bool = True
    exit_timeout_secs: float = 30.0
    model_load_thread_count: int = 4
    model_max_instances: int = 64  # instances one model version may ask for
    model_max_threads: int = 0  # runtime threads one model may ask for (0: 4 per core)
    warmup_from_recent: int = 8  # recent requests per model that warm up its next version
    inline_execution_max_us: int = 100  # batches this short run on the event loop (0: never)
    frontends: int = 1  # front-end processes serving HTTP and gRPC (1: this process serves)
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    http_max_input_bytes: int = 64 * 1024 * 1024
    http_max_json_input_bytes: int = 8 * 1024 * 1024  # JSON costs ~10x its size once parsed
    http_header_timeout_s: float = 10.0  # a client must send its request head within this
    http_body_timeout_s: float = 30.0  # a request body may pause at most this long
    http_idle_timeout_s: float = 75.0  # keep-alive connections idle longer are closed
    http_max_connections: int = 1024  # at it: idle ones make room; else probes only, or 503
    http_restricted_apis: tuple[Restriction, ...] = ()
    http_tls: TlsSettings | None = None
    allow_console: bool = True  # the web console at /console on the HTTP port
    openai_port: int | None = None  # /v1 alone on a port of its own as well; None: HTTP port only
    openai_tokenizer: Path | None = None  # --tokenizer: every text model's tokenizer folder
    openai_max_tokens: int = DEFAULT_MAX_TOKENS  # ceiling on a request's max_tokens
    openai_max_n: int = DEFAULT_MAX_N  # ceiling on a request's n
    openai_max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # ceiling on a /v1 request body
    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    grpc_restricted_protocols: tuple[Restriction, ...] = ()
    grpc_tls: TlsSettings | None = None
    allow_metrics: bool = True
    metrics_address: str | None = None  # None: the HTTP address
    metrics_port: int = 8002
    ready_file: Path | None = None
    allow_pickle_models: bool = False  # unpickling runs code: sklearn model.pkl/.joblib only
    allow_model_upload: bool = False  # `file:` parameters of load requests (explicit mode)
    allow_code_upload: bool = False  # uploads that run code (Python models, pickles)
    admin_token: str | None = field(default=None, repr=False)  # Bearer token for admin APIs
    feedback_token: str | None = field(default=None, repr=False)  # Bearer token for feedback
    open_apis: frozenset[Api] = frozenset()  # closed groups opened to every client (--open-api)
    allow_shared_memory: bool = False  # clients' /dev/shm regions as tensor inputs and outputs
    shared_memory_max_regions: int = DEFAULT_MAX_REGIONS  # each keeps a file descriptor
    shared_memory_max_bytes: int = DEFAULT_MAX_BYTES  # all regions registered together
    response_cache_bytes: int | None = None  # --cache-config local,size=BYTES; None: no cache
    payload_log: PayloadLogSettings | None = None  # --payload-log DIR and its options
    tracing: TraceSettings | None = None  # --trace-config level=TIMESTAMPS...; None: off
    drift: DriftSettings | None = None  # --monitor-drift and its options; None: off
    model_memory_budget: MemoryBudget | None = None  # on-demand mode: None, never unload
    model_pins: tuple[str, ...] = ()  # on-demand mode: loaded at start, never unloaded
    model_min_residency_s: float = 10.0  # on-demand mode: loaded at least this long
    model_load_wait_s: float = 30.0  # on-demand mode: a request waits this long for a load
    model_load_retry_s: float = 10.0  # on-demand mode: a failed load is not retried this long
    model_eviction: str = "cost"  # on-demand mode: which idle models leave first (lru | cost)

    def __post_init__(self) -> None:
        if (
            self.model_control_mode not in (ControlMode.EXPLICIT, ControlMode.ON_DEMAND)
            and self.load_models
        ):
            raise InvalidArgumentError(
                "--load-model can only be used with --model-control-mode=explicit (or on-demand)"
            )
        self._check_on_demand()
        if "*" in self.load_models and len(self.load_models) > 1:
            raise InvalidArgumentError("--load-model=* must be the only --load-model given")
        if not self.model_repositories:
            raise InvalidArgumentError("at least one --model-repository is required")
        for port_name in ("http_port", "grpc_port", "metrics_port"):
            port = getattr(self, port_name)
            if not 0 <= port <= 65535:
                raise InvalidArgumentError(f"--{port_name.replace('_', '-')} {port} is not a port")
        if self.model_max_instances < 1:
            raise InvalidArgumentError("--model-max-instances must be >= 1")
        if self.model_load_thread_count < 1:
            raise InvalidArgumentError("--model-load-thread-count must be >= 1")
        if self.model_max_threads < 0:
            raise InvalidArgumentError(
                "--model-max-threads must be >= 0 (0: 4 per core this process may use)"
            )
        if self.warmup_from_recent < 0:
            raise InvalidArgumentError("--warmup-from-recent must be >= 0 (0 turns it off)")
        if self.inline_execution_max_us < 0:
            raise InvalidArgumentError("--inline-execution-max-us must be >= 0")
        if self.frontends < 1:
            raise InvalidArgumentError("--frontends must be >= 1 (or auto)")
        if self.repository_poll_secs <= 0:
            raise InvalidArgumentError("--repository-poll-secs must be > 0")
        if self.http_max_input_bytes <= 0:
            raise InvalidArgumentError("--http-max-input-size must be > 0")
        if self.http_max_json_input_bytes <= 0:
            raise InvalidArgumentError("--http-max-json-input-size must be > 0")
        if min(self.http_header_timeout_s, self.http_body_timeout_s, self.http_idle_timeout_s) <= 0:
            raise InvalidArgumentError(
                "--http-header-timeout-secs, --http-body-timeout-secs and "
                "--http-idle-timeout-secs must be > 0"
            )
        if self.response_cache_bytes is not None and self.response_cache_bytes <= 0:
            raise InvalidArgumentError("--cache-config local,size must be > 0")
        if self.shared_memory_max_regions < 1:
            raise InvalidArgumentError("--shared-memory-max-regions must be >= 1")
        if self.shared_memory_max_bytes < 1:
            raise InvalidArgumentError("--shared-memory-max-bytes must be >= 1")
        if not self.allow_shared_memory and (
            self.shared_memory_max_regions != DEFAULT_MAX_REGIONS
            or self.shared_memory_max_bytes != DEFAULT_MAX_BYTES
        ):
            raise InvalidArgumentError(
                "--shared-memory-max-regions and --shared-memory-max-bytes only apply with "
                "--allow-shared-memory=true"
            )
        if self.http_max_connections < 1:
            raise InvalidArgumentError("--http-max-connections must be >= 1")
        if self.openai_port is not None and not 0 <= self.openai_port <= 65535:
            raise InvalidArgumentError(f"--openai-port {self.openai_port} is not a port")
        if min(self.openai_max_tokens, self.openai_max_n, self.openai_max_body_bytes) < 1:
            raise InvalidArgumentError(
                "--openai-max-tokens, --openai-max-n and --openai-max-body-size must be >= 1"
            )
        if self.allow_code_upload and not self.allow_model_upload:
            raise InvalidArgumentError("--allow-code-upload needs --allow-model-upload")
        if self.allow_model_upload and self.model_control_mode is not ControlMode.EXPLICIT:
            raise InvalidArgumentError(
                "--allow-model-upload only applies to --model-control-mode=explicit"
            )
        http_only = sorted(
            api.value
            for r in self.grpc_restricted_protocols
            for api in r.apis & (CLOSED_APIS | {Api.OPENAI, Api.CONSOLE})
        )
        if http_only:
            raise InvalidArgumentError(
                f"--grpc-restricted-protocol: the gRPC API has no {' or '.join(http_only)} "
                "calls (they are served over HTTP only); restrict them with --http-restricted-api"
            )
        # built here so that a bad combination fails at start, not on the first request
        self.http_access()
        self.grpc_access()

    def _check_on_demand(self) -> None:
        on_demand = self.model_control_mode is ControlMode.ON_DEMAND
        given = [
            flag
            for flag, used in (
                ("--model-memory-budget", self.model_memory_budget is not None),
                ("--model-pin", bool(self.model_pins)),
                ("--model-min-residency-secs", self.model_min_residency_s != 10.0),
                ("--model-load-wait-secs", self.model_load_wait_s != 30.0),
                ("--model-load-retry-secs", self.model_load_retry_s != 10.0),
                ("--model-eviction", self.model_eviction != "cost"),
            )
            if used
        ]
        if given and not on_demand:
            raise InvalidArgumentError(
                f"{', '.join(given)} only apply to --model-control-mode=on-demand (none and poll "
                "load every model at start; explicit loads only through the load API)"
            )
        if self.model_memory_budget is None:
            needs = [
                f
                for f in given
                if f in ("--model-pin", "--model-min-residency-secs", "--model-eviction")
            ]
            if needs:
                raise InvalidArgumentError(
                    f"{', '.join(needs)} need --model-memory-budget (without a budget nothing "
                    "is unloaded)"
                )
        if self.model_min_residency_s < 0:
            raise InvalidArgumentError("--model-min-residency-secs must be >= 0")
        if self.model_load_wait_s <= 0:
            raise InvalidArgumentError("--model-load-wait-secs must be > 0")
        if self.model_load_retry_s < 0:
            raise InvalidArgumentError("--model-load-retry-secs must be >= 0")
        if self.model_eviction not in ("lru", "cost"):
            raise InvalidArgumentError(
                f"--model-eviction '{self.model_eviction}': one of lru, cost"
            )

    def http_access(self) -> AccessPolicy:
        return AccessPolicy(
            self.http_restricted_apis, self.admin_token, self.feedback_token, self.open_apis
        )

    def openai_limits(self) -> OpenAILimits:
        return OpenAILimits(
            max_tokens=self.openai_max_tokens,
            max_n=self.openai_max_n,
            max_body_bytes=self.openai_max_body_bytes,
        )

    def grpc_access(self) -> AccessPolicy:
        return AccessPolicy(
            self.grpc_restricted_protocols, self.admin_token, self.feedback_token, self.open_apis
        )
