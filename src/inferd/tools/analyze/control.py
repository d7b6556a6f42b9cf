"""Loading a model with a config override and reading its served config, through the model
repository API (HTTP or gRPC, so Triton works as well as inferd) or an engine in this process.

A load with ``config_json`` replaces the repository's ``config.pbtxt`` for that load only; a load
without it reloads the model as its repository says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.error
import urllib.request
from typing import Any, Protocol

from inferd.engine import Engine
from inferd.errors import InferdError
from inferd.tools.perf.metadata import split_url

__all__ = [
    "EngineControl",
    "GrpcControl",
    "HttpControl",
    "LoadFailedError",
    "ModelControl",
    "ServerUnreachableError",
]

LOAD_TIMEOUT_S = 300.0


class LoadFailedError(InferdError):
    """The server refused to load the model with this config; the message is the server's."""


class ServerUnreachableError(InferdError):
    """The server did not answer at all."""


class ModelControl(Protocol):
    async def load(self, model: str, config_json: str | None = None) -> None:
        """Load (or reload) ``model``; raise :class:`LoadFailedError` when it fails."""
        ...

    async def config(self, model: str) -> dict[str, Any]:
        """The served config, in Triton's JSON rendering."""
        ...

    async def close(self) -> None: ...


class HttpControl:
    def __init__(self, url: str) -> None:
        host, port = split_url(url, 8000)
        self._base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def _call(self, method: str, path: str, body: bytes | None, timeout_s: float) -> bytes:
        request = urllib.request.Request(
            self._base + path,
            data=body,
            method=method,
            headers={"Content-Type": "application/json"} if body is not None else {},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                return bytes(answer.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(json.JSONDecodeError, AttributeError):
                detail = str(json.loads(detail).get("error", detail))
            raise LoadFailedError(detail or f"HTTP {exc.code}") from None
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


class GrpcControl:
    def __init__(self, url: str) -> None:
        from tritonclient.grpc.aio import InferenceServerClient

        host, port = split_url(url, 8001)
        self._client = InferenceServerClient(f"{host}:{port}")

    async def load(self, model: str, config_json: str | None = None) -> None:
        from tritonclient.utils import InferenceServerException

        try:
            await self._client.load_model(model, config=config_json, client_timeout=LOAD_TIMEOUT_S)
        except InferenceServerException as exc:
            message = exc.message() or str(exc)
            if exc.status() == "StatusCode.UNAVAILABLE" and "explicit" not in message:
                raise ServerUnreachableError(message) from None
            raise LoadFailedError(message) from None

    async def config(self, model: str) -> dict[str, Any]:
        from tritonclient.utils import InferenceServerException

        try:
            answer = await self._client.get_model_config(model, as_json=True)
        except InferenceServerException as exc:
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
