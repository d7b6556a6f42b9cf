"""The payload log's batching: records encoded a batch at a time read back as the codec's form,
they are encoded on the event loop in callbacks of their own (never inside a request), the
writer wakes on a chunk or on its timer, nothing is lost on a clean shutdown, and a disk that
does not keep up costs drops (counted), never a blocked request."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.monitoring.payload_log import PayloadLogger, PayloadLogSettings
from inferd.monitoring.payload_log.buffer import HandOff
from inferd.monitoring.payload_log.encode import Chunk
from inferd.monitoring.payload_log.json_batch import json_lines
from inferd.monitoring.payload_log.jsonl import JsonlSink
from inferd.monitoring.payload_log.logger import CHUNK_BYTES, CHUNK_RECORDS
from inferd.monitoring.payload_log.records import Captured, capture_inputs, record_dict
from inferd.monitoring.payload_log.writer import Sink, open_sink

Array = np.ndarray[Any, Any]


def spec() -> ModelSpec:
    return spec_from_proto(
        parse_pbtxt(
            'name: "m" backend: "onnxruntime" max_batch_size: 8 '
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ] '
            'output [ { name: "y" data_type: TYPE_INT64 dims: [ 3 ] } ]',
            "test",
        )
    )


def request(i: int) -> InferRequest:
    x = np.array([[i, i + 0.5, -i]], dtype=np.float32)
    return InferRequest(model_name="m", inputs={"x": x}, id=f"r{i}", parameters={"p": i})


def outputs(i: int) -> dict[str, Array]:
    return {"y": np.array([[i, 2 * i, 3 * i]], dtype=np.int64)}


def read_ids(directory: Path) -> list[str]:
    return [
        json.loads(line)["id"]
        for path in sorted(directory.rglob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not met in time")


# -- the batch encoding --------------------------------------------------------------------------

DTYPES = ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", ">f4", ">i4", "O"]
SPECIAL = [np.nan, np.inf, -np.inf]
IDS = ["", "id-1", 'q"u,o"te', "\\", "%s%b"]


@st.composite
def layouts(draw: Any) -> tuple[np.dtype[Any], tuple[int, ...]]:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    return dtype, tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=3)))


@st.composite
def tensors(draw: Any, layout: tuple[np.dtype[Any], tuple[int, ...]]) -> Array:
    dtype, shape = layout
    size = int(np.prod(shape)) if shape else 1
    if dtype.kind == "O":
        items = draw(st.lists(st.binary(max_size=4), min_size=size, max_size=size))
        return np.array([*items, b""], dtype=object)[:size].reshape(shape)
    start = draw(st.integers(-50, 50))
    values = np.arange(start, start + size, dtype=np.float64) * draw(st.sampled_from([1, 0.25]))
    array = values.astype(dtype).reshape(shape)
    if dtype.kind == "f" and size and draw(st.integers(0, 4)) == 0:
        array.reshape(-1)[draw(st.integers(0, size - 1))] = draw(st.sampled_from(SPECIAL))
    if size > 1 and draw(st.booleans()):
        array = array.reshape(-1)[::-1].reshape(shape)  # not contiguous
    return array


@st.composite
def batches(draw: Any) -> list[Captured]:
    """Records of one layout (most batches) or of several, with ids and parameters JSON must
    escape."""
    names = ["a", "b%s", 'c"']
    shared = {n: draw(layouts()) for n in [*names, "out"]}
    one_layout = draw(st.booleans())
    bare = draw(st.booleans())  # no parameters on any record
    one_id = draw(st.sampled_from([None, "", "r"]))  # every record the same id, or each drawn

    def tensor(name: str) -> Array:
        return draw(tensors(shared[name] if one_layout else draw(layouts())))

    return [
        Captured(
            "m",
            1,
            one_id if one_id is not None else draw(st.sampled_from(IDS)),
            1_700_000_000_123_456_789 + i * 1_234_567,
            {n: tensor(n) for n in names},
            ("secret",) if one_layout or draw(st.booleans()) else (),
            {"out": tensor("out")},
            {} if bare else {"k": i, "flag": True, "text": '"%'},
        )
        for i in range(draw(st.integers(1, 6)))
    ]


@settings(max_examples=150, deadline=None)
@given(batches())
def test_a_batch_encodes_to_exactly_the_codecs_form_record_by_record(
    records: list[Captured],
) -> None:
    option = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
    expected = [orjson.dumps(record_dict(r), option=option) for r in records]
    assert json_lines(records) == expected


def test_a_non_finite_value_sends_only_its_own_tensor_to_binary() -> None:
    clean = np.array([1.5, 2.5], dtype=np.float32)
    dirty = np.array([np.nan, 1.0], dtype=np.float32)
    records = [
        Captured("m", 1, str(i), 0, {"x": x}, (), {"y": clean}, {})
        for i, x in enumerate([clean, dirty, clean])
    ]
    lines = [json.loads(line) for line in json_lines(records)]
    assert [("data" in r["inputs"][0]) for r in lines] == [True, False, True]
    assert all(r["outputs"][0]["data"] == [1.5, 2.5] for r in lines)
    assert "binary_data_base64" in lines[1]["inputs"][0]


def test_capture_keeps_the_request_inputs_and_copies_only_to_redact() -> None:
    inputs = {"x": np.zeros(3, np.float32), "card": np.array([b"4111"], dtype=object)}
    kept, redacted, nbytes = capture_inputs(inputs, frozenset())
    assert kept is inputs  # no dictionary built on the event loop
    assert (redacted, nbytes) == ((), 12 + inputs["card"].nbytes)
    kept, redacted, nbytes = capture_inputs(inputs, frozenset({"card"}))
    assert list(kept) == ["x"]
    assert kept["x"] is inputs["x"]
    assert (redacted, nbytes) == (("card",), 12)


# -- the hand-off --------------------------------------------------------------------------------


def test_a_chunk_offered_wakes_the_writer_and_close_lets_it_finish() -> None:
    handoff: HandOff[str] = HandOff(max_items=8, max_bytes=10_000)
    taken: list[list[str]] = []
    taker = threading.Thread(target=lambda: taken.append(handoff.take(timeout_s=60)))
    taker.start()
    assert handoff.admit(10)  # admitting a record wakes nobody
    handoff.offer("chunk")  # a chunk does: long before the taker's 60 s
    taker.join(timeout=10)
    assert not taker.is_alive()
    assert taken == [["chunk"]]
    handoff.offer("last")
    handoff.close()
    assert handoff.take(timeout_s=60) == ["last"]  # closed: at once, and still taken
    assert handoff.take(timeout_s=60) == []
    assert not handoff.admit(1)


# -- where records are encoded -------------------------------------------------------------------


class ThreadSpy(Mapping[str, int]):
    """Request parameters that note the threads reading them (the encoder does)."""

    def __init__(self, threads: set[str]) -> None:
        self.threads = threads

    def __getitem__(self, key: str) -> int:
        return {"k": 1}[key]

    def __iter__(self) -> Iterator[str]:
        self.threads.add(threading.current_thread().name)
        return iter(["k"])

    def __len__(self) -> int:
        return 1


def spied_request(i: int, threads: set[str]) -> InferRequest:
    req = request(i)
    req.parameters = ThreadSpy(threads)  # type: ignore[assignment]
    return req


def test_records_are_encoded_on_the_event_loop_never_inside_a_request(tmp_path: Path) -> None:
    threads: set[str] = set()
    logger = PayloadLogger(PayloadLogSettings(tmp_path, flush_secs=60))

    async def serve() -> None:
        logger.start()
        for i in range(CHUNK_RECORDS):  # a full chunk: encoded in a callback of its own
            logger.observe(spec(), 1, spied_request(i, threads), outputs(i))
            assert not threads  # not during the observation
        await asyncio.sleep(0)
        assert threads == {threading.current_thread().name}
        for i in range(CHUNK_RECORDS, CHUNK_RECORDS + 5):
            logger.observe(spec(), 1, spied_request(i, threads), outputs(i))
        await asyncio.to_thread(logger.stop)  # as the server stops it: drained on the loop

    asyncio.run(serve())
    assert threads == {"MainThread"}
    assert read_ids(tmp_path) == [f"r{i}" for i in range(CHUNK_RECORDS + 5)]
    assert logger.statistics().encode_cpu_seconds > 0  # the loop's share is counted


def test_a_chunk_of_large_tensors_is_encoded_once_its_bytes_have_gathered(
    tmp_path: Path,
) -> None:
    threads: set[str] = set()
    logger = PayloadLogger(PayloadLogSettings(tmp_path, flush_secs=60))
    big = {"y": np.zeros((1, CHUNK_BYTES // 16), dtype=np.int64)}  # half a chunk of bytes

    async def serve() -> None:
        logger.start()
        logger.observe(spec(), 1, spied_request(0, threads), big)
        await asyncio.sleep(0)
        assert not threads  # half a chunk's bytes: it waits
        logger.observe(spec(), 1, spied_request(1, threads), big)
        await asyncio.sleep(0)
        assert threads == {threading.current_thread().name}  # two records made a chunk
        await asyncio.to_thread(logger.stop)

    asyncio.run(serve())
    assert read_ids(tmp_path) == ["r0", "r1"]


def test_the_writer_asks_the_loop_for_what_waits_on_its_timer(tmp_path: Path) -> None:
    threads: set[str] = set()
    logger = PayloadLogger(PayloadLogSettings(tmp_path, flush_secs=0.05))

    async def serve() -> None:
        logger.start()
        logger.observe(spec(), 1, spied_request(0, threads), outputs(0))
        for _ in range(1000):
            if read_ids(tmp_path):
                break
            await asyncio.sleep(0.01)

    try:
        asyncio.run(serve())
    finally:
        logger.stop()
    assert read_ids(tmp_path) == ["r0"]
    assert threads == {"MainThread"}


# -- the writer's timer and shutdown -------------------------------------------------------------


def test_the_writer_writes_on_its_timer_without_being_woken(tmp_path: Path) -> None:
    logger = PayloadLogger(PayloadLogSettings(tmp_path, flush_secs=0.05))
    logger.start()
    try:
        logger.observe(spec(), 1, request(0), outputs(0))  # far below a quarter of the queue
        wait_for(lambda: read_ids(tmp_path) == ["r0"])
    finally:
        logger.stop()


def test_the_flush_interval_holds_records_until_it_passes_or_the_log_stops(tmp_path: Path) -> None:
    logger = PayloadLogger(PayloadLogSettings(tmp_path, flush_secs=60))
    logger.start()
    for i in range(5):
        logger.observe(spec(), 1, request(i), outputs(i))
    threading.Event().wait(0.3)
    assert read_ids(tmp_path) == []  # a minute's interval: nothing yet
    assert logger.statistics().queued == 5
    logger.stop()
    assert read_ids(tmp_path) == [f"r{i}" for i in range(5)]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_nothing_is_lost_on_a_clean_shutdown(tmp_path: Path, fmt: str) -> None:
    logger = PayloadLogger(
        PayloadLogSettings(tmp_path, flush_secs=0.01, format=fmt, queue_requests=100_000)
    )
    logger.start()
    n = 5000  # more than a Parquet row group, handed over in many batches
    for i in range(n):
        logger.observe(spec(), 1, request(i), outputs(i))
    logger.stop()
    if fmt == "jsonl":
        assert read_ids(tmp_path) == [f"r{i}" for i in range(n)]
    else:
        assert list(tmp_path.rglob("*.partial")) == []
        (path,) = tmp_path.rglob("*.parquet")
        table = pq.read_table(path)
        assert table.column("id").to_pylist() == [f"r{i}" for i in range(n)]
        row = table.slice(7, 1).to_pylist()[0]
        assert row["input.x"] == {"shape": [1, 3], "data": [7.0, 7.5, -7.0]}
        assert row["output.y"] == {"shape": [1, 3], "data": [7, 14, 21]}
        groups = pq.ParquetFile(path).metadata.num_row_groups
        assert groups == 2  # 4096 rows or more, then the rest when the file closed
    (stats,) = logger.statistics().models
    assert (stats.logged, stats.dropped_queue_full, stats.dropped_write_error) == (n, 0, 0)
    assert logger.statistics().writer_cpu_seconds > 0


# -- a disk that does not keep up ----------------------------------------------------------------


class BlockedDisk:
    """Opens real JSONL files whose writes wait until the disk is released."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.writing = threading.Event()

    def open(self, fmt: str, path: Path, first: Chunk) -> Sink:
        sink = open_sink(fmt, path, first)
        assert isinstance(sink, JsonlSink)
        write = sink.write

        def blocked_write(chunk: Chunk, start: int, room: int) -> tuple[int, int, int]:
            self.writing.set()
            self.released.wait(30)
            return write(chunk, start, room)

        sink.write = blocked_write  # type: ignore[method-assign]
        return sink


def test_a_blocked_disk_costs_counted_drops_and_never_blocks_a_request(tmp_path: Path) -> None:
    disk = BlockedDisk()
    logger = PayloadLogger(
        PayloadLogSettings(tmp_path, flush_secs=0.01, queue_requests=20), open_file=disk.open
    )
    logger.start()
    try:
        logger.observe(spec(), 1, request(0), outputs(0))
        assert disk.writing.wait(10)  # the writer is stuck in its first write
        for i in range(1, 200):
            logger.observe(spec(), 1, request(i), outputs(i))  # returns: nothing waits here
        stats = logger.statistics()
        assert stats.queued == 20  # the one being written and 19 waiting
        assert stats.models[0].dropped_queue_full == 180
    finally:
        disk.released.set()
        logger.stop()
    (stats,) = logger.statistics().models
    written = read_ids(tmp_path)
    assert (stats.logged, stats.dropped_queue_full) == (20, 180)
    assert written == [f"r{i}" for i in range(20)]  # the first 20: what came after was refused


def test_records_of_one_layout_share_a_template_and_odd_ones_take_the_general_form() -> None:
    from inferd.monitoring.payload_log import json_batch

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    plain = [Captured("m", 1, str(i), i, {"x": x + i}, (), {"y": x}, {}) for i in range(4)]
    lines: list[bytes | None] = [None] * 4
    json_batch._group_lines(plain, lines, [0, 1, 2, 3])
    assert all(line is not None for line in lines)  # every record filled from the template
    odd = [*plain[:2], Captured("m", 1, "nan", 9, {"x": x * np.nan}, (), {"y": x}, {})]
    lines = [None] * 3
    json_batch._group_lines(odd, lines, [0, 1, 2])
    assert [line is None for line in lines] == [False, False, True]
    assert json.loads(json_lines(odd)[2])["inputs"][0]["binary_data_base64"]
