"""Loading a model with a config override and reading its served config, through the model
repository API (HTTP or gRPC, so Triton works as well as inferd) or an engine in this process.

A load with ``config_json`` replaces the repository's ``config.pbtxt`` for that load only; a load
without it reloads the model as its repository says.

Against a server whose model control is protected, every control call carries the admin token
(``Authorization: Bearer ...``) and the extra headers given (a restricted API's ``KEY: VALUE``),
over TLS when asked. A refusal (HTTP 401 / 403, gRPC UNAUTHENTICATED / PERMISSION_DENIED) raises
:class:`AccessDeniedError`, whose message says what to pass. Over HTTP the calls go through
:class:`inferd.client.AdminClient`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from inferd.client.admin import AdminClient, access_message, is_restricted
from inferd.client.endpoint import format_host, split_url
from inferd.client.headers import Headers, grpc_metadata
from inferd.client.tls import GrpcTlsSettings, HttpsSettings
from inferd.engine import Engine
from inferd.errors import (
    AccessDeniedError,
    InferdError,
    LoadFailedError,
    RepositoryCallError,
    ServerPermissionDeniedError,
    ServerUnauthenticatedError,
    ServerUnreachableError,
)

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
    """Model control over HTTP(S), through :class:`inferd.client.AdminClient`."""

    def __init__(
        self,
        url: str,
        *,
        headers: Headers = (),
        admin_token: str | None = None,
        tls: HttpsSettings | None = None,
    ) -> None:
        self._client = AdminClient.from_url(
            url, headers=headers, admin_token=admin_token, tls=tls, timeout_s=LOAD_TIMEOUT_S
        )

    async def load(self, model: str, config_json: str | None = None) -> None:
        try:
            await asyncio.to_thread(self._client.load, model, config_json)
        except RepositoryCallError as exc:
            raise LoadFailedError(exc.message) from None

    async def config(self, model: str) -> dict[str, Any]:
        try:
            return await asyncio.to_thread(self._client.config, model)
        except RepositoryCallError as exc:
            raise LoadFailedError(exc.message) from None

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
        target = format_host(host, port)
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
            refused = access_message(unauthenticated, f"{exc.status()}: {message}")
            if unauthenticated:
                raise ServerUnauthenticatedError(refused) from None
            raise ServerPermissionDeniedError(refused) from None

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
