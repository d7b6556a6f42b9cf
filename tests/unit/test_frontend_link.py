"""The front ends' per-request path over a real channel: a link drained without waiting, sends
that do not wait, tensors of every layout through the codec, and the front end's memo of which
paths are inference routes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
import pytest

from inferd.core.inference import InferRequest, InferResponse, RequestedOutput
from inferd.errors import InternalError
from inferd.server.frontends.bridge import EngineBridge
from inferd.server.frontends.channel import create_channel
from inferd.server.frontends.link import MessageLink
from inferd.server.frontends.messages import (
    _HEADS,
    _HEADS_KEPT,
    Kind,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    json_and_blobs,
)
from inferd.server.frontends.proxy import EngineProxy
from inferd.server.frontends.worker import _INFER_PATHS, _INFER_PATHS_KEPT, _is_infer


@pytest.mark.parametrize("arena_slots", [0, 4])  # long messages in pieces, or in the arena
def test_poll_takes_whole_messages_in_order_and_never_waits(arena_slots: int) -> None:
    async def main() -> None:
        engine_end, spec = create_channel(slots=8, slot_bytes=64, arena_slots=arena_slots)
        frontend_end = spec.open()
        try:
            sender, receiver = MessageLink(frontend_end, 64), MessageLink(engine_end, 64)
            assert receiver.poll() is None
            await sender.send(Kind.INFER, 1, b"a")
            await sender.send(Kind.HTTP, 2, b"x" * 100)  # longer than a slot
            await sender.send(Kind.CANCEL, 3)
            got = [receiver.poll() for _ in range(3)]
            assert [(m.kind, m.call, bytes(m.body)) for m in got if m is not None] == [
                (Kind.INFER, 1, b"a"),
                (Kind.HTTP, 2, b"x" * 100),
                (Kind.CANCEL, 3, b""),
            ]
            assert receiver.poll() is None
            await sender.send(Kind.INFER, 4, b"b")  # receive() still finds what poll left
            message = await asyncio.wait_for(receiver.receive(), 10)
            assert (message.call, bytes(message.body)) == (4, b"b")
        finally:
            frontend_end.close()
            engine_end.close()

    asyncio.run(main())


def test_poll_returns_nothing_for_a_message_whose_pieces_are_still_arriving() -> None:
    async def main() -> None:
        engine_end, spec = create_channel(slots=2, slot_bytes=64, arena_slots=0)
        frontend_end = spec.open()
        try:
            sender, receiver = MessageLink(frontend_end, 64), MessageLink(engine_end, 64)
            body = bytes(range(200))  # 5 pieces of 48 bytes on a ring of 2 slots
            task = asyncio.create_task(sender.send(Kind.INFER, 7, body))
            for _ in range(5):
                await asyncio.sleep(0)
            assert receiver.poll() is None  # took the 2 pieces there, freed room
            message = await asyncio.wait_for(receiver.receive(), 10)
            await asyncio.wait_for(task, 10)
            assert (message.call, bytes(message.body)) == (7, body)
        finally:
            frontend_end.close()
            engine_end.close()

    asyncio.run(main())


def test_send_nowait_sends_what_fits_now_and_nothing_else() -> None:
    async def main() -> None:
        engine_end, spec = create_channel(slots=2, slot_bytes=64)
        frontend_end = spec.open()
        try:
            sender, receiver = MessageLink(frontend_end, 64), MessageLink(engine_end, 64)
            assert not sender.send_nowait(Kind.INFER, 9, b"x" * 49)  # longer than a slot
            assert not sender.send_nowait(Kind.INFER, 9, [b"x" * 40, memoryview(b"y" * 9)])
            assert receiver.poll() is None  # nothing of them was sent
            assert sender.send_nowait(Kind.INFER, 1, [b"a", memoryview(b"b")])
            assert sender.send_nowait(Kind.RESPONSE, 2, b"c", 1)
            assert not sender.send_nowait(Kind.INFER, 3, b"d")  # the ring is full
            # a sender waiting for room goes first: send_nowait does not overtake it
            waiting = asyncio.create_task(sender.send(Kind.INFER, 3, b"d"))
            for _ in range(3):
                await asyncio.sleep(0)
            first = receiver.poll()
            assert first is not None
            assert (first.kind, first.call, bytes(first.body)) == (Kind.INFER, 1, b"ab")
            assert not sender.send_nowait(Kind.INFER, 4, b"e")
            await asyncio.wait_for(waiting, 10)
            rest = [await asyncio.wait_for(receiver.receive(), 10) for _ in range(2)]
            assert [(m.call, m.flags, bytes(m.body)) for m in rest] == [(2, 1, b"c"), (3, 0, b"d")]
            assert sender.send_nowait(Kind.INFER, 4, b"e")
            last = await asyncio.wait_for(receiver.receive(), 10)
            assert (last.call, bytes(last.body)) == (4, b"e")
            assert receiver.poll() is None
        finally:
            frontend_end.close()
            engine_end.close()

    asyncio.run(main())


def test_tensors_of_every_layout_arrive_as_they_left() -> None:
    inputs: dict[str, np.ndarray[Any, Any]] = {
        "EMPTY": np.zeros((0, 64), np.float32),
        "SCALAR": np.array(2.5, np.float32),
        "STRIDED": np.arange(24, dtype=np.int64).reshape(4, 6)[:, ::2],
        "FORTRAN": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "BIG": np.arange(5, dtype=">f8"),
        "HALF": np.arange(4, dtype=np.float16).reshape(2, 2),
        "BOOL": np.array([[True], [False]]),
        "U8": np.arange(3, dtype=np.uint8),
    }
    back = decode_request(memoryview(encode_request(InferRequest("m", dict(inputs)))))
    assert list(back.inputs) == list(inputs)
    for name, array in inputs.items():
        got = back.inputs[name]
        assert got.shape == array.shape, name
        assert got.dtype == array.dtype.newbyteorder("<"), name
        np.testing.assert_array_equal(got, array)


@pytest.mark.parametrize("size", [255, 257, 0])
def test_a_tensor_whose_bytes_do_not_match_its_shape_is_refused(size: int) -> None:
    meta = {
        "m": "m",
        "v": "",
        "id": "",
        "p": {},
        "b": False,
        "o": None,
        "i": [["X", "<f4", [1, 64], size]],
        "t": None,
    }
    with pytest.raises(InternalError, match="tensor 'X' has"):
        decode_request(memoryview(json_and_blobs(meta, [b"\0" * size])))


def test_requests_decoded_alike_share_nothing_a_receiver_may_change() -> None:
    plain = memoryview(encode_request(InferRequest("m", {"X": np.ones((1, 4), np.float32)})))
    first, second = decode_request(plain), decode_request(plain)  # the second from the memo
    first.parameters["sequence_id"] = 5
    third = decode_request(plain)
    assert second.parameters == {}
    assert third.parameters == {}
    assert second.outputs is None
    assert second.trace_context is None
    assert third.inputs["X"].tolist() == [[1.0, 1.0, 1.0, 1.0]]
    rich = InferRequest(
        "m",
        {"X": np.ones((1, 4), np.float32)},
        outputs=[RequestedOutput("Y", parameters={"k": 1})],
        parameters={"p": 1},
        trace_context={"traceparent": "00-ab-cd-01"},
    )
    body = memoryview(encode_request(rich))
    one, two = decode_request(body), decode_request(body)
    assert one.outputs is not None
    assert two.outputs is not None
    assert one.trace_context is not None
    one.parameters["q"] = 2
    one.outputs[0].parameters["k"] = 2
    one.trace_context["traceparent"] = "changed"
    assert two.parameters == {"p": 1}
    assert two.outputs[0].parameters == {"k": 1}
    assert two.trace_context == {"traceparent": "00-ab-cd-01"}


def test_responses_decoded_alike_share_nothing_a_receiver_may_change() -> None:
    outputs = {"Y": np.arange(3, dtype=np.float32)}
    plain = memoryview(encode_response(InferResponse("m", "1", outputs)))
    first, second = decode_response(plain), decode_response(plain)
    first.parameters["variant"] = "b"
    assert second.parameters == {}
    assert decode_response(plain).parameters == {}
    body = memoryview(encode_response(InferResponse("m", "1", outputs, parameters={"p": 1})))
    one, two = decode_response(body), decode_response(body)
    one.parameters["variant"] = "b"
    assert two.parameters == {"p": 1}


def test_the_memo_of_heads_stays_bounded() -> None:
    for i in range(3 * _HEADS_KEPT):  # ever new heads: another id each time
        decode_request(memoryview(encode_request(InferRequest("m", {}, id=str(i)))))
    assert 0 < len(_HEADS) <= _HEADS_KEPT


def test_a_call_the_front_end_gives_up_is_cancelled_in_the_engine() -> None:
    """Through a real channel, proxy to bridge: a caller that goes away cancels the engine's
    inference; a CANCEL right behind its INFER (the task not started yet) keeps the request
    from the engine; the calls after them are answered; the bridge then stops cleanly."""

    async def main() -> None:
        engine_end, spec = create_channel(slots=8, slot_bytes=256)
        frontend_end = spec.open()
        log = logging.getLogger("test.frontend")
        seen: list[str] = []
        cancelled: list[str] = []

        class Engine:
            async def infer(self, request: InferRequest) -> InferResponse:
                seen.append(request.id)
                if request.id.startswith("wait"):
                    try:
                        await asyncio.Event().wait()
                    except asyncio.CancelledError:
                        cancelled.append(request.id)
                        raise
                outputs = {"Y": np.array([len(seen)], np.int32)}
                return InferResponse("m", "1", outputs, id=request.id)

        bridge = EngineBridge(Engine(), http_apps={}, servicer=None, log=log)
        proxy = EngineProxy(MessageLink(frontend_end, 256), log=log)
        serving = asyncio.create_task(bridge.serve(MessageLink(engine_end, 256), "test"))
        reading = asyncio.create_task(proxy.run())
        try:
            call = asyncio.create_task(proxy.infer(InferRequest("m", {}, id="wait-1")))
            for _ in range(1000):
                if seen:
                    break
                await asyncio.sleep(0.01)
            call.cancel()
            for _ in range(1000):
                if cancelled:
                    break
                await asyncio.sleep(0.01)
            assert cancelled == ["wait-1"]
            raw = MessageLink(frontend_end, 256)  # the front end's end, as a front end writes
            await raw.send(Kind.INFER, 10_000, encode_request(InferRequest("m", {}, id="wait-2")))
            await raw.send(Kind.CANCEL, 10_000)
            answer = await asyncio.wait_for(proxy.infer(InferRequest("m", {}, id="after")), 10)
            assert answer.id == "after"
            assert seen == ["wait-1", "after"]  # wait-2 was cancelled before it began
        finally:
            serving.cancel()
            reading.cancel()
            await asyncio.wait_for(asyncio.gather(serving, reading, return_exceptions=True), 10)
            frontend_end.close()
            engine_end.close()
        leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await asyncio.gather(*leftover, return_exceptions=True)  # the proxy's CANCEL sender
        assert all(t.done() for t in leftover)

    asyncio.run(main())


def _scope(raw_path: bytes | None, path: str) -> dict[str, object]:
    return {"type": "http", "method": "POST", "path": path, "raw_path": raw_path}


def test_inference_paths_are_told_apart_and_remembered() -> None:
    cases = [
        (b"/v2/models/mlp/infer", True),
        (b"/v2/models/mlp/versions/2/infer", True),
        (b"/v2/models/mlp/infer?x=1", True),
        (b"/v2/models/mlp/ready", False),
        (b"/v2/repository/models/mlp/load", False),
        (b"/v2/models/bad%2Fname/infer", False),  # refused by the name rule: the engine answers
        (b"/nowhere", False),
    ]
    for _ in range(2):  # the second time from the memo
        for raw, infer in cases:
            assert _is_infer(_scope(raw, raw.decode().partition("?")[0])) is infer, raw
    assert _is_infer(_scope(None, "/v2/models/mlp/infer")) is True  # no raw path: matched
    for i in range(3 * _INFER_PATHS_KEPT):  # a client calling ever new paths
        _is_infer(_scope(f"/v2/models/m{i}/infer".encode(), f"/v2/models/m{i}/infer"))
    assert len(_INFER_PATHS) <= _INFER_PATHS_KEPT
