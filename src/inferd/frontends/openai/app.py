"""The ``/v1`` API: its route table and dispatch, an ASGI 3 application of its own.

The HTTP front end hands it every path under ``/v1/`` (:meth:`OpenAIApp.handle`);
``inferd serve --openai-port`` serves it alone on a port of its own. ``/v1`` is one API group
(``openai``) for ``--http-restricted-api`` and the access rules. Every refusal is in OpenAI's
error shape (:mod:`.errors`); a request body past ``--openai-max-body-size`` is refused with a
400 naming it. Streamed answers are server-sent events; a client that disconnects cancels its
request in the model (the HTTP front end's :func:`~inferd.frontends.http.generate.watched`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import orjson

from inferd.core.names import check_model_name
from inferd.engine import Engine
from inferd.errors import InferdError, InvalidArgumentError, NotFoundError
from inferd.frontends.access import AccessPolicy, Api
from inferd.frontends.http.asgi import (
    JSON,
    Message,
    Receive,
    Scope,
    Send,
    header_lookup,
    serve_lifespan,
)
from inferd.frontends.http.generate import ClientGone, watched
from inferd.frontends.openai.completions import answer, chunks, prepare
from inferd.frontends.openai.embeddings import create_embeddings
from inferd.frontends.openai.errors import OpenAIError, as_openai_error, invalid
from inferd.frontends.openai.limits import OpenAILimits
from inferd.frontends.openai.models import ModelCatalog
from inferd.frontends.openai.schemas import parse_body, parse_chat, parse_completion
from inferd.frontends.openai.tokenizer import TokenizerStore

SSE = b"text/event-stream; charset=utf-8"
PREFIX = "/v1/"
MODELS_PREFIX = "/v1/models/"


class _Stream:
    """A streamed answer: its chunks, sent as server-sent events by :meth:`OpenAIApp.handle`."""

    def __init__(self, chunks: AsyncIterator[dict[str, Any]]) -> None:
        self.chunks = chunks


class _Json:
    def __init__(self, body: dict[str, Any], status: int = 200) -> None:
        self.body = body
        self.status = status


Answer = _Json | _Stream
#: a route's handler: (scope, receive, what the path names after its prefix) -> answer
Handler = Callable[[Scope, Receive, str], Awaitable[Answer]]


class OpenAIApp:
    """Serves ``/v1``: models, completions and chat completions."""

    def __init__(
        self,
        engine: Engine,
        *,
        tokenizers: TokenizerStore,
        log: logging.Logger,
        limits: OpenAILimits | None = None,
        access: AccessPolicy | None = None,
    ) -> None:
        self._engine = engine
        self._tokenizers = tokenizers
        self._log = log
        self._limits = limits if limits is not None else OpenAILimits()
        self._access = access if access is not None else AccessPolicy()
        self._guarded = self._access.guards(Api.OPENAI)
        self.catalog = ModelCatalog(engine)
        # the route table: exact path -> method -> handler; "/v1/models/" takes a model id
        self.routes: dict[str, dict[str, Handler]] = {
            "/v1/models": {"GET": self._list_models},
            MODELS_PREFIX: {"GET": self._retrieve_model},
            "/v1/completions": {"POST": self._completions},
            "/v1/chat/completions": {"POST": self._chat},
            "/v1/embeddings": {"POST": self._embeddings},
        }

    # -- ASGI -----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.handle(scope, receive, send)
        elif scope["type"] == "lifespan":
            await serve_lifespan(receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request whose path is under ``/v1``."""
        try:
            result = await self._dispatch(scope, receive)
            if isinstance(result, _Stream):
                await watched(_write_stream(result.chunks, send, self._log), receive)
                return
            body, status = orjson.dumps(result.body), result.status
        except ClientGone:
            return
        except Exception as exc:
            error = as_openai_error(exc, self._log, f"{scope.get('method')} {scope.get('path')}")
            body, status = error.encode(), error.status
        await _send_json(send, status, body)

    async def _dispatch(self, scope: Scope, receive: Receive) -> Answer:
        path: str = scope["path"]
        argument = ""
        methods = self.routes.get(path)
        if methods is None and path.startswith(MODELS_PREFIX) and len(path) > len(MODELS_PREFIX):
            methods = self.routes.get(MODELS_PREFIX)
            argument = _model_id(scope)
        if methods is None:
            raise OpenAIError(404, f"Unknown request URL: {scope['method']} {path}")
        if self._guarded:
            self._access.check(Api.OPENAI, header_lookup(scope))
        handler = methods.get(scope["method"])
        if handler is None:
            raise OpenAIError(
                405, f"{scope['method']} is not allowed on {path}; use {', '.join(methods)}"
            )
        return await handler(scope, receive, argument)

    async def read_body(self, scope: Scope, receive: Receive) -> bytes:
        """The request body, refused (400) past the body-size limit, before it is read when
        ``Content-Length`` already says so; a compressed body is refused (415)."""
        limit = self._limits.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                raise _too_large(limit)
            if name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
                raise OpenAIError(415, "compressed request bodies are not accepted on /v1")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    # -- handlers -------------------------------------------------------------------------------

    async def _list_models(self, scope: Scope, receive: Receive, argument: str) -> Answer:
        return _Json(await self.catalog.list())

    async def _retrieve_model(self, scope: Scope, receive: Receive, argument: str) -> Answer:
        await self._on_demand(argument)
        return _Json(self.catalog.retrieve(argument))

    async def _completions(self, scope: Scope, receive: Receive, argument: str) -> Answer:
        request = parse_completion(parse_body(await self.read_body(scope, receive)), self._limits)
        return await self._run(request, receive)

    async def _chat(self, scope: Scope, receive: Receive, argument: str) -> Answer:
        request = parse_chat(parse_body(await self.read_body(scope, receive)), self._limits)
        return await self._run(request, receive)

    async def _embeddings(self, scope: Scope, receive: Receive, argument: str) -> Answer:
        body = parse_body(await self.read_body(scope, receive))
        await self._on_demand(body.get("model"))
        return _Json(await watched(create_embeddings(self._engine, body), receive))

    async def _run(self, request: Any, receive: Receive) -> Answer:
        await self._on_demand(request.model)
        prepared = await prepare(self._engine, self.catalog, self._tokenizers, request)
        if request.stream:
            return _Stream(chunks(prepared))
        return _Json(await watched(answer(prepared), receive))

    async def _on_demand(self, model: object) -> None:
        """In on-demand mode, load ``model`` when it is not loaded (a 503 while it loads);
        a name that is no model's is left to the handler's own ``model_not_found``."""
        if isinstance(model, str) and model:
            with contextlib.suppress(NotFoundError, InvalidArgumentError):
                await self._engine.ensure_model(model)


def _model_id(scope: Scope) -> str:
    raw = scope.get("raw_path")
    path = raw.decode("latin-1").partition("?")[0] if raw else scope["path"]
    encoded = path[len(MODELS_PREFIX) :]
    try:
        return check_model_name(unquote(encoded, errors="strict"))
    except (UnicodeDecodeError, InferdError) as exc:
        raise invalid(f"invalid model id {encoded!r}: {exc}", "model") from None


def _too_large(limit: int) -> OpenAIError:
    return invalid(
        f"the request body is larger than this server's limit of {limit} bytes "
        "(--openai-max-body-size)",
        code="request_too_large",
    )


async def _write_stream(
    chunks: AsyncIterator[dict[str, Any]], send: Send, log: logging.Logger
) -> None:
    """Send ``chunks`` as server-sent events. An error before the first chunk is answered as a
    JSON error with its status; after it, as an error event, and the stream ends."""
    started = False
    async with contextlib.aclosing(chunks) as stream:  # type: ignore[type-var]
        try:
            async for chunk in stream:
                if not started:
                    await _start(send, 200, SSE)
                    started = True
                await send(_more(b"data: " + orjson.dumps(chunk) + b"\n\n"))
        except Exception as exc:
            error = as_openai_error(exc, log, "streamed completion")
            if not started:
                await _send_json(send, error.status, error.encode())
                return
            await send(_more(b"data: " + error.encode() + b"\n\n"))
    if not started:
        await _start(send, 200, SSE)
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


async def _start(send: Send, status: int, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": status, "headers": headers})


def _more(data: bytes) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": True}


async def _send_json(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", JSON), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["OpenAIApp"]
