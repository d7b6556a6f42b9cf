"""The server ``inferd perf -i in-process`` measures: inferd's own, with no listeners, started
on the running event loop so the load generator awaits its engine directly."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from inferd.engine import Engine
from inferd.errors import ModelLoadError
from inferd.repository.manager import ControlMode
from inferd.server.config import ServerConfig
from inferd.server.server import Server, StartupError


@asynccontextmanager
async def running_engine(repository: Path, model: str) -> AsyncIterator[Engine]:
    """A started server that loads ``model`` (and the models it calls) from ``repository``.

    A model that is there but cannot be loaded raises :class:`ModelLoadError` (not an
    ``InvalidArgumentError``: the command line was right, the model is not), which the tools
    answer with their "not loadable" / "server not started" exit code."""
    config = ServerConfig(
        model_repositories=(repository,),
        model_control_mode=ControlMode.EXPLICIT,
        load_models=(model,),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )
    # the load generator's output is the report: the server's start-up lines stay quiet
    logging.getLogger("inferd").setLevel(logging.WARNING)
    server = Server(config)
    try:
        await server.start()
    except StartupError as exc:
        raise ModelLoadError(
            f"model '{model}' could not be loaded from '{repository}' (the reason is logged above)"
        ) from exc
    try:
        yield server.engine
    finally:
        await server.stop()
