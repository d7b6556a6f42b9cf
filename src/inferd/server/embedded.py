"""Run inferd inside a Python program: a server on a background event loop, inference with no
network hop through the same engine the HTTP and gRPC front ends use."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from inferd.core.inference import InferRequest, ParamValue, RequestedOutput
from inferd.engine import Engine
from inferd.errors import UnavailableError
from inferd.server.config import ServerConfig
from inferd.server.server import Server

__all__ = ["InferenceServer"]

T = TypeVar("T")


class InferenceServer:
    """A server you can use as a context manager.

    >>> with InferenceServer("examples/models") as server:          # doctest: +SKIP
    ...     out = server.infer("simple", {"INPUT0": a, "INPUT1": b})
    ...     out["OUTPUT0"]

    Network endpoints are off unless you give them a port (0 picks a free one; read ``ports``).
    Every other :class:`ServerConfig` field can be passed by keyword.
    """

    def __init__(
        self,
        model_repository: str | Path | Sequence[str | Path],
        *,
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        **options: Any,
    ) -> None:
        roots = (
            (model_repository,)
            if isinstance(model_repository, (str, Path))
            else tuple(model_repository)
        )
        config = ServerConfig(model_repositories=tuple(Path(r) for r in roots), **options)
        self._config = replace(
            config,
            allow_http=http_port is not None,
            http_port=http_port or 0,
            http_address="127.0.0.1" if http_port is not None else config.http_address,
            allow_grpc=grpc_port is not None,
            grpc_port=grpc_port or 0,
            grpc_address="127.0.0.1" if grpc_port is not None else config.grpc_address,
            allow_metrics=metrics_port is not None,
            metrics_port=metrics_port or 0,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Server | None = None

    @property
    def engine(self) -> Engine:
        return self._require().engine

    @property
    def ports(self) -> dict[str, int]:
        return dict(self._require().ports)

    def _require(self) -> Server:
        if self._server is None:
            raise UnavailableError("the server is not running; use it in a 'with' block")
        return self._server

    def _call(self, coro: Any) -> Any:
        assert self._loop is not None
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    def start(self) -> InferenceServer:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="inferd-loop", daemon=True)
        self._thread.start()

        async def make_and_start() -> Server:
            server = Server(self._config)
            await server.start()
            return server

        try:
            self._server = self._call(make_and_start())
        except BaseException:
            self._shutdown_loop()
            raise
        return self

    def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            self._call(server.stop())
        self._shutdown_loop()

    def _shutdown_loop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join()
            self._loop.close()
            self._loop, self._thread = None, None

    def __enter__(self) -> InferenceServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray[Any, Any]],
        *,
        outputs: Sequence[str] | None = None,
        version: str = "",
        parameters: Mapping[str, ParamValue] | None = None,
        request_id: str = "",
    ) -> dict[str, np.ndarray[Any, Any]]:
        """Run one request and return its outputs by name. Errors raise ``inferd.errors``."""
        request = InferRequest(
            model_name=model,
            inputs={name: _as_wire_array(a) for name, a in inputs.items()},
            model_version=version,
            id=request_id,
            outputs=[RequestedOutput(n) for n in outputs] if outputs is not None else None,
            parameters=dict(parameters or {}),
        )
        response = self._call(self.engine.infer(request))
        return dict(response.outputs)


def _as_wire_array(array: Any) -> np.ndarray[Any, Any]:
    """Numpy arrays pass through; str arrays become BYTES (object arrays of bytes)."""
    a = np.asarray(array)
    if a.dtype.kind in ("U", "S") or (a.dtype == object and a.size and isinstance(a.flat[0], str)):
        out = np.empty(a.shape, dtype=object)
        for idx, value in np.ndenumerate(a):
            out[idx] = value.encode() if isinstance(value, str) else bytes(value)
        return out
    return a
