"""The web console: ``GET /console`` on the HTTP port, an ASGI handler of its own.

The HTTP front end hands it every path under ``/console`` (:meth:`ConsoleApp.handle`). It serves

* the page and its assets (HTML, CSS, JavaScript modules shipped inside the package, looked up
  by exact name in a table built when the app is built: nothing from a request becomes a path);
* ``GET /console/api/summary``: the server's state and every model's row (JSON);
* ``GET /console/api/events[?model=NAME]``: one server-sent-events stream per page, an event a
  second computed from the engine's own ``statistics()`` snapshots (:mod:`.live`), with the
  full window of the model named by ``model``.

Every answer carries a strict Content-Security-Policy (scripts from this origin only, no inline
script or style, no framing), ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy:
no-referrer``. The page reads the other data (config, metadata, drift, rollout) and takes
actions through the existing v2 API, which checks its own API groups and the admin token. The
console group (``console``) can be restricted with ``--http-restricted-api console:K=V``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import orjson
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from inferd.codecs import v2_http
from inferd.core.names import check_model_name
from inferd.engine import Engine
from inferd.errors import (
    InferdError,
    InvalidArgumentError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from inferd.frontends.access import AccessPolicy, Api, HeaderLookup
from inferd.frontends.console.live import Sample, process_usage, server_window
from inferd.frontends.http.asgi import Message, Receive, Scope, Send, header_lookup
from inferd.frontends.http.errors import describe_exception
from inferd.frontends.http.generate import ClientGone, watched

__all__ = ["MAX_STREAMS", "PREFIX", "SECURITY_HEADERS", "ConsoleApp", "ConsoleInfo"]

PREFIX = "/console"
#: event streams open at once (each a page); more are answered 503 until one closes
MAX_STREAMS = 64
_ASSETS = "/console/assets/"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".svg": b"image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class ConsoleInfo:
    """What the server tells the console about itself (the composition root fills it)."""

    control_mode: str
    ports: Mapping[str, int]  # the server's own mapping, filled as listeners start
    drift: bool = False  # drift monitoring is on (the page then asks for drift reports)
    rollout: bool = False  # traffic policies are served
    stopping: Callable[[], bool] = lambda: False  # event streams end once this is true
    started_s: float = field(default_factory=time.monotonic)  # when the server began serving


@dataclass(frozen=True, slots=True)
class _Asset:
    body: bytes
    content_type: bytes
    etag: bytes


def _load_assets() -> dict[str, _Asset]:
    """Every shipped asset by its exact file name (read once, when the app is built)."""
    found: dict[str, _Asset] = {}
    for entry in resources.files("inferd.frontends.console").joinpath("assets").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            body = entry.read_bytes()
            etag = b'"' + hashlib.sha256(body).hexdigest()[:20].encode() + b'"'
            found[entry.name] = _Asset(body, _TYPES[suffix], etag)
    return found


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ConsoleApp:
    """Serves ``/console``: the page, its assets, a summary and a live event stream."""

    def __init__(
        self,
        engine: Engine,
        *,
        info: ConsoleInfo,
        log: logging.Logger,
        access: AccessPolicy | None = None,
        interval_s: float = 1.0,
        max_streams: int = MAX_STREAMS,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self._engine = engine
        self._info = info
        self._log = log
        self._access = access if access is not None else AccessPolicy()
        self._interval_s = interval_s
        self._max_streams = max_streams
        self._streams = 0  # event streams open now
        self._samples: dict[int, Sample] = {}  # the last two ticks' samples
        self._encoded: dict[tuple[int, str], bytes] = {}  # this tick's events, by model
        self._assets = _load_assets()
        if "index.html" not in self._assets:
            raise RuntimeError("the console's assets are missing from the package")

    # -- ASGI -----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request whose path is ``/console`` or under ``/console/``."""
        try:
            await self._dispatch(scope, receive, send)
        except ClientGone:
            return
        except _Refused as exc:
            await _send(send, exc.status, v2_http.error_body(exc.message), b"application/json")
        except Exception as exc:
            status, message = describe_exception(
                exc, self._log, f"{scope.get('method')} {scope.get('path')}"
            )
            await _send(send, status, v2_http.error_body(message), b"application/json")

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        target = raw.decode("latin-1") if raw else scope["path"]
        path = target.partition("?")[0]
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        # the raw path, never decoded: no escape, dot segment or second slash reaches a lookup
        if "%" in path or "//" in path or "\\" in path or "/." in path:
            raise _Refused(404, "Not Found")
        lookup = header_lookup(scope)
        if self._access.guards(Api.CONSOLE):
            self._access.check(Api.CONSOLE, lookup)
        if scope["method"] not in ("GET", "HEAD"):
            raise _Refused(405, "Method Not Allowed")
        head = scope["method"] == "HEAD"
        if path in (PREFIX, PREFIX + "/"):
            await self._asset(send, "index.html", lookup, head, cache=b"no-cache")
        elif path.startswith(_ASSETS):
            await self._asset(send, path[len(_ASSETS) :], lookup, head, cache=b"no-cache")
        elif path == PREFIX + "/api/summary":
            body = orjson.dumps(await self.summary(lookup))
            await _send(send, 200, b"" if head else body, b"application/json", len(body))
        elif path == PREFIX + "/api/config":
            body = self._config_text(_params(query, {"model", "version"}), lookup).encode()
            await _send(send, 200, b"" if head else body, b"text/plain; charset=utf-8", len(body))
        elif path == PREFIX + "/api/events":
            model = _params(query, {"model"}).get("model")
            await watched(self._stream(send, model), receive)
        else:
            raise _Refused(404, "Not Found")

    # -- assets ---------------------------------------------------------------------------------

    async def _asset(
        self, send: Send, name: str, lookup: HeaderLookup, head: bool, *, cache: bytes
    ) -> None:
        asset = self._assets.get(name)
        if asset is None:
            raise _Refused(404, "Not Found")
        extra = [(b"etag", asset.etag), (b"cache-control", cache)]
        if lookup("if-none-match") == asset.etag.decode():
            await _send(send, 304, b"", None, None, extra)
            return
        body = b"" if head else asset.body
        await _send(send, 200, body, asset.content_type, len(asset.body), extra)

    # -- summary --------------------------------------------------------------------------------

    def _api_groups(self) -> dict[str, str]:
        return {api.value: self._access.describe(api) for api in Api}

    async def summary(self, lookup: HeaderLookup) -> dict[str, Any]:
        """The server's state and the models' rows. The whole repository index only for a
        caller the ``model-repository`` group admits (as ``POST /v2/repository/index``);
        otherwise the loaded versions only, from their statistics."""
        usage = process_usage()
        meta = self._engine.server_metadata()
        server = {
            "name": meta.name,
            "version": meta.version,
            "extensions": list(meta.extensions),
            "live": self._engine.is_live(),
            "ready": self._engine.is_ready(),
            "uptime_s": round(time.monotonic() - self._info.started_s, 1),
            "ports": dict(self._info.ports),
            "control_mode": self._info.control_mode,
            "apis": self._api_groups(),
            "drift": self._info.drift,
            "rollout": self._info.rollout,
            "cpu_s": round(usage.cpu_s, 2),
            "rss_bytes": usage.rss_bytes,
        }
        complete = True
        try:
            if self._access.guards(Api.MODEL_REPOSITORY):
                self._access.check(Api.MODEL_REPOSITORY, lookup)
            rows = v2_http.repository_index_list(await self._engine.repository_index())
        except (PermissionDeniedError, UnauthenticatedError):
            complete = False
            rows = [
                {"name": s.name, "version": s.version, "state": "READY"}
                for s in self._engine.model_statistics()
            ]
        models: list[dict[str, Any]] = [{**row, **self._settings(row)} for row in rows]
        return {"server": server, "models": models, "index_complete": complete}

    def _settings(self, row: Mapping[str, str]) -> dict[str, Any]:
        """A loaded version's runtime, instances and batching, from its completed config."""
        if row.get("state") != "READY" or "version" not in row:
            return {}
        try:
            config = self._engine.model_config(row["name"], row["version"]).config
        except InferdError:
            return {}
        instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", []) or [])
        batching = config.get("dynamic_batching")
        return {
            "runtime": config.get("backend") or config.get("platform") or "",
            "instances": instances or 1,
            "max_batch_size": int(config.get("max_batch_size", 0)),
            "batching": "sequence"
            if "sequence_batching" in config
            else ("dynamic" if batching is not None else "none"),
            "preferred_batch_size": list((batching or {}).get("preferred_batch_size", [])),
            "max_queue_delay_us": int((batching or {}).get("max_queue_delay_microseconds", 0)),
        }

    def _config_text(self, params: Mapping[str, str], lookup: HeaderLookup) -> str:
        """A model version's completed configuration in ``config.pbtxt`` text (the
        ``model-config`` group's rules apply, as on ``GET /v2/models/{m}/config``)."""
        if "model" not in params:
            raise InvalidArgumentError("/console/api/config needs the query parameter 'model'")
        if self._access.guards(Api.MODEL_CONFIG):
            self._access.check(Api.MODEL_CONFIG, lookup)
        spec = self._engine.model_config(params["model"], params.get("version", ""))
        message = json_format.ParseDict(
            spec.config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True
        )
        return str(text_format.MessageToString(message))

    # -- events ---------------------------------------------------------------------------------

    def sample(self) -> Sample:
        """One reading of the server's counters (what each event is computed from)."""
        return Sample.of(time.monotonic(), process_usage(), self._engine.model_statistics())

    def _sample_at(self, tick: int) -> Sample:
        """The sample of one tick (``interval_s`` long), shared by every open stream: however
        many pages are open, the counters are read once a tick."""
        found = self._samples.get(tick)
        if found is None:
            found = self._samples[tick] = self.sample()
            for old in [t for t in self._samples if t < tick - 1]:
                del self._samples[old]
            self._encoded = {k: v for k, v in self._encoded.items() if k[0] >= tick}
        return found

    def _tick_event(self, tick: int, prev: Sample, model: str | None) -> tuple[Sample, bytes]:
        """Tick ``tick``'s event for ``model``: computed once for every stream whose previous
        sample is the shared one of the tick before (all of them, once past their first)."""
        cur = self._sample_at(tick)
        if self._samples.get(tick - 1) is not prev:
            return cur, _event(self.event(prev, cur, model))
        key = (tick, model or "")
        data = self._encoded.get(key)
        if data is None:
            data = self._encoded[key] = _event(self.event(prev, cur, model))
        return cur, data

    async def _stream(self, send: Send, model: str | None) -> None:
        """One event now, then one a tick, until the client leaves or the server stops. The
        counters are read once a tick for all streams together (:meth:`_sample_at`): nothing is
        added to the serving path, and each open page adds little more than one send."""
        if self._streams >= self._max_streams:
            raise _Refused(
                503,
                f"too many console event streams open ({self._max_streams}); close a console "
                "page and retry",
            )
        self._streams += 1
        try:
            headers = [
                *SECURITY_HEADERS,
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-store"),
                (b"x-accel-buffering", b"no"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send(_chunk(b"retry: 2000\n\n"))
            tick = int(time.monotonic() // self._interval_s)
            prev = self._sample_at(tick)
            await send(_chunk(_event(self.event(prev, prev, model))))
            # the first window lasts at least half a tick (the shared sample may be recent)
            tick = int((prev.t_s + self._interval_s / 2) // self._interval_s)
            while not self._info.stopping():
                tick += 1
                await asyncio.sleep(max(0.0, tick * self._interval_s - time.monotonic()))
                prev, data = self._tick_event(tick, prev, model)
                await send(_chunk(data))
            await send({"type": "http.response.body", "body": b""})
        finally:
            self._streams -= 1

    def event(self, prev: Sample, cur: Sample, model: str | None) -> dict[str, Any]:
        """One event's figures: the window between two samples (``model`` in full)."""
        figures = server_window(prev, cur, detail=model)
        figures["ready"] = self._engine.is_ready()
        figures["uptime_s"] = round(time.monotonic() - self._info.started_s, 1)
        figures["t_ms"] = int(time.time() * 1000)
        return figures


def _params(query: str, allowed: set[str]) -> dict[str, str]:
    """The query's parameters, each given at most once and among ``allowed``; a ``model``
    is checked as a model name."""
    try:
        params = parse_qs(query, keep_blank_values=True, max_num_fields=8, strict_parsing=False)
    except ValueError as exc:
        raise InvalidArgumentError(f"malformed query string: {exc}") from None
    found: dict[str, str] = {}
    for key, values in params.items():
        if key not in allowed:
            raise InvalidArgumentError(
                f"unknown query parameter '{key}'; expected {', '.join(sorted(allowed))}"
            )
        if len(values) > 1:
            raise InvalidArgumentError(f"give the query parameter '{key}' once")
        found[key] = values[0]
    if "model" in found:
        check_model_name(found["model"])
    return found


def _event(payload: dict[str, Any]) -> bytes:
    return b"event: stats\ndata: " + orjson.dumps(payload) + b"\n\n"


def _chunk(data: bytes) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": True}


async def _send(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes | None,
    length: int | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [*SECURITY_HEADERS, *(extra or [])]
    if content_type is not None:
        headers.append((b"content-type", content_type))
    if not any(name == b"cache-control" for name, _ in headers):
        headers.append((b"cache-control", b"no-store"))
    headers.append((b"content-length", str(len(body) if length is None else length).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
