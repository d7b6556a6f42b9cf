"""``inferd serve``: flags named like ``tritonserver``'s, so existing launch scripts carry over."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from inferd.cli.admin_token import read_admin_token, read_feedback_token
from inferd.cli.flag_values import parse_bool
from inferd.cli.serve_drift import add_drift_flags, drift_settings
from inferd.cli.serve_frontends import add_frontends_flag
from inferd.cli.serve_memory import add_on_demand_flags, on_demand_fields
from inferd.cli.serve_observability import (
    add_observability_flags,
    payload_log_settings,
    trace_settings,
)
from inferd.cli.serve_openai import add_openai_flags, openai_fields
from inferd.errors import InferdError
from inferd.frontends.access import CLOSED_APIS, Api, parse_api, parse_restriction
from inferd.frontends.shared_memory import DEFAULT_MAX_BYTES, DEFAULT_MAX_REGIONS
from inferd.frontends.tls import TlsSettings
from inferd.repository.manager import ControlMode
from inferd.scheduling.response_cache import parse_cache_config
from inferd.server import Server, ServerConfig, StartupError

_log = logging.getLogger("inferd")


def _bool_flag(
    parser: argparse._ActionsContainer, name: str, default: bool, help_text: str
) -> None:
    parser.add_argument(
        name,
        type=parse_bool,
        nargs="?",
        const=True,
        default=default,
        metavar="BOOL",
        help=f"{help_text} (default: {str(default).lower()})",
    )


def add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a Triton-layout model repository over HTTP and gRPC",
        description=(
            "Serve the models of one or more Triton-layout model repositories over the KServe v2 "
            "protocol (HTTP on 8000, gRPC on 8001, Prometheus metrics on 8002), so tritonclient "
            "and perf_analyzer work unchanged. Flags follow tritonserver's names.\n\n"
            "Traffic policies (shadow, split, bandit, canary between a model's versions) need\n"
            "no flag: they are on for a model with a rollout.yaml beside its config.pbtxt, or\n"
            "one PUT to /v2/models/MODEL/rollout (see `inferd rollout` and docs/rollout.md)."
        ),
        epilog=(
            "examples:\n"
            "  inferd serve --model-repository examples/models\n"
            "  inferd serve --model-repository /models --model-control-mode explicit "
            "--load-model simple\n"
            "  inferd serve --model-repository /models --http-port 0 --grpc-port 0 "
            "--ready-file /tmp/ports.json"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    repo = p.add_argument_group("model repository")
    repo.add_argument(
        "--model-repository",
        "--model-store",
        dest="model_repository",
        action="append",
        required=True,
        type=Path,
        metavar="DIR",
        help="a model repository folder; repeat the flag to serve several (a folder named "
        "twice is served once)",
    )
    repo.add_argument(
        "--model-control-mode",
        choices=[m.value for m in ControlMode],
        default="none",
        help="none: load every model at start; poll: also follow changes on disk; explicit: load "
        "only --load-model models and allow the load/unload API; on-demand: load --load-model "
        "and --model-pin models at start, any other on its first request, within "
        "--model-memory-budget (default: none)",
    )
    repo.add_argument(
        "--repository-poll-secs",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="how often poll mode re-scans the repositories (default: 15)",
    )
    repo.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="explicit and on-demand modes: a model to load at start; repeatable; '*' loads all",
    )
    repo.add_argument(
        "--model-config-name",
        metavar="NAME",
        help="use <model>/configs/NAME.pbtxt instead of config.pbtxt where it exists",
    )
    repo.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="do not fill missing config fields from the model files",
    )
    repo.add_argument(
        "--strict-model-config",
        type=parse_bool,
        nargs="?",
        const=True,
        default=None,
        metavar="BOOL",
        help="deprecated inverse of auto-complete; true = --disable-auto-complete-config",
    )
    repo.add_argument(
        "--model-load-thread-count",
        type=int,
        default=4,
        metavar="N",
        help="models loaded in parallel (default: 4); in on-demand mode, loads of different "
        "models started by requests, each reserving its estimated size within "
        "--model-memory-budget before it starts (models over a quarter of the budget's room "
        "load one at a time)",
    )
    repo.add_argument(
        "--model-max-instances",
        type=int,
        default=64,
        metavar="N",
        help="the most instances one model version may ask for in its instance_group, in the "
        "repository or in a load request's config; each instance is a thread or, for Python "
        "models, a process with its own shared memory (default: 64)",
    )
    repo.add_argument(
        "--model-max-threads",
        type=int,
        default=0,
        metavar="N",
        help="the most runtime threads one model version may ask for through a thread "
        "parameter (intra_op_thread_count, INFERENCE_NUM_THREADS, any *thread* parameter, "
        "NUM_STREAMS) times its instances: a load request's config above it is refused (400) "
        "before anything is built; the repository's own config.pbtxt above it is honoured "
        "with a warning (default 0: 4 per core this process may use)",
    )
    repo.add_argument(
        "--warmup-from-recent",
        type=int,
        default=8,
        metavar="N",
        help="keep the last N requests each model answered (by reference, no copy) and run them "
        "on every instance of its next version or configuration before that version serves, "
        "when its config has no model_warmup of its own; a request the new version fails on "
        "fails the load and the old version keeps serving. Sequence models and ensembles are "
        "not warmed this way; 0 turns it off (default: 8)",
    )
    repo.add_argument(
        "--inline-execution-max-us",
        type=int,
        default=100,
        metavar="US",
        help="a batch whose measured cost is at most this many microseconds runs on the event "
        "loop thread instead of being handed to an instance thread, which saves two thread "
        "wake-ups per batch on tiny models (ONNX Runtime, OpenVINO, PyTorch, trees and "
        "scikit-learn; never Python models). The loop is blocked that long at most; 0 turns it "
        "off (default: 100)",
    )
    add_frontends_flag(repo)
    repo.add_argument(
        "--allow-pickle-models",
        action="store_true",
        help="let the sklearn backend load model.pkl / model.joblib files; unpickling runs "
        "code from the file, so only enable it for repositories you trust (default: off)",
    )
    repo.add_argument(
        "--backend-config",
        action="append",
        default=[],
        metavar="BACKEND,KEY=VALUE",
        help="backend setting, e.g. onnxruntime,default-max-batch-size=8",
    )

    cache = p.add_argument_group("response cache")
    cache.add_argument(
        "--cache-config",
        action="append",
        default=[],
        metavar="CACHE,KEY=VALUE",
        help="the server's response cache, e.g. local,size=1048576 (an LRU of that many bytes); "
        "models use it when their config.pbtxt has response_cache { enable: true }",
    )
    cache.add_argument(
        "--response-cache-byte-size",
        type=int,
        metavar="BYTES",
        help="the older spelling of --cache-config local,size=BYTES",
    )

    life = p.add_argument_group("startup and shutdown")
    _bool_flag(
        life, "--strict-readiness", True, "ready means every model that should be loaded is READY"
    )
    _bool_flag(
        life,
        "--exit-on-error",
        True,
        "exit if a model fails to load at start; false serves the others",
    )
    life.add_argument(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="grace period for in-flight requests on SIGINT/SIGTERM (default: 30)",
    )
    life.add_argument(
        "--ready-file",
        type=Path,
        metavar="FILE",
        help="write the bound ports as JSON here once serving (handy with port 0)",
    )

    net = p.add_argument_group("endpoints (port 0 picks a free port and logs it)")
    _bool_flag(net, "--allow-http", True, "serve HTTP")
    net.add_argument("--http-port", type=int, default=8000, metavar="PORT")
    net.add_argument("--http-address", default="0.0.0.0", metavar="ADDR")
    net.add_argument(
        "--http-max-input-size",
        type=int,
        default=64 * 1024 * 1024,
        metavar="BYTES",
        help="largest accepted HTTP request body, after decompression (default: 64 MiB)",
    )
    net.add_argument(
        "--http-max-json-input-size",
        type=int,
        default=8 * 1024 * 1024,
        metavar="BYTES",
        help="largest accepted JSON request body or JSON inference header; parsed JSON takes "
        "about ten times its size in memory, so send large tensors in binary (default: 8 MiB)",
    )
    net.add_argument(
        "--http-header-timeout-secs",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close connections whose request line and headers take longer (default: 10)",
    )
    net.add_argument(
        "--http-body-timeout-secs",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="close connections whose request body stops arriving for longer (default: 30)",
    )
    net.add_argument(
        "--http-idle-timeout-secs",
        type=float,
        default=75.0,
        metavar="SECONDS",
        help="close keep-alive connections idle for longer (default: 75)",
    )
    net.add_argument(
        "--http-max-connections",
        type=int,
        default=1024,
        metavar="N",
        help=(
            "open HTTP connections at most (default: 1024); at the limit a new connection "
            "replaces the longest-idle one, and when none is idle it is answered only if it "
            "is a health probe (others get 503), so probes are never starved"
        ),
    )
    add_openai_flags(p)
    _bool_flag(
        net,
        "--allow-console",
        True,
        "serve the web console at /console on the HTTP port (docs/console.md)",
    )
    _bool_flag(net, "--allow-grpc", True, "serve gRPC")
    net.add_argument("--grpc-port", type=int, default=8001, metavar="PORT")
    net.add_argument("--grpc-address", default="0.0.0.0", metavar="ADDR")
    _bool_flag(net, "--allow-metrics", True, "serve Prometheus metrics")
    net.add_argument("--metrics-port", type=int, default=8002, metavar="PORT")
    net.add_argument(
        "--metrics-address", default=None, metavar="ADDR", help="default: the HTTP address"
    )

    sec = p.add_argument_group(
        "security (see docs/security.md)",
        "API groups: " + ", ".join(api.value for api in Api),
    )
    _bool_flag(
        sec,
        "--allow-model-upload",
        False,
        "explicit mode: accept model files sent in load requests ('file:' parameters)",
    )
    _bool_flag(
        sec,
        "--allow-code-upload",
        False,
        "also accept uploads that run code on the server, judged by content and config, not "
        "by file name: Python models, pickles, TorchScript / torch.export and other zip "
        "archives, skops files with types beyond skops' safe set, native libraries, and "
        "configs selecting pytorch, python or custom operator libraries; needs "
        "--allow-model-upload",
    )
    sec.add_argument(
        "--allow-shared-memory",
        "--allow-client-shm",
        dest="allow_shared_memory",
        type=parse_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="let clients register system shared-memory regions (/dev/shm/<key>) and name them "
        "as inference inputs and outputs. A client that can reach the API can then read and "
        "write any /dev/shm object this server's user can open, so turn it on only where every "
        "client is trusted and on this machine (default: false)",
    )
    sec.add_argument(
        "--shared-memory-max-regions",
        type=int,
        default=DEFAULT_MAX_REGIONS,
        metavar="N",
        help="shared-memory regions registered at once at most; each keeps one open file, so "
        "keep it well below the open-file limit (ulimit -n; the server warns at start when "
        "the limit is under N + 1024). Enough for perf_analyzer's many regions; further "
        f"registrations are refused naming this flag (default: {DEFAULT_MAX_REGIONS})",
    )
    sec.add_argument(
        "--shared-memory-max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        metavar="BYTES",
        help="bytes registered in all regions together at most (a request that reads a region "
        "copies its input out, so this also bounds one request's copy); further registrations "
        f"are refused naming this flag (default: {DEFAULT_MAX_BYTES}, 4 GiB)",
    )
    sec.add_argument(
        "--admin-token-file",
        type=Path,
        metavar="FILE",
        help="require 'Authorization: Bearer <token>' (the file's content) on the "
        "model-repository, shared-memory, trace, logging, rollout and feedback APIs; the "
        "environment variable INFERD_ADMIN_TOKEN does the same. Without a token the rollout "
        "API (traffic policies, version rollback and unpin) is closed",
    )
    sec.add_argument(
        "--feedback-token-file",
        type=Path,
        metavar="FILE",
        help="a token of its own for POST /v2/models/MODEL/feedback (rewards that steer "
        "bandit policies), sent as 'Authorization: Bearer <token>'; the admin token is "
        "accepted there too. The environment variable INFERD_FEEDBACK_TOKEN does the same. "
        "Without either token the feedback API is closed",
    )
    sec.add_argument(
        "--open-api",
        action="append",
        default=[],
        choices=sorted(api.value for api in CLOSED_APIS),
        metavar="GROUP",
        help="open a closed API group to every client that reaches the HTTP port, without a "
        "token: 'rollout' (set, clear, promote and roll back traffic policies; roll back and "
        "unpin model versions) or 'feedback' (rewards for bandits). A --http-restricted-api "
        "on the group still applies; repeatable. Only for trusted networks",
    )
    sec.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="API[,API]:KEY=VALUE",
        help="HTTP requests to these API groups must carry the header KEY: VALUE; repeatable",
    )
    sec.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="API[,API]:KEY=VALUE",
        help="gRPC calls to these API groups must carry the metadata "
        "triton-grpc-protocol-KEY: VALUE (Triton's form; the bare KEY is accepted too); "
        "repeatable",
    )
    for proto in ("http", "grpc"):
        upper = proto.upper() if proto == "http" else "gRPC"
        _bool_flag(sec, f"--{proto}-use-ssl", False, f"serve {upper} over TLS")
        _bool_flag(
            sec,
            f"--{proto}-use-ssl-mutual",
            False,
            f"serve {upper} over mutual TLS: clients need a certificate signed by "
            f"--{proto}-root-cert",
        )
        sec.add_argument(
            f"--{proto}-server-cert",
            type=Path,
            metavar="PEM",
            help=f"{upper} server certificate (chain)",
        )
        sec.add_argument(
            f"--{proto}-server-key", type=Path, metavar="PEM", help=f"{upper} server private key"
        )
        sec.add_argument(
            f"--{proto}-root-cert",
            type=Path,
            metavar="PEM",
            help=f"{upper}: CA certificates that client certificates must chain to",
        )

    add_observability_flags(p)
    add_drift_flags(p)
    add_on_demand_flags(p)

    log = p.add_argument_group("logging")
    log.add_argument(
        "--log-verbose", type=int, default=0, metavar="LEVEL", help="0 = info; 1 or more = verbose"
    )
    p.set_defaults(func=run_serve)


def _backend_settings(items: list[str]) -> int:
    """Parse --backend-config values; only settings inferd honours are accepted."""
    default_max_batch = 4
    for item in items:
        backend, _, setting = item.partition(",")
        key, _, value = setting.partition("=")
        if backend == "onnxruntime" and key == "default-max-batch-size" and value.isdigit():
            default_max_batch = int(value)
            continue
        raise InferdError(
            f"--backend-config '{item}' is not supported; supported: "
            "onnxruntime,default-max-batch-size=<N>"
        )
    return default_max_batch


def _cache_bytes(args: argparse.Namespace) -> int | None:
    if args.response_cache_byte_size is None:
        return parse_cache_config(args.cache_config)
    if args.cache_config:
        raise InferdError(
            "--response-cache-byte-size and --cache-config are both given: use one of them"
        )
    return parse_cache_config([f"local,size={args.response_cache_byte_size}"])


def _tls(args: argparse.Namespace, proto: str) -> TlsSettings | None:
    use = getattr(args, f"{proto}_use_ssl")
    mutual = getattr(args, f"{proto}_use_ssl_mutual")
    cert = getattr(args, f"{proto}_server_cert")
    key = getattr(args, f"{proto}_server_key")
    root = getattr(args, f"{proto}_root_cert")
    if not (use or mutual):
        if cert or key or root:
            raise InferdError(
                f"--{proto}-server-cert/-key/--{proto}-root-cert are given but TLS is off: add "
                f"--{proto}-use-ssl (or --{proto}-use-ssl-mutual)"
            )
        return None
    if cert is None or key is None:
        raise InferdError(f"--{proto}-use-ssl needs --{proto}-server-cert and --{proto}-server-key")
    if mutual and root is None:
        raise InferdError(f"--{proto}-use-ssl-mutual needs --{proto}-root-cert")
    return TlsSettings(cert, key, root, require_client_cert=mutual)


def _admin_token(args: argparse.Namespace) -> str | None:
    return read_admin_token(args.admin_token_file, os.environ)


def _feedback_token(args: argparse.Namespace) -> str | None:
    return read_feedback_token(args.feedback_token_file, os.environ)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    auto_complete = not args.disable_auto_complete_config
    if args.strict_model_config is not None:
        auto_complete = auto_complete and not args.strict_model_config
    return ServerConfig(
        # one folder named twice is served once, as Triton keeps its repositories in a set
        model_repositories=tuple(dict.fromkeys(args.model_repository)),
        model_control_mode=ControlMode(args.model_control_mode),
        repository_poll_secs=args.repository_poll_secs,
        load_models=tuple(args.load_model),
        model_config_name=args.model_config_name,
        auto_complete_config=auto_complete,
        default_max_batch_size=_backend_settings(args.backend_config),
        strict_readiness=args.strict_readiness,
        exit_on_error=args.exit_on_error,
        exit_timeout_secs=args.exit_timeout_secs,
        model_load_thread_count=args.model_load_thread_count,
        model_max_instances=args.model_max_instances,
        model_max_threads=args.model_max_threads,
        warmup_from_recent=args.warmup_from_recent,
        inline_execution_max_us=args.inline_execution_max_us,
        frontends=args.frontends,
        allow_http=args.allow_http,
        http_address=args.http_address,
        http_port=args.http_port,
        http_max_input_bytes=args.http_max_input_size,
        http_max_json_input_bytes=args.http_max_json_input_size,
        http_header_timeout_s=args.http_header_timeout_secs,
        http_body_timeout_s=args.http_body_timeout_secs,
        http_idle_timeout_s=args.http_idle_timeout_secs,
        http_max_connections=args.http_max_connections,
        http_restricted_apis=tuple(
            parse_restriction(r, flag="--http-restricted-api") for r in args.http_restricted_api
        ),
        http_tls=_tls(args, "http"),
        **openai_fields(args),
        allow_grpc=args.allow_grpc,
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port,
        grpc_restricted_protocols=tuple(
            parse_restriction(r, flag="--grpc-restricted-protocol")
            for r in args.grpc_restricted_protocol
        ),
        grpc_tls=_tls(args, "grpc"),
        allow_metrics=args.allow_metrics,
        allow_console=args.allow_console,
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port,
        ready_file=args.ready_file,
        allow_pickle_models=args.allow_pickle_models,
        allow_model_upload=args.allow_model_upload,
        allow_code_upload=args.allow_code_upload,
        admin_token=_admin_token(args),
        feedback_token=_feedback_token(args),
        open_apis=frozenset(parse_api(name, flag="--open-api") for name in args.open_api),
        allow_shared_memory=args.allow_shared_memory,
        shared_memory_max_regions=args.shared_memory_max_regions,
        shared_memory_max_bytes=args.shared_memory_max_bytes,
        response_cache_bytes=_cache_bytes(args),
        payload_log=payload_log_settings(args),
        tracing=trace_settings(args),
        drift=drift_settings(args),
        **on_demand_fields(args),
    )


async def serve(config: ServerConfig) -> int:
    server = Server(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except (StartupError, OSError) as exc:
        _log.error("%s", exc)
        return 1
    _log.info("inferd is serving; press Ctrl+C to stop")
    await stop.wait()
    _log.info(
        "shutting down: finishing in-flight requests (up to %.0f s)", config.exit_timeout_secs
    )
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    await server.stop()
    _log.info("stopped")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.log_verbose > 0 else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = config_from_args(args)
    except InferdError as exc:
        print(f"inferd serve: error: {exc}", file=sys.stderr)
        return 2
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(config))
    return uvloop.run(serve(config))
