"""The HTTP front end: a raw ASGI 3 application over the engine (no web framework).

Every response carries ``Content-Length`` and is sent as one start message plus one body message.
Only inference replies are compressed (PROTOCOL.md §2.3); errors are ``{"error": "..."}``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferd.codecs import statistics, v2_http
from inferd.codecs.repository import (
    check_unpin_body,
    decode_load_parameters,
    decode_rollback_body,
    decode_unload_parameters,
)
from inferd.core.routing import RolloutAdmin
from inferd.engine import Engine
from inferd.errors import InvalidArgumentError, NotFoundError
from inferd.frontends.access import ADMIN_APIS, AccessPolicy, cross_site_refusal
from inferd.frontends.http.asgi import (
    JSON,
    Receive,
    Scope,
    Send,
    header_lookup,
    serve_lifespan,
)
from inferd.frontends.http.body import (
    OFF_LOOP_COMPRESSED_BYTES,
    OffLoop,
    check_load_body,
    json_too_large,
)
from inferd.frontends.http.compression import (
    choose_response_coding,
    compress_response,
    decompress_request,
    too_large,
)
from inferd.frontends.http.errors import HttpStatusError, describe_exception
from inferd.frontends.http.generate import ClientGone, SseReply, decode_generate, generate_once
from inferd.frontends.http.rollout import ROLLOUT_ENDPOINTS, rollout_answer
from inferd.frontends.http.routes import API, METHOD, Endpoint, Route, match_route
from inferd.frontends.http.shared_memory import SHARED_MEMORY_ENDPOINTS, shared_memory_answer
from inferd.frontends.shared_memory import SharedMemoryRegistry

if TYPE_CHECKING:  # the /v1 app and the console import this front end's modules
    from inferd.frontends.console.app import ConsoleApp
    from inferd.frontends.openai.app import OpenAIApp


OCTET_STREAM = b"application/octet-stream"
_NOT_FOUND = HttpStatusError(404, "Not Found")
_NOT_ALLOWED = HttpStatusError(405, "Method Not Allowed")
# the endpoints that change the server's state: a browser may call them only from this origin
_STATE_CHANGING = frozenset(
    e
    for e in Endpoint
    if API[e] in ADMIN_APIS and METHOD[e] != "GET" and e is not Endpoint.REPOSITORY_INDEX
)


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Reply:
        return cls(status, v2_http.dumps(value), [(b"content-type", JSON)])

    @classmethod
    def error(cls, status: int, message: str) -> Reply:
        return cls(status, v2_http.error_body(message), [(b"content-type", JSON)])


class _ClientGone(Exception):
    """The client disconnected before its request body arrived; nothing is to be sent."""


@dataclass(slots=True)
class _Headers:
    content_length: int | None = None
    content_encoding: str | None = None
    accept_encoding: str | None = None
    inference_header_length: str | None = None


def _trace_context(scope: Scope) -> dict[str, str]:
    """The caller's W3C trace context headers (``traceparent``, ``tracestate``)."""
    found: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        if name == b"traceparent" or name == b"tracestate":
            found[name.decode()] = value.decode("latin-1")
    return found


def _read_headers(scope: Scope) -> _Headers:
    found = _Headers()
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                found.content_length = int(value)
            except ValueError:
                raise InvalidArgumentError("invalid Content-Length header") from None
        elif name == b"content-encoding":
            found.content_encoding = value.decode("latin-1")
        elif name == b"accept-encoding":
            found.accept_encoding = value.decode("latin-1")
        elif name == b"inference-header-content-length":
            found.inference_header_length = value.decode("latin-1")
    return found


class HttpApp:
    """ASGI 3 application serving the KServe v2 REST API with Triton's extensions."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_body_bytes: int,
        log: logging.Logger,
        max_json_body_bytes: int | None = None,
        access: AccessPolicy | None = None,
        shared_memory: SharedMemoryRegistry | None = None,
        drift_report: Callable[[str, str], dict[str, Any]] | None = None,
        rollout: RolloutAdmin | None = None,
        openai: OpenAIApp | None = None,
        console: ConsoleApp | None = None,
    ) -> None:
        if max_body_bytes <= 0:
            raise ValueError("max_body_bytes must be positive")
        self._engine = engine
        self._shm = (
            shared_memory if shared_memory is not None else SharedMemoryRegistry(enabled=False)
        )
        self._max_body_bytes = max_body_bytes
        self._max_json_body_bytes = min(max_json_body_bytes or max_body_bytes, max_body_bytes)
        self._off_loop = OffLoop()
        self._access = access if access is not None else AccessPolicy()
        # the endpoints whose API group the policy guards; empty by default (no per-request cost)
        self._guarded = frozenset(e for e in Endpoint if self._access.guards(API[e]))
        self._log = log
        self._drift_report = drift_report
        self._rollout = rollout
        self._openai = openai  # serves the paths under /v1/ (None: they are unknown routes)
        self._console = console  # serves /console and the paths under it
        self._handlers: dict[
            Endpoint, Callable[[Route, Scope, Receive], Awaitable[Reply | SseReply]]
        ] = {
            Endpoint.SERVER_METADATA: self._server_metadata,
            Endpoint.HEALTH_LIVE: self._health_live,
            Endpoint.HEALTH_READY: self._health_ready,
            Endpoint.MODEL_METADATA: self._model_metadata,
            Endpoint.MODEL_READY: self._model_ready,
            Endpoint.MODEL_CONFIG: self._model_config,
            Endpoint.MODEL_INFER: self._infer,
            Endpoint.MODEL_GENERATE: self._generate,
            Endpoint.MODEL_GENERATE_STREAM: self._generate,
            Endpoint.MODEL_STATS: self._statistics,
            Endpoint.ALL_STATS: self._statistics,
            Endpoint.MODEL_DRIFT: self._drift,
            Endpoint.REPOSITORY_INDEX: self._repository_index,
            Endpoint.REPOSITORY_LOAD: self._repository_load,
            Endpoint.REPOSITORY_UNLOAD: self._repository_unload,
            Endpoint.REPOSITORY_ROLLBACK: self._repository_rollback,
            Endpoint.REPOSITORY_UNPIN: self._repository_unpin,
            **dict.fromkeys(SHARED_MEMORY_ENDPOINTS, self._shared_memory),
            **dict.fromkeys(ROLLOUT_ENDPOINTS, self._rollout_endpoint),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await serve_lifespan(receive, send)
        # other scope types (websocket) are not served; returning closes them

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._openai is not None and scope["path"].startswith("/v1/"):
            await self._openai.handle(scope, receive, send)
            return
        if self._console is not None and scope["path"].startswith("/console"):
            path = scope["path"]
            if path == "/console" or path.startswith("/console/"):
                await self._console.handle(scope, receive, send)
                return
        try:
            reply = await self._dispatch(scope, receive)
            if isinstance(reply, SseReply):
                await reply.write(send, receive)
                return
        except (_ClientGone, ClientGone):
            return
        except Exception as exc:  # mapped once, here
            status, message = describe_exception(
                exc, self._log, f"{scope.get('method')} {scope.get('path')}"
            )
            reply = Reply.error(status, message)
        await _send_reply(send, reply)

    async def _dispatch(self, scope: Scope, receive: Receive) -> Reply | SseReply:
        raw = scope.get("raw_path")
        path = raw.decode("latin-1") if raw else scope["path"]
        route = match_route(path.partition("?")[0], scope["method"])
        if route is None:
            raise _NOT_FOUND
        if self._guarded and route.endpoint in self._guarded:  # before the method, like Triton
            self._access.check(route.api, header_lookup(scope))
        if scope["method"] != route.method:
            raise _NOT_ALLOWED
        if route.endpoint in _STATE_CHANGING:
            refusal = cross_site_refusal(header_lookup(scope))
            if refusal is not None:
                raise HttpStatusError(403, refusal)
        return await self._handlers[route.endpoint](route, scope, receive)

    # -- body ---------------------------------------------------------------------------------

    async def _read_body(
        self,
        headers: _Headers,
        receive: Receive,
        json_what: str | None = None,
    ) -> bytes:
        """The whole (decompressed) body, refused with 413 once it passes the whole-body limit,
        or the JSON limit when ``json_what`` names the JSON it holds; before reading if the
        declared length already does."""
        limit = self._max_body_bytes if json_what is None else self._max_json_body_bytes
        if headers.content_length is not None and headers.content_length > limit:
            raise _too_big(limit, json_what)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise _too_big(limit, json_what)
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        del chunks  # the joined copy only, from here on
        if headers.content_encoding is not None:
            body = await self._off_loop.run(
                len(body) * (self._off_loop.threshold_bytes // OFF_LOOP_COMPRESSED_BYTES),
                decompress_request,
                body,
                headers.content_encoding,
                limit,
                _too_big(limit, json_what),
            )
        return body

    async def _read_json_body(
        self, scope: Scope, receive: Receive, what: str, *, load: bool = False
    ) -> dict[str, Any]:
        """A repository request's JSON object (``{}`` for an empty body), within the JSON limit;
        a model load body may pass it when its bulk is base64 files (:func:`check_load_body`)."""
        headers = _read_headers(scope)
        body = await self._read_body(headers, receive, None if load else what)
        if load:
            await self._off_loop.run(len(body), check_load_body, body, self._max_json_body_bytes)
        return await self._off_loop.run(len(body), _parse_json_object, body, what)

    # -- health and metadata ------------------------------------------------------------------

    # The bodies are for KServe v2 REST clients; tritonclient reads only the status.

    async def _health_live(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        live = self._engine.is_live()
        return Reply.json({"live": live}, 200 if live else 400)

    async def _health_ready(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        ready = self._engine.is_ready()
        return Reply.json({"ready": ready}, 200 if ready else 400)

    async def _server_metadata(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        return Reply.json(v2_http.server_metadata_dict(self._engine.server_metadata()))

    async def _model_metadata(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        await self._engine.ensure_model(route.model, route.version)  # on-demand mode loads it
        meta = self._engine.model_metadata(route.model, route.version)
        return Reply.json(v2_http.model_metadata_dict(meta))

    async def _model_ready(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        if self._engine.model_ready(route.model, route.version):
            return Reply(200)
        return Reply.error(400, "Model version not ready")

    async def _model_config(self, route: Route, scope: Scope, receive: Receive) -> Reply:

        await self._engine.ensure_model(route.model, route.version)  # on-demand mode loads it
        spec = self._engine.model_config(route.model, route.version)
        return Reply.json(spec.config)

    async def _statistics(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        snapshots = self._engine.model_statistics(route.model or "", route.version or "")
        return Reply.json(statistics.to_json(snapshots))

    async def _drift(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        if self._drift_report is None:
            raise NotFoundError("drift monitoring is off: start inferd serve with --monitor-drift")
        return Reply.json(self._drift_report(route.model, route.version))

    async def _rollout_endpoint(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        """A traffic policy's admin API and feedback (:mod:`inferd.frontends.http.rollout`)."""
        if self._rollout is None:
            raise NotFoundError("traffic policies are not served by this server")
        body: dict[str, Any] = {}
        if route.method in ("PUT", "POST"):
            body = await self._read_json_body(scope, receive, "traffic policy request")
        answer = rollout_answer(self._rollout, route.endpoint, route.model, body)
        return Reply(200) if answer is None else Reply.json(answer)

    # -- inference ----------------------------------------------------------------------------

    async def _infer(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        headers = _read_headers(scope)
        header_length: int | None = None
        if headers.inference_header_length is not None:
            try:
                header_length = int(headers.inference_header_length)
            except ValueError:
                raise InvalidArgumentError(
                    "invalid Inference-Header-Content-Length header "
                    f"'{headers.inference_header_length}'"
                ) from None
        json_limit = self._max_json_body_bytes
        if header_length is None:  # all JSON: the JSON limit bounds the whole body
            body = await self._read_body(headers, receive, "JSON inference request body")
            json_size = len(body)
        else:
            if header_length > json_limit:  # refused before the body is read
                raise json_too_large(
                    json_limit,
                    f"JSON inference header (Inference-Header-Content-Length: {header_length})",
                )
            body = await self._read_body(headers, receive)
            json_size = max(header_length, 0)
            if body.find(b'"BYTES"', 0, json_size) >= 0:  # binary BYTES are split in Python
                json_size = len(body)
        request = await self._off_loop.run(
            json_size,
            v2_http.decode_infer_request,
            route.model,
            route.version,
            body,
            header_length,
            self._shm,
        )
        del body  # JSON-only bodies are garbage from here on; binary inputs keep views of it
        if self._engine.tracing:
            request.trace_context = _trace_context(scope)
        response = await self._engine.infer(request)
        header, blobs = v2_http.encode_infer_response(response, request)
        reply_headers: list[tuple[bytes, bytes]]
        if any(len(blob) for blob in blobs):
            payload = b"".join((header, *blobs))
            reply_headers = [
                (b"content-type", OCTET_STREAM),
                (b"inference-header-content-length", str(len(header)).encode()),
            ]
        else:
            payload = header if not blobs else b"".join((header, *blobs))
            reply_headers = [(b"content-type", JSON)]
        coding = choose_response_coding(headers.accept_encoding)
        if coding != "identity":
            # zlib releases the GIL: a large reply is compressed on a worker thread
            payload = await self._off_loop.run(len(payload), compress_response, payload, coding)
            reply_headers.append((b"content-encoding", coding.encode()))
        return Reply(200, payload, reply_headers)

    async def _generate(self, route: Route, scope: Scope, receive: Receive) -> Reply | SseReply:
        """The generate extension (:mod:`inferd.frontends.http.generate`)."""
        body = await self._read_body(_read_headers(scope), receive, "generate request body")
        request = await decode_generate(
            self._engine, self._off_loop, route.model, route.version, body
        )
        if self._engine.tracing:
            request.trace_context = _trace_context(scope)
        if route.endpoint is Endpoint.MODEL_GENERATE_STREAM:
            return SseReply(self._engine, request, self._log)
        return Reply(
            200, await generate_once(self._engine, request, receive), [(b"content-type", JSON)]
        )

    # -- shared memory ------------------------------------------------------------------------

    async def _shared_memory(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        # while the extension is off, that is the answer, whatever the body holds or how large
        # or malformed it is (as Triton answers before reading the body); the status queries
        # (GET) answer as for a server with no region, as Triton's do
        body: dict[str, Any] = {}
        if route.method == "POST":
            self._shm.check_enabled()
            body = await self._read_json_body(scope, receive, "shared memory request")
        answer = shared_memory_answer(self._shm, route.endpoint, route.region, body)
        return Reply(200) if answer is None else Reply.json(answer)

    # -- model repository ---------------------------------------------------------------------

    async def _repository_index(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        body = await self._read_json_body(scope, receive, "repository index request")
        ready = body.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgumentError("'ready' of the repository index request must be a boolean")
        entries = await self._engine.repository_index(ready_only=ready)
        return Reply.json(v2_http.repository_index_list(entries))

    async def _repository_load(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        params = _parameters(
            await self._read_json_body(scope, receive, "model load request", load=True)
        )
        load = decode_load_parameters(params, files_as="base64")
        await self._engine.load_model(route.model, config_json=load.config_json, files=load.files)
        return Reply(200)

    async def _repository_unload(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        params = _parameters(await self._read_json_body(scope, receive, "model unload request"))
        dependents = decode_unload_parameters(params)
        await self._engine.unload_model(route.model, unload_dependents=dependents)
        return Reply(200)

    async def _repository_rollback(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        body = await self._read_json_body(scope, receive, "model rollback request")
        pin = await self._engine.rollback_model(route.model, decode_rollback_body(body))
        return Reply.json(
            {
                "name": route.model,
                "version": str(pin.version),
                "rolled_back_from": str(pin.rolled_back_from),
            }
        )

    async def _repository_unpin(self, route: Route, scope: Scope, receive: Receive) -> Reply:
        check_unpin_body(await self._read_json_body(scope, receive, "model unpin request"))
        await self._engine.unpin_model(route.model)
        return Reply(200)


def _too_big(limit: int, json_what: str | None) -> HttpStatusError:
    return too_large(limit) if json_what is None else json_too_large(limit, json_what)


def _parse_json_object(body: bytes, what: str) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        parsed = v2_http.loads(body)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"failed to parse the {what}: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(f"the {what} body must be a JSON object")
    return parsed


def _parameters(body: dict[str, Any]) -> dict[str, Any]:
    params = body.get("parameters", {})
    if not isinstance(params, dict):
        raise InvalidArgumentError("'parameters' must be a JSON object")
    return params


async def _send_reply(send: Send, reply: Reply) -> None:
    headers = reply.headers
    headers.append((b"content-length", str(len(reply.body)).encode()))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


__all__ = ["HttpApp", "Reply"]
