"""Loading a model with a config override and reading its served config, through the model
repository API (HTTP or gRPC, so Triton works as well as inferd) or an engine in this process.

A load with ``config_json`` replaces the repository's ``config.pbtxt`` for that load only; a load
without it reloads the model as its repository says.

Against a server whose model control is protected, every control call carries the admin token
(``Authorization: Bearer ...``) and the extra headers given (a restricted API's ``KEY: VALUE``),
over TLS when asked. A refusal (HTTP 401 / 403, gRPC UNAUTHENTICATED / PERMISSION_DENIED) raises
:class:`AccessDeniedError`, whose message says what to pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import urllib.error
import urllib.request
from typing import Any, Protocol

from inferd.engine import Engine
from inferd.errors import InferdError
from inferd.tools.perf.headers import Headers, grpc_metadata
from inferd.tools.perf.metadata import is_restricted, split_url
from inferd.tools.perf.tls import GrpcTlsSettings, HttpsSettings, handshake_error

__all__ = [
    "AccessDeniedError",
    "EngineControl",
    "GrpcControl",
    "HttpControl",
    "LoadFailedError",
    "ModelControl",
    "ServerUnreachableError",
    "access_message",
]

LOAD_TIMEOUT_S = 300.0


class LoadFailedError(InferdError):
    """The server refused to load the model with this config; the message is the server's."""


class ServerUnreachableError(InferdError):
    """The server did not answer at all."""


class AccessDeniedError(InferdError):
    """The server refused the model control call: a token or header it expects is missing or
    wrong."""


def access_message(unauthenticated: bool, detail: str) -> str:
    """One line saying what the server refused and what to pass: the admin token for an
    unauthenticated call (401), the restricted API's header for a forbidden one (403)."""
    what = (
        "pass its admin token with --admin-token-file FILE (or the INFERD_ADMIN_TOKEN "
        "environment variable)"
        if unauthenticated
        else "pass the header it expects with -H NAME:VALUE"
    )
    return f"the server refused model control ({detail}): {what}"


def _auth_headers(headers: Headers, admin_token: str | None) -> Headers:
    if admin_token is None:
        return headers
    return (*headers, ("Authorization", f"Bearer {admin_token}"))


class ModelControl(Protocol):
    async def load(self, model: str, config_json: str | None = None) -> None:
        """Load (or reload) ``model``; raise :class:`LoadFailedError` when it fails."""
        ...

    async def config(self, model: str) -> dict[str, Any]:
        """The served config, in Triton's JSON rendering."""
        ...

    async def close(self) -> None: ...


class HttpControl:
    def __init__(
        self,
        url: str,
        *,
        headers: Headers = (),
        admin_token: str | None = None,
        tls: HttpsSettings | None = None,
    ) -> None:
        host, port = split_url(url, 8000)
        scheme = "http" if tls is None else "https"
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._base = f"{scheme}://{where}"
        self._headers = dict(_auth_headers(headers, admin_token))
        self._tls = tls
        self._context = None if tls is None else tls.context()

    def _call(self, method: str, path: str, body: bytes | None, timeout_s: float) -> bytes:
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self._base + path, data=body, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(
                request, timeout=timeout_s, context=self._context
            ) as answer:
                return bytes(answer.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(json.JSONDecodeError, AttributeError):
                detail = str(json.loads(detail).get("error", detail))
            if exc.code in (401, 403):
                raise AccessDeniedError(
                    access_message(exc.code == 401, f"HTTP {exc.code}: {detail}")
                ) from None
            raise LoadFailedError(detail or f"HTTP {exc.code}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLError) and self._tls is not None:
                failed = handshake_error(exc.reason, self._base, self._tls.hint)
                raise ServerUnreachableError(failed.message) from None
            raise ServerUnreachableError(f"{self._base} did not answer: {exc.reason}") from None
        except (OSError, ValueError) as exc:
            raise ServerUnreachableError(f"{self._base} did not answer: {exc}") from None

    async def load(self, model: str, config_json: str | None = None) -> None:
        body: dict[str, Any] = {}
        if config_json is not None:
            body = {"parameters": {"config": config_json}}
        path = f"/v2/repository/models/{model}/load"
        await asyncio.to_thread(self._call, "POST", path, json.dumps(body).encode(), LOAD_TIMEOUT_S)

    async def config(self, model: str) -> dict[str, Any]:
        raw = await asyncio.to_thread(self._call, "GET", f"/v2/models/{model}/config", None, 30.0)
        document: dict[str, Any] = json.loads(raw)
        return document

    async def close(self) -> None:
        return None


_REFUSED_STATUS = {"StatusCode.UNAUTHENTICATED": True, "StatusCode.PERMISSION_DENIED": False}


class GrpcControl:
    def __init__(
        self,
        url: str,
        *,
        headers: Headers = (),
        admin_token: str | None = None,
        tls: GrpcTlsSettings | None = None,
    ) -> None:
        import grpc
        from tritonclient.grpc.aio import InferenceServerClient

        host, port = split_url(url, 8001)
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._metadata = dict(grpc_metadata(_auth_headers(headers, admin_token))) or None
        credentials = None if tls is None else grpc.ssl_channel_credentials(*tls.read())
        self._client = InferenceServerClient(target, creds=credentials)

    @staticmethod
    def _refused(exc: Any) -> None:
        message = str(exc.message() or exc)
        unauthenticated = _REFUSED_STATUS.get(str(exc.status()))
        if unauthenticated is None and is_restricted(message):
            unauthenticated = False  # a restricted API's refusal comes as UNAVAILABLE
        if unauthenticated is not None:
            detail = f"{exc.status()}: {message}"
            raise AccessDeniedError(access_message(unauthenticated, detail)) from None

    async def load(self, model: str, config_json: str | None = None) -> None:
        from tritonclient.utils import InferenceServerException

        try:
            await self._client.load_model(
                model, headers=self._metadata, config=config_json, client_timeout=LOAD_TIMEOUT_S
            )
        except InferenceServerException as exc:
            self._refused(exc)
            message = exc.message() or str(exc)
            if exc.status() == "StatusCode.UNAVAILABLE" and "explicit" not in message:
                raise ServerUnreachableError(message) from None
            raise LoadFailedError(message) from None

    async def config(self, model: str) -> dict[str, Any]:
        from tritonclient.utils import InferenceServerException

        try:
            answer = await self._client.get_model_config(
                model, headers=self._metadata, as_json=True
            )
        except InferenceServerException as exc:
            self._refused(exc)
            raise LoadFailedError(exc.message() or str(exc)) from None
        config: dict[str, Any] = answer["config"]
        return config

    async def close(self) -> None:
        await self._client.close()


class EngineControl:
    """The same operations on an engine in this process."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def load(self, model: str, config_json: str | None = None) -> None:
        try:
            await self._engine.load_model(model, config_json=config_json)
        except InferdError as exc:
            raise LoadFailedError(exc.message) from None

    async def config(self, model: str) -> dict[str, Any]:
        return dict(self._engine.model_config(model).config)

    async def close(self) -> None:
        return None
