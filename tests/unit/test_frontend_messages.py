"""What front-end processes and the engine exchange: requests, responses and errors survive the
trip unchanged, messages longer than a ring slot arrive whole over a real channel, and the
``--frontends`` flag's choices and refusals."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import numpy as np
import pytest

from inferd.cli.main import build_parser
from inferd.cli.serve import config_from_args
from inferd.core.inference import InferRequest, InferResponse, RequestedOutput
from inferd.errors import (
    InferdError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OverloadedError,
)
from inferd.server.config import ServerConfig
from inferd.server.frontends.channel import create_channel
from inferd.server.frontends.link import ARENA, MessageLink
from inferd.server.frontends.messages import (
    Kind,
    decode_error,
    decode_request,
    decode_response,
    encode_error,
    encode_request,
    encode_response,
)
from inferd.server.frontends.supervisor import auto_frontends, frontends_for


def _view(data: bytes) -> memoryview:
    return memoryview(data)


def test_a_request_arrives_as_it_left() -> None:
    request = InferRequest(
        model_name="m",
        inputs={
            "F": np.arange(6, dtype=np.float32).reshape(2, 3),
            "B": np.array([[b"a", b""], [b"xyz", b"\x00\xff"]], dtype=object),
            "BIG": np.arange(4, dtype=">i4"),  # big-endian: sent little-endian
            "BOOL": np.array([True, False]),
        },
        model_version="3",
        id="req-1",
        outputs=[RequestedOutput("O", binary=True, classification=2, parameters={"k": 1})],
        parameters={"s": "v", "n": 2, "f": 0.5, "b": True},
        binary_output_default=True,
        trace_context={"traceparent": "00-ab-cd-01"},
    )
    back = decode_request(_view(encode_request(request)))
    assert (back.model_name, back.model_version, back.id) == ("m", "3", "req-1")
    assert back.parameters == request.parameters
    assert back.binary_output_default is True
    assert back.trace_context == {"traceparent": "00-ab-cd-01"}
    assert back.outputs == request.outputs
    assert list(back.inputs) == ["F", "B", "BIG", "BOOL"]
    for name, array in request.inputs.items():
        assert back.inputs[name].shape == array.shape
        assert back.inputs[name].tolist() == array.tolist()
    assert back.inputs["F"].dtype == np.float32
    assert back.inputs["BIG"].dtype == np.dtype("<i4")
    assert back.inputs["BOOL"].dtype == np.bool_


def test_every_output_requested_stays_none() -> None:
    request = InferRequest("m", {"X": np.zeros((0, 4), np.int64)})
    back = decode_request(_view(encode_request(request)))
    assert back.outputs is None
    assert back.inputs["X"].shape == (0, 4)


def test_a_response_arrives_as_it_left() -> None:
    response = InferResponse(
        model_name="m",
        model_version="1",
        outputs={
            "P": np.array([[0.25, 0.75]], dtype=np.float64),
            "S": np.array(["é", "b"], dtype=object),  # text is sent as UTF-8 bytes
        },
        id="x",
        parameters={"variant": "b"},
    )
    back = decode_response(_view(encode_response(response)))
    assert (back.model_name, back.model_version, back.id) == ("m", "1", "x")
    assert back.parameters == {"variant": "b"}
    assert back.outputs["P"].tolist() == [[0.25, 0.75]]
    assert back.outputs["S"].tolist() == ["é".encode(), b"b"]


@pytest.mark.parametrize("error", [NotFoundError("gone"), OverloadedError("full")])
def test_errors_keep_their_code_and_message(error: InferdError) -> None:
    back = decode_error(_view(encode_error(error)))
    assert type(back) is type(error)
    assert back.message == error.message


@pytest.mark.parametrize(
    ("arena_slots", "arena_slot_bytes", "through_arena"),
    [
        (0, 0, 0),  # no arenas: every long message in pieces
        (64, 1024, 4),  # room for all: the long ones through the arena, none in pieces
        (2, 64, 1),  # a tiny arena: what does not fit (or finds it full) goes in pieces
    ],
)
@pytest.mark.parametrize("in_parts", [False, True])
def test_messages_longer_than_a_slot_arrive_whole_and_in_order(
    arena_slots: int, arena_slot_bytes: int, through_arena: int, in_parts: bool
) -> None:
    async def main() -> None:
        engine_end, spec = create_channel(
            slots=4, slot_bytes=64, arena_slots=arena_slots, arena_slot_bytes=arena_slot_bytes
        )
        frontend_end = spec.open()
        try:
            sender = MessageLink(frontend_end, 64)
            receiver = MessageLink(engine_end, 64)
            bodies = [bytes([i]) * size for i, size in enumerate((0, 10, 48, 49, 100, 1000, 5000))]

            async def send_all() -> None:
                # several calls at once: their pieces interleave on the ring
                await asyncio.gather(
                    *(
                        sender.send(Kind.INFER, call, _parts(body) if in_parts else body)
                        for call, body in enumerate(bodies)
                    )
                )

            task = asyncio.create_task(send_all())
            got = {}
            for _ in bodies:
                message = await receiver.receive()
                assert message.flags == 0
                got[message.call] = bytes(message.body)
            await task
            assert got == dict(enumerate(bodies))
            assert sender.arena_messages == through_arena
            if engine_end.incoming_arena is not None:  # every block was released once read
                assert engine_end.incoming_arena.free_slots() == arena_slots
        finally:
            frontend_end.close()
            engine_end.close()

    asyncio.run(main())


def _parts(body: bytes) -> list[bytes | memoryview]:
    """``body`` as a sender hands it over without joining: bytes and byte views."""
    third = len(body) // 3
    return [body[:third], memoryview(body)[third : 2 * third], b"", body[2 * third :]]


def test_replies_through_the_engines_arena_reach_the_front_end() -> None:
    """The other direction: the engine allocates in its arena, the front end releases."""

    async def main() -> None:
        engine_end, spec = create_channel(slots=4, slot_bytes=64)
        frontend_end = spec.open()
        try:
            sender, receiver = MessageLink(engine_end, 64), MessageLink(frontend_end, 64)
            response = InferResponse(
                model_name="m",
                model_version="1",
                outputs={"y": np.arange(300_000, dtype=np.float32).reshape(3, 100_000)},
            )
            await sender.send(Kind.RESPONSE, 5, encode_response(response))
            message = await receiver.receive()
            assert (message.kind, message.call, sender.arena_messages) == (Kind.RESPONSE, 5, 1)
            back = decode_response(message.body)
            np.testing.assert_array_equal(back.outputs["y"], response.outputs["y"])
            assert frontend_end.incoming_arena is not None
            assert frontend_end.incoming_arena.free_slots() == frontend_end.incoming_arena.slots
        finally:
            frontend_end.close()
            engine_end.close()

    asyncio.run(main())


def test_a_message_naming_a_block_outside_the_arena_is_refused() -> None:
    async def main() -> None:
        engine_end, spec = create_channel(slots=4, slot_bytes=64, arena_slots=4)
        frontend_end = spec.open()
        try:
            receiver = MessageLink(engine_end, 64)
            forged = struct.pack("<BBxxxxxxQqqq", Kind.INFER, ARENA, 1, 3, 2, 10)  # slots 3..5
            await frontend_end.send(forged)
            with pytest.raises(InternalError, match="bad arena block"):
                await receiver.receive()
        finally:
            frontend_end.close()
            engine_end.close()

    asyncio.run(main())


def test_a_slot_must_hold_a_header() -> None:
    engine_end, _spec = create_channel(slots=2, slot_bytes=64)
    try:
        with pytest.raises(ValueError, match="header"):
            MessageLink(engine_end, 16)
    finally:
        engine_end.close()


def _config(*flags: str) -> ServerConfig:
    args = build_parser().parse_args(["serve", "--model-repository", "models", *flags])
    return config_from_args(args)


def test_the_frontends_flag() -> None:
    assert _config().frontends == 1
    assert _config("--frontends", "3").frontends == 3
    assert _config("--frontends", "auto").frontends == auto_frontends()
    with pytest.raises(InvalidArgumentError, match="--frontends must be >= 1"):
        _config("--frontends", "0")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--model-repository", "m", "--frontends", "many"])


def test_auto_chooses_from_the_cores_and_the_cgroup_quota(tmp_path: Path) -> None:
    assert [frontends_for(n) for n in (1, 2, 3, 4, 16)] == [1, 1, 2, 3, 15]
    (tmp_path / "cpu.max").write_text("100000 100000\n")  # a quota of one CPU
    assert auto_frontends(tmp_path) == 1
