"""Decoupled responses counted for the statistics extension's ``response_stats``: how the sink
times and classifies each response, how a version's counters add them up (Triton's rules), and
how the codecs render them over HTTP JSON and gRPC."""

from __future__ import annotations

import itertools

import numpy as np
from google.protobuf.json_format import MessageToDict
from hypothesis import given
from hypothesis import strategies as st

from inferd.codecs import statistics
from inferd.core.statistics import RESPONSE_PHASES
from inferd.core.streaming import ResponseSink, ResponseTiming, StreamedResponse
from inferd.errors import InvalidArgumentError
from inferd.scheduling.stats import ModelStats

OUT = {"OUT": np.zeros(1, np.int32)}


class StepClock:
    """Reads 0, then every later read ``step`` ns after the previous one."""

    def __init__(self, step: int) -> None:
        self._ticks = itertools.count(0, step)

    def __call__(self) -> int:
        return next(self._ticks)


def sink_with(clock: StepClock) -> tuple[ResponseSink, list[tuple[object, ResponseTiming]]]:
    got: list[tuple[object, ResponseTiming]] = []
    sink = ResponseSink(lambda item, timing: got.append((item, timing)), clock=clock)
    return sink, got


def test_each_response_is_timed_from_the_previous_one_and_classified() -> None:
    sink, got = sink_with(StepClock(100))  # created at 0
    sink.adopt()  # execution begins at 100
    assert sink.send(StreamedResponse(OUT, output_ns=30))  # at 200
    assert sink.send(StreamedResponse(None, InvalidArgumentError("bad")))  # at 300
    assert sink.send(StreamedResponse(None, None, final=True))  # at 400
    assert not sink.send(StreamedResponse(OUT))  # after the final one: dropped, not counted
    assert [timing for _, timing in got] == [
        ResponseTiming(0, "success", 70, 30),
        ResponseTiming(1, "fail", 100, 0),
        ResponseTiming(2, "empty", 100, 0),
    ]
    assert sink.sent == 2  # the final flag alone is not a response


def test_a_cancelled_request_counts_one_cancel_when_the_model_ends_it() -> None:
    sink, got = sink_with(StepClock(10))
    sink.adopt()  # 10
    assert sink.send(StreamedResponse(OUT))  # 20
    sink.cancel()  # 30
    assert not sink.send(StreamedResponse(OUT))  # 40: dropped, nothing counted
    assert not sink.send(StreamedResponse(None, None, final=True))  # 50: the model ends it
    assert got[1:] == [(None, ResponseTiming(1, "cancel", 20, 0))]
    assert not sink.send(StreamedResponse(None, None, final=True))
    assert len(got) == 2


def test_version_counters_follow_tritons_rules() -> None:
    stats = ModelStats("m", 1)
    stats.record_response(ResponseTiming(0, "success", 70, 30))
    stats.record_response(ResponseTiming(0, "success", 10, 5))
    stats.record_response(ResponseTiming(1, "fail", 40, 0))
    stats.record_response(ResponseTiming(1, "fail", 40, 2))
    stats.record_response(ResponseTiming(2, "empty", 9, 0))
    stats.record_response(ResponseTiming(3, "cancel", 25, 0))
    got = {
        k: {p: (getattr(v, p).count, getattr(v, p).ns) for p in RESPONSE_PHASES}
        for k, v in stats.snapshot().response_stats.items()
    }
    zero = (0, 0)
    assert got == {
        0: {
            "compute_infer": (2, 80),
            "compute_output": (2, 35),
            "success": (2, 115),
            "fail": zero,
            "empty_response": zero,
            "cancel": zero,
        },
        1: {
            "compute_infer": (2, 80),
            "compute_output": (1, 2),  # only a failure that had outputs
            "success": zero,
            "fail": (2, 82),
            "empty_response": zero,
            "cancel": zero,
        },
        2: {
            "compute_infer": (1, 9),
            "compute_output": zero,
            "success": zero,
            "fail": zero,
            "empty_response": (1, 9),
            "cancel": zero,
        },
        3: {
            "compute_infer": zero,
            "compute_output": zero,
            "success": zero,
            "fail": zero,
            "empty_response": zero,
            "cancel": (1, 25),
        },
    }


def test_a_snapshot_is_a_copy() -> None:
    stats = ModelStats("m", 1)
    stats.record_response(ResponseTiming(0, "success", 1, 1))
    snap = stats.snapshot()
    stats.record_response(ResponseTiming(0, "success", 1, 1))
    assert snap.response_stats[0].success.count == 1


@given(
    st.lists(
        st.tuples(
            st.integers(0, 12),
            st.sampled_from(["success", "fail", "empty", "cancel"]),
            st.integers(0, 10**9),
            st.integers(0, 10**9),
        ),
        max_size=40,
    )
)
def test_http_json_and_grpc_render_the_same_response_stats(
    timings: list[tuple[int, str, int, int]],
) -> None:
    stats = ModelStats("m", 3)
    for index, kind, infer, output in timings:
        stats.record_response(ResponseTiming(index, kind, infer, output))
    snaps = [stats.snapshot()]
    as_json = statistics.to_json(snaps)["model_stats"][0]["response_stats"]
    as_proto = statistics.to_proto(snaps).model_stats[0].response_stats
    assert list(as_json) == [str(i) for i in sorted({t[0] for t in timings})]
    assert set(as_proto) == set(as_json)
    for key, phases in as_json.items():
        assert list(phases) == list(RESPONSE_PHASES)
        rendered = MessageToDict(as_proto[key], preserving_proto_field_name=True)
        for phase, duration in phases.items():
            grpc = rendered.get(phase, {})
            assert duration == {"count": int(grpc.get("count", 0)), "ns": int(grpc.get("ns", 0))}


def test_an_ordinary_model_has_empty_response_stats() -> None:
    snaps = [ModelStats("m", 1).snapshot()]
    assert statistics.to_json(snaps)["model_stats"][0]["response_stats"] == {}
    assert len(statistics.to_proto(snaps).model_stats[0].response_stats) == 0
