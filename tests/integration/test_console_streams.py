"""The console's event streams share their readings: however many pages are open, the
counters are read once a tick; and the streams open at once are bounded.

The console app runs in process over a real server's engine (no sockets), driven as its ASGI
server would drive it, with a short tick so the test takes well under a second of ticks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from inferd.frontends.console.app import ConsoleApp, ConsoleInfo
from inferd.frontends.console.live import Sample
from inferd.repository.records import ControlMode
from inferd.server.config import ServerConfig
from inferd.server.server import Server
from tests.helpers.models import write_add_sub

TICK_S = 0.05
WAIT_S = 20.0  # a bound against hanging


class CountingConsole(ConsoleApp):
    """The console, counting its readings of the counters."""

    readings = 0

    def sample(self) -> Sample:
        self.readings += 1
        return super().sample()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    write_add_sub(tmp_path, "simple")
    config = ServerConfig(
        model_repositories=(tmp_path,),
        model_control_mode=ControlMode.NONE,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )
    async with Server(config) as started:
        yield started


class Page:
    """One open event stream: what the app sent, and a way to leave."""

    def __init__(self, app: ConsoleApp, sent: asyncio.Condition, model: str = "simple") -> None:
        self.sent: list[dict[str, Any]] = []
        self._notify = sent
        self.left = asyncio.Event()
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/console/api/events",
            "raw_path": b"/console/api/events",
            "query_string": f"model={model}".encode(),
            "headers": [],
        }
        self.task = asyncio.ensure_future(app.handle(scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        async with self._notify:
            self._notify.notify_all()

    @property
    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None

    def events(self) -> list[dict[str, Any]]:
        found = []
        for message in self.sent:
            body = message.get("body", b"")
            if body.startswith(b"event: stats\ndata: "):
                found.append(orjson.loads(body[len(b"event: stats\ndata: ") :]))
        return found

    async def leave(self) -> None:
        self.left.set()
        await asyncio.wait_for(self.task, WAIT_S)


async def wait_until(sent: asyncio.Condition, check: Any) -> None:
    """Until ``check()`` holds, looking again after each message any page is sent."""
    async with asyncio.timeout(WAIT_S), sent:
        await sent.wait_for(check)


async def test_open_pages_share_one_reading_a_tick(server: Server) -> None:
    info = ConsoleInfo("none", server.ports)
    app = CountingConsole(server.engine, info=info, log=logging.getLogger("t"), interval_s=TICK_S)
    sent = asyncio.Condition()
    pages = [Page(app, sent) for _ in range(8)]
    await wait_until(sent, lambda: all(len(p.events()) >= 10 for p in pages))
    for page in pages:
        await page.leave()
    ticks = max(len(p.events()) for p in pages)
    # one reading a tick for all eight pages (a page's first event may read once more)
    assert app.readings <= ticks + 2, (app.readings, ticks)
    for page in pages:
        assert page.status == 200
        assert page.events()[-1]["models"][0]["name"] == "simple"
        assert "totals" in page.events()[-1]["models"][0]


async def test_streams_past_the_bound_are_refused(server: Server) -> None:
    info = ConsoleInfo("none", server.ports)
    app = ConsoleApp(
        server.engine, info=info, log=logging.getLogger("t"), interval_s=TICK_S, max_streams=2
    )
    sent = asyncio.Condition()
    first, second = Page(app, sent), Page(app, sent)
    await wait_until(sent, lambda: first.events() and second.events())
    third = Page(app, sent)
    await asyncio.wait_for(third.task, WAIT_S)
    assert third.status == 503
    body = b"".join(m.get("body", b"") for m in third.sent)
    assert b"too many console event streams open (2)" in body
    await first.leave()
    fourth = Page(app, sent)  # a page that left makes room
    await wait_until(sent, lambda: fourth.events())
    assert fourth.status == 200
    await second.leave()
    await fourth.leave()
