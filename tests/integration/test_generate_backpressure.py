"""``generate_stream`` to a client that reads slowly: the server takes a decoupled model's
responses only as far as the events it can send, plus a bounded number ahead
(``STREAM_RESPONSES``), and not the whole answer. Runs the real stack (repository manager,
Python backend, engine) with ``repeat_int32``; the HTTP edge's ``send`` is held by the test, as
the edge's flow control holds it while the client's socket is full."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.engine import Engine
from inferd.examples.streaming_models import build_streaming
from inferd.frontends.http.generate import STREAM_RESPONSES, SseReply
from inferd.repository.manager import ControlMode, RepositoryManager


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    build_streaming("repeat_int32", tmp_path / "repeat_int32")
    manager = RepositoryManager([tmp_path], default_registry(), mode=ControlMode.EXPLICIT)
    failures = await manager.startup(["repeat_int32"])
    assert not failures
    try:
        yield Engine(manager, server_version="test")
    finally:
        await manager.close()


def _taken(engine: Engine) -> int:
    """How many responses the server has taken from the model (each counted as it arrives)."""
    (snapshot,) = engine.model_statistics("repeat_int32", "")
    return sum(stat.success.count for stat in snapshot.response_stats.values())


async def test_a_slow_reader_holds_the_model_back(engine: Engine) -> None:
    count = 4 * STREAM_RESPONSES
    request = InferRequest(
        "repeat_int32",
        {
            "IN": np.arange(count, dtype=np.int32),
            "DELAY": np.zeros(count, dtype=np.uint32),
            "WAIT": np.zeros(1, dtype=np.uint32),
        },
    )
    room = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if len(sent) > 2:  # the status line and one event went out; then the socket is full
            await room.wait()

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    writing = asyncio.ensure_future(
        SseReply(engine, request, logging.getLogger("test")).write(send, receive)
    )
    taken, steady = -1, 0
    deadline = time.monotonic() + 20
    while steady < 5 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        now = _taken(engine)
        steady = steady + 1 if now == taken else 0
        taken = now
    # the events sent or being sent, the budget's worth, and one in hand
    assert taken <= 2 + STREAM_RESPONSES + 1
    assert not writing.done()
    room.set()
    await asyncio.wait_for(writing, 60)
    events = [m["body"] for m in sent if m["type"] == "http.response.body" and m["body"]]
    assert len(events) == count
    assert b'"OUT":0,' in events[0]
    assert f'"OUT":{count - 1},'.encode() in events[-1]
    assert _taken(engine) == count
