"""The load generator's HTTP client against a hand-written server on a real socket: chunked
answers, connections the server closes, error bodies (what uvicorn never sends in the e2e tests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import numpy as np
import pytest

from inferd.tools.perf.http_client import HttpTransport
from inferd.tools.perf.transport import PerfRequestError, RequestData

META = {
    "name": "m",
    "inputs": [{"name": "X", "datatype": "FP32", "shape": [-1, 2]}],
    "outputs": [{"name": "Y", "datatype": "FP32", "shape": [-1, 2]}],
}


def chunked(status: str, body: bytes, close: bool = False) -> bytes:
    head = f"HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\n"
    head += "Connection: close\r\n" if close else ""
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 5]), body[i : i + 5]) for i in range(0, len(body), 5)
    )
    return head.encode() + b"\r\n" + chunks + b"0\r\n\r\n"


class Server:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.heads: list[dict[str, str]] = []
        self.slow_first = False  # answer the first two requests after 50 ms each
        self.connections = 0
        self.infers = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                path = lines[0].split()[1]
                fields = {k.lower(): v for k, _, v in (x.partition(": ") for x in lines[1:]) if k}
                self.heads.append(fields)
                length = int(fields.get("content-length", 0))
                self.bodies.append(await reader.readexactly(length))
                if self.slow_first and len(self.bodies) <= 2:
                    await asyncio.sleep(0.05)
                if path == "/v2/models/m":
                    writer.write(chunked("200 OK", json.dumps(META).encode()))
                elif path == "/v2/models/m/config":  # answers, then closes the connection
                    writer.write(chunked("200 OK", b'{"max_batch_size": 4}', close=True))
                    await writer.drain()
                    break
                elif path == "/v2/models/m/infer":
                    self.infers += 1
                    if self.infers % 3 == 0:
                        writer.write(chunked("400 Bad Request", b'{"error": "no thanks"}'))
                    else:
                        writer.write(chunked("200 OK", b'{"outputs": []}' * 50))
                else:
                    writer.write(chunked("404 Not Found", b"<html>nope</html>"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, str]]:
    state = Server()
    listener = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield state, f"127.0.0.1:{port}"


async def test_chunked_answers_closed_connections_and_errors(server: tuple[Server, str]) -> None:
    state, url = server
    t = HttpTransport(url, "m", binary=True)
    try:
        info = await t.model_info()  # the config answer closed the control connection
        assert info.max_batch_size == 4
        assert info.inputs[0].shape == (2,)
        assert state.connections == 1
        await t.prepare([RequestData({"X": np.array([1.5, 2.5], np.float32)})], 3, None)
        channel = await t.open_channel()
        outcomes = []
        for _ in range(6):
            try:
                await channel.infer(0)
                outcomes.append("ok")
            except PerfRequestError as exc:
                outcomes.append(str(exc))
        assert outcomes == ["ok", "ok", "no thanks"] * 2
        assert state.connections == 2  # one kept alive for all six, errors included
        # the last request: its JSON header (as long as the header says), then 3 rows of 2 floats
        body, split = state.bodies[-1], int(state.heads[-1]["inference-header-content-length"])
        header, blob = body[:split], body[split:]
        assert json.loads(header)["inputs"][0]["shape"] == [3, 2]
        assert np.frombuffer(blob, "<f4").tolist() == [1.5, 2.5] * 3
        with pytest.raises(PerfRequestError, match="HTTP 404: <html>nope</html>"):
            await HttpTransport(url, "other").model_info()
        await channel.close()
    finally:
        await t.close()


async def test_a_cancelled_control_request_does_not_shift_the_answers(
    server: tuple[Server, str],
) -> None:
    state, url = server
    state.slow_first = True
    t = HttpTransport(url, "m")
    try:
        pending = asyncio.ensure_future(t.model_info())
        while not state.bodies:  # noqa: ASYNC110 (the metadata request is on its way)
            await asyncio.sleep(0.001)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        info = await t.model_info()
        assert info.max_batch_size == 4  # the config's answer, not the metadata's
        assert info.inputs[0].name == "X"
    finally:
        await t.close()
