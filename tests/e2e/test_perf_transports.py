"""The load generator's network transports against ``inferd serve``: answers arrive, errors carry
the server's message, statistics grow by what was sent, for every transport."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from inferd.errors import InvalidArgumentError
from inferd.examples.sequence_models import build_simple_sequence
from inferd.examples.simple_models import build_simple
from inferd.examples.streaming_models import build_streaming
from inferd.testing import ServerProcess, running_server
from inferd.tools.perf.grpc_client import GrpcTransport
from inferd.tools.perf.http_client import HttpTransport
from inferd.tools.perf.inputs import build_requests
from inferd.tools.perf.transport import PerfRequestError, RequestData, SequenceFlags, Transport

pytestmark = pytest.mark.e2e

TRANSPORTS = ("http-json", "http-binary", "grpc", "grpc-stream")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("perf") / "models"
    build_simple("simple", repo / "simple")
    build_simple("simple_string", repo / "simple_string")
    build_streaming("repeat_int32", repo / "repeat_int32")
    build_simple_sequence("simple_sequence", repo / "simple_sequence")
    with running_server([repo]) as proc:
        yield proc


def transport(server: ServerProcess, name: str, model: str) -> Transport:
    if name.startswith("http"):
        return HttpTransport(server.http_url, model, binary=name == "http-binary")
    return GrpcTransport(server.grpc_url, model, streaming=name == "grpc-stream")


def counts(stats: dict[str, Any] | None) -> tuple[int, int]:
    assert stats is not None
    return stats["inference_stats"]["success"]["count"], stats["inference_count"]


async def drive(t: Transport, requests: int, channels: int, prepared: int = 2) -> None:
    """``requests`` calls spread over ``channels`` concurrent channels, cycling through the
    ``prepared`` requests."""
    opened = [await t.open_channel() for _ in range(channels)]

    async def run(channel: Any, share: int) -> None:
        for i in range(share):
            await channel.infer(i % prepared)

    await asyncio.gather(*(run(c, requests // channels) for c in opened))
    for channel in opened:
        await channel.close()


@pytest.mark.parametrize("name", TRANSPORTS)
async def test_simple_load_and_statistics(server: ServerProcess, name: str) -> None:
    t = transport(server, name, "simple")
    try:
        info = await t.model_info()
        assert info.max_batch_size == 8
        assert [i.shape for i in info.inputs] == [(16,), (16,)]
        await t.prepare(build_requests(info, "random", count=2), 2, None)
        before = counts(await t.statistics())
        await drive(t, 300, 4)
        after = counts(await t.statistics())
        assert after[0] - before[0] == 300
        assert after[1] - before[1] == 600  # batch size 2
    finally:
        await t.close()


@pytest.mark.parametrize("name", TRANSPORTS)
async def test_bytes_model_and_requested_outputs(server: ServerProcess, name: str) -> None:
    t = transport(server, name, "simple_string")
    try:
        info = await t.model_info()
        assert info.inputs[0].datatype == "BYTES"
        # the model parses its strings as numbers
        requests = build_requests(info, "random", string_data="12")
        requests.append(build_requests(info, "random", string_data="-3")[0])
        await t.prepare(requests, 1, ["OUTPUT1"])
        before = counts(await t.statistics())
        await drive(t, 100, 2)
        assert counts(await t.statistics())[0] - before[0] == 100
    finally:
        await t.close()


@pytest.mark.parametrize("name", TRANSPORTS)
async def test_error_answers_carry_the_servers_message(server: ServerProcess, name: str) -> None:
    t = transport(server, name, "simple")
    try:
        info = await t.model_info()
        good = build_requests(info, "zero")[0]
        wrong = RequestData({"INPUT0": np.zeros(15, np.int32), "INPUT1": np.zeros(16, np.int32)})
        await t.prepare([good, wrong], 1, None)
        channel = await t.open_channel()
        with pytest.raises(PerfRequestError, match="INPUT0") as caught:
            await channel.infer(1)
        assert "15" in str(caught.value)
        await channel.infer(0)  # the connection or stream still serves
        with pytest.raises(PerfRequestError, match="INPUT0"):
            await channel.infer(1)
        await channel.close()
    finally:
        await t.close()


async def test_decoupled_model_over_the_stream_waits_for_the_final_response(
    server: ServerProcess,
) -> None:
    t = transport(server, "grpc-stream", "repeat_int32")
    try:
        info = await t.model_info()
        assert info.decoupled
        three = RequestData(
            {
                "IN": np.array([4, 5, 6], np.int32),
                "DELAY": np.full(3, 2000, np.uint32),
                "WAIT": np.array([5000], np.uint32),
            }
        )
        await t.prepare([three], 1, None)
        channel = await t.open_channel()
        before = counts(await t.statistics())[0]
        for i in range(1, 4):
            await channel.infer(0)
            # the request is complete (counted) when infer returns
            assert counts(await t.statistics())[0] - before == i
        await drive(t, 60, 3, prepared=1)
        assert counts(await t.statistics())[0] - before == 63
    finally:
        await t.close()


async def test_decoupled_model_over_unary_grpc_is_refused(server: ServerProcess) -> None:
    t = transport(server, "grpc", "repeat_int32")
    try:
        info = await t.model_info()
        with pytest.raises(InvalidArgumentError, match="--streaming"):
            await t.prepare(
                build_requests(info, "zero", shapes={"IN": (1,), "DELAY": (1,)}), 1, None
            )
    finally:
        await t.close()


@pytest.mark.parametrize("name", TRANSPORTS)
async def test_sequences_carry_their_flags(server: ServerProcess, name: str) -> None:
    t = transport(server, name, "simple_sequence")
    try:
        info = await t.model_info()
        assert info.sequence
        await t.prepare(build_requests(info, "zero"), 1, None)
        channel = await t.open_channel()
        base = 1000 + TRANSPORTS.index(name) * 10
        for step in range(4):
            await channel.infer(0, SequenceFlags(base, start=step == 0, end=step == 3))
        with pytest.raises(PerfRequestError, match="START"):
            await channel.infer(0, SequenceFlags(base + 1, start=False, end=False))
        await channel.close()
    finally:
        await t.close()


@pytest.mark.parametrize("name", ["http-binary", "grpc-stream"])
async def test_a_cancelled_request_does_not_shift_the_answers(
    server: ServerProcess, name: str
) -> None:
    t = transport(server, name, "simple")
    try:
        info = await t.model_info()
        good = build_requests(info, "zero")[0]
        wrong = RequestData({"INPUT0": np.zeros(15, np.int32), "INPUT1": np.zeros(16, np.int32)})
        await t.prepare([good, wrong], 1, None)
        channel = await t.open_channel()
        await channel.infer(0)
        pending = asyncio.ensure_future(channel.infer(1))
        await asyncio.sleep(0)  # the request is written, its answer not read
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        for _ in range(5):  # each answer is its own request's, not the abandoned one's error
            await channel.infer(0)
        with pytest.raises(PerfRequestError):
            await channel.infer(1)
        await channel.close()
    finally:
        await t.close()


async def test_unreachable_server_and_unknown_model(server: ServerProcess) -> None:
    with pytest.raises(PerfRequestError, match="cannot connect"):
        await HttpTransport("127.0.0.1:1", "simple").model_info()
    for name in TRANSPORTS:
        t = transport(server, name, "no_such_model")
        try:
            with pytest.raises(PerfRequestError, match="no_such_model"):
                await t.model_info()
        finally:
            await t.close()


@pytest.mark.parametrize("name", ["grpc", "http-binary"])
async def test_requests_larger_than_a_window_arrive_whole(server: ServerProcess, name: str) -> None:
    t = transport(server, name, "simple")
    try:
        await t.model_info()
        # 1 MB for INPUT0: past HTTP/2's default 64 KiB window and 16 KiB frames
        big = RequestData({"INPUT0": np.zeros(250_000, np.int32), "INPUT1": np.zeros(16, np.int32)})
        await t.prepare([big], 1, None)
        channel = await t.open_channel()
        for _ in range(3):  # the server read it all: it names the shape it got
            with pytest.raises(PerfRequestError, match="250000"):
                await channel.infer(0)
        await channel.close()
    finally:
        await t.close()
