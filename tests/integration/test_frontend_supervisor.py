"""The supervisor of ``--frontends K`` with real front-end processes: a front end whose channel
the engine stops reading (here: the engine's end closed under it, as a message the engine cannot
decode would end its reading) is killed and restarted with a new channel, and the other front
end is left alone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from inferd.server.config import ServerConfig
from inferd.server.frontends import available
from inferd.server.frontends.bridge import EngineBridge
from inferd.server.frontends.supervisor import Supervisor

pytestmark = pytest.mark.skipif(not available(), reason="front ends need eventfd and /dev/shm")


async def _until(check: object, timeout_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the supervisor did not restart the front end in time")
        await asyncio.sleep(0.05)


async def test_a_front_end_the_engine_stops_reading_is_restarted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = ServerConfig(
        model_repositories=[str(tmp_path)],
        http_address="127.0.0.1",
        http_port=0,
        allow_grpc=False,
        frontends=2,
    )
    bridge = EngineBridge(None, http_apps={}, servicer=None, log=logging.getLogger("t.bridge"))
    supervisor = Supervisor(config, bridge, 2, log=logging.getLogger("t.frontends"))
    await supervisor.start()
    try:
        first, second = supervisor._frontends
        assert first.process is not None
        assert second.process is not None
        old, other = first.process, second.process.pid
        assert first.channel is not None
        with caplog.at_level(logging.ERROR, logger="t.frontends"):
            first.channel.close()  # the engine's reading of this channel ends with an error
            await _until(lambda: first.process is not old and first.serving is not None)
        assert await old.wait() == -9
        assert "stopped reading front end 0's channel" in caplog.text
        assert second.process.pid == other
        assert second.process.returncode is None
        # the new front end serves the port (health is answered by the engine's HTTP app:
        # none here, so the front end answers for itself that the service is missing)
        port = supervisor.ports["http"]
        await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/v2/health/live")
    finally:
        await supervisor.stop(1.0)


def _get(url: str) -> None:
    with contextlib.suppress(urllib.error.HTTPError):  # an answer of any status: it is served
        urllib.request.urlopen(url, timeout=10).close()
