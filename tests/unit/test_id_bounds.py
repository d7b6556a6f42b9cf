"""Ids a client chooses (request ids, string sequence ids) are bounded once, in the codecs, on
every wire; and the features that remember ids keep a bounded number for a bounded time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc._utils import _get_inference_request as grpc_request
from tritonclient.http._utils import _get_inference_request as http_request

from inferd.codecs import v2_grpc, v2_http
from inferd.codecs.generate_json import decode_generate_request
from inferd.codecs.limits import MAX_ID_BYTES, check_id
from inferd.core.metadata import TensorMetadata
from inferd.errors import InvalidArgumentError
from inferd.rollout.feedback import RoutedIds
from inferd.rollout.policy import MAX_FEEDBACK_IDS, MAX_FEEDBACK_TTL_S, parse_policy
from inferd.scheduling.sequence_policy import (
    REMEMBERED_IDS,
    Item,
    Refusal,
    SequenceSlots,
    SlotPolicy,
)
from inferd.testing import FakeClock

LONGEST = "x" * MAX_ID_BYTES
TOO_LONG = "x" * (MAX_ID_BYTES + 1)
# 64 four-byte characters are 256 bytes; one more is 260: the bound counts bytes, not characters
WIDE_LONGEST = "\U0001f600" * (MAX_ID_BYTES // 4)
WIDE_TOO_LONG = WIDE_LONGEST + "\U0001f600"
MIB = "i" * (1 << 20)


def _http_body(
    binary: bool, request_id: str = "", sequence_id: int | str = 0
) -> tuple[bytes, int | None]:
    x = httpclient.InferInput("X", [1, 2], "INT32")
    x.set_data_from_numpy(np.array([[1, 2]], dtype=np.int32), binary_data=binary)
    body, header_length = http_request(
        [x], request_id, None, sequence_id, sequence_id != 0, False, 0, None, None
    )
    return body, header_length


def _grpc_msg(request_id: str = "", sequence_id: int | str = 0) -> Any:
    x = grpcclient.InferInput("X", [1, 2], "INT32")
    x.set_data_from_numpy(np.array([[1, 2]], dtype=np.int32))
    return grpc_request(
        "m", [x], "", request_id, None, sequence_id, sequence_id != 0, False, 0, None, None
    )


def _generate(body: dict[str, Any]) -> Any:
    return decode_generate_request("m", "", body, [TensorMetadata("text", "BYTES", [-1])])


@pytest.mark.parametrize("value", ["", "42", LONGEST, WIDE_LONGEST])
def test_an_id_within_the_bound_passes(value: str) -> None:
    assert check_id(value, "id") is value


@pytest.mark.parametrize(
    ("value", "size"), [(TOO_LONG, MAX_ID_BYTES + 1), (WIDE_TOO_LONG, MAX_ID_BYTES + 4)]
)
def test_an_id_past_the_bound_is_refused_with_its_size(value: str, size: int) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_id(value, "inference request 'id'")
    assert str(info.value) == (
        f"inference request 'id' is {size} bytes long; at most {MAX_ID_BYTES} bytes are allowed"
    )


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_http_request_ids_are_bounded(binary: bool) -> None:
    body, header_length = _http_body(binary, request_id=LONGEST)
    assert v2_http.decode_infer_request("m", "", body, header_length).id == LONGEST
    body, header_length = _http_body(binary, request_id=MIB)
    with pytest.raises(InvalidArgumentError, match=r"inference request 'id' is 1048576 bytes"):
        v2_http.decode_infer_request("m", "", body, header_length)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_http_string_sequence_ids_are_bounded(binary: bool) -> None:
    body, header_length = _http_body(binary, sequence_id=LONGEST)
    decoded = v2_http.decode_infer_request("m", "", body, header_length)
    assert decoded.parameters["sequence_id"] == LONGEST
    body, header_length = _http_body(binary, sequence_id=MIB)
    with pytest.raises(InvalidArgumentError, match=r"parameter 'sequence_id' is 1048576 bytes"):
        v2_http.decode_infer_request("m", "", body, header_length)
    body, header_length = _http_body(binary, sequence_id=2**64 - 1)  # integers: any uint64
    decoded = v2_http.decode_infer_request("m", "", body, header_length)
    assert decoded.parameters["sequence_id"] == 2**64 - 1


def test_grpc_request_and_sequence_ids_are_bounded() -> None:
    assert v2_grpc.decode_infer_request(_grpc_msg(request_id=LONGEST)).id == LONGEST
    with pytest.raises(InvalidArgumentError, match=r"inference request 'id' is 1048576 bytes"):
        v2_grpc.decode_infer_request(_grpc_msg(request_id=MIB))
    decoded = v2_grpc.decode_infer_request(_grpc_msg(sequence_id=WIDE_LONGEST))
    assert decoded.parameters["sequence_id"] == WIDE_LONGEST
    with pytest.raises(InvalidArgumentError, match=r"parameter 'sequence_id' is 260 bytes"):
        v2_grpc.decode_infer_request(_grpc_msg(sequence_id=WIDE_TOO_LONG))


def test_generate_request_and_sequence_ids_are_bounded() -> None:
    assert _generate({"id": LONGEST, "text": "a"}).id == LONGEST
    with pytest.raises(InvalidArgumentError, match=r"'id' of the generate request is 1048576"):
        _generate({"id": MIB, "text": "a"})
    with pytest.raises(InvalidArgumentError, match=r"parameter 'sequence_id' of 'parameters'"):
        _generate({"text": "a", "parameters": {"sequence_id": TOO_LONG}})
    with pytest.raises(InvalidArgumentError, match=r"parameter 'sequence_id' of the generate"):
        _generate({"text": "a", "sequence_id": TOO_LONG})


# -- what remembers ids -------------------------------------------------------------------------


def test_feedback_ids_are_bounded_in_count_and_age() -> None:
    clock = FakeClock()
    ids = RoutedIds(max_ids=100, ttl_s=10.0, clock=clock)
    for i in range(1000):  # the longest ids a client may send
        ids.remember(f"{i:0{MAX_ID_BYTES}d}", "v1")
    assert len(ids) == 100  # the newest 100; the 900 oldest were forgotten
    assert ids.take(f"{899:0{MAX_ID_BYTES}d}") is None
    assert ids.take(f"{999:0{MAX_ID_BYTES}d}") == "v1"
    clock.advance(10 * 10**9)  # every remembered id is now as old as the ttl
    assert ids.take(f"{998:0{MAX_ID_BYTES}d}") is None
    for i in range(50):  # new traffic forgets the expired ids as it arrives
        ids.remember(f"new{i}", "v2")
    assert len(ids) <= 50 + 100 - 2 * 50
    assert ids.take("new49") == "v2"


@pytest.mark.parametrize(
    ("feedback", "message"),
    [
        ({"max_ids": MAX_FEEDBACK_IDS + 1}, f"must be at most {MAX_FEEDBACK_IDS}"),
        ({"ttl_s": MAX_FEEDBACK_TTL_S * 2}, f"<= {MAX_FEEDBACK_TTL_S:g}"),
    ],
)
def test_a_feedback_policy_cannot_remember_without_bound(
    feedback: dict[str, Any], message: str
) -> None:
    raw = {"kind": "bandit", "variants": [{"version": 1}, {"version": 2}], "feedback": feedback}
    with pytest.raises(InvalidArgumentError, match=message):
        parse_policy(raw)
    raw["feedback"] = {"max_ids": MAX_FEEDBACK_IDS, "ttl_s": MAX_FEEDBACK_TTL_S}
    parse_policy(raw)


def test_ended_sequence_ids_are_remembered_up_to_a_count() -> None:
    """An ended id is remembered (a late request hears that its sequence ended) for the last
    REMEMBERED_IDS sequences only; an older one reads as never started."""
    slots = SequenceSlots(
        SlotPolicy(
            strategy="direct",
            instances=1,
            slots_per_instance=1,
            max_batch_size=1,
            max_sequence_idle_ns=10**9,
        )
    )
    count = REMEMBERED_IDS + 10
    for i in range(count):
        key = f"{i:0{MAX_ID_BYTES}d}"
        whole = Item(i, i, start=True, end=True)
        assert slots.admit(key, whole) is None
        (batch,) = slots.plan(i, frozenset({0})).batches
        assert [k for k, _, _ in batch.items] == [key]
        slots.complete(key, whole, i)
    late = Item(count, count, start=False, end=False)
    assert slots.admit(f"{count - 1:0{MAX_ID_BYTES}d}", late) is Refusal.ENDED
    assert slots.admit(f"{count - REMEMBERED_IDS:0{MAX_ID_BYTES}d}", late) is Refusal.ENDED
    forgotten = f"{count - REMEMBERED_IDS - 1:0{MAX_ID_BYTES}d}"
    assert slots.admit(forgotten, late) is Refusal.NOT_STARTED
