"""What the payload log's encoder costs on its own, per record: JSONL and Parquet, a chunk of
records of ``simple``'s layout (two INT32 [1, 16] inputs, two outputs) at a time, and a logger
driven alone on an event loop (observing, encoding, handing off), with no server around it.

    .venv/bin/python bench/payload_encode.py [--records 128] [--repeats 5]

The chunk figures are the best of ``--repeats`` timings (an idle core: what the code costs
without a loaded server's cache misses; for Parquet, the table built for the chunk alone).
"Contended" is the wall time of the event loop's part while another Python thread keeps
running: a call that lets go of the interpreter lock (every pyarrow call does) waits for that
thread before going on, as the loaded server's loop waits for its other threads. For Parquet
it is timed twice: as the logger does it (chunks left as columns, a table per row group) and
with a table built for every chunk. The logger figures are the event loop's CPU time per
observed request. ``bench/payload_log.py`` measures the same code inside a loaded server.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.monitoring.payload_log import PayloadLogger, PayloadLogSettings
from inferd.monitoring.payload_log.encode import encode
from inferd.monitoring.payload_log.parquet import ROW_GROUP_ROWS
from inferd.monitoring.payload_log.records import Captured
from inferd.monitoring.payload_log.row_groups import RowGroups

CONFIG = (
    'name: "simple" backend: "onnxruntime" max_batch_size: 8 '
    'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, '
    '{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ] '
    'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, '
    '{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]'
)


def _tensors(i: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    # inputs as a gRPC request gives them: views of the request's bytes
    a = np.frombuffer((np.arange(16, dtype=np.int32) + i).tobytes(), np.int32).reshape(1, 16)
    b = np.frombuffer(np.ones(16, np.int32).tobytes(), np.int32).reshape(1, 16)
    return {"INPUT0": a, "INPUT1": b}, {"OUTPUT0": a + b, "OUTPUT1": a - b}


def _items(records: int) -> list[tuple[Captured, int]]:
    """A chunk of ``records`` captured requests of ``simple``'s layout, with their bytes."""
    items = []
    for i in range(records):
        inputs, outputs = _tensors(i)
        captured = Captured("simple", 1, str(i), time.time_ns(), inputs, (), outputs, {})
        items.append((captured, 256))
    return items


def _chunk_us(fmt: str, records: int, repeats: int) -> float:
    items = _items(records)
    encode(fmt, items)
    rounds = max(10, 20_000 // records)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(rounds):
            encode(fmt, items)
        best = min(best, (time.perf_counter() - started) / rounds / records)
    return best * 1e6


def _loop_part(fmt: str, items: list[tuple[Captured, int]], groups: RowGroups | None) -> None:
    """What the event loop does with a chunk: encode it; for Parquet, leave it as columns
    and build a table once a row group's worth has gathered (as the logger does), or, without
    ``groups``, build a table for the chunk."""
    chunks, _ = encode(fmt, items, build=groups is None)
    if fmt == "parquet" and groups is not None:
        for chunk in chunks:
            groups.add(chunk, 0)


def _contended_us(fmt: str, records: int, repeats: int, *, per_chunk: bool = False) -> float:
    """Wall time per record of the event loop's part of the log's work while another Python
    thread runs: a call that lets go of the interpreter lock waits for that thread before it
    goes on. ``per_chunk``: a Parquet table built for every chunk."""
    items = _items(records)
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    other = threading.Thread(target=busy, daemon=True)
    other.start()
    rounds = 2 * ROW_GROUP_ROWS // records  # two row groups' worth
    try:
        best = float("inf")
        for _ in range(repeats):
            groups = None if per_chunk else RowGroups(ROW_GROUP_ROWS)
            started = time.perf_counter()
            for _ in range(rounds):
                _loop_part(fmt, items, groups)
            best = min(best, (time.perf_counter() - started) / rounds / records)
    finally:
        stop.set()
        other.join()
    return best * 1e6


async def _logger_us(fmt: str, requests: int) -> tuple[float, float]:
    spec = spec_from_proto(parse_pbtxt(CONFIG, "bench"))
    with tempfile.TemporaryDirectory() as logs:
        logger = PayloadLogger(PayloadLogSettings(Path(logs), format=fmt))
        logger.start()
        observing = 0
        for i in range(requests):
            inputs, outputs = _tensors(i)
            request = InferRequest(model_name="simple", inputs=inputs, id=str(i))
            started = time.thread_time_ns()
            logger.observe(spec, 1, request, outputs)
            observing += time.thread_time_ns() - started
            if i % 32 == 0:
                await asyncio.sleep(0)  # encoding callbacks run here, as between requests
        await asyncio.to_thread(logger.stop)
        encoding = logger.statistics().encode_cpu_seconds
    return observing / requests / 1e3, encoding / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=128, help="records in a chunk")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=int, default=40_000, help="observed by the logger")
    args = parser.parse_args()
    print(
        f"{'format':8s} {'encode a chunk':>16s} {'contended':>11s} {'per chunk':>11s} "
        f"{'observe':>9s} {'encode':>8s}  (µs per record)"
    )
    for fmt in ("jsonl", "parquet"):
        chunk = _chunk_us(fmt, args.records, args.repeats)
        contended = _contended_us(fmt, args.records, args.repeats)
        per_chunk = (
            _contended_us(fmt, args.records, args.repeats, per_chunk=True)
            if fmt == "parquet"
            else contended
        )
        observing, encoding = asyncio.run(_logger_us(fmt, args.requests))
        print(
            f"{fmt:8s} {chunk:16.2f} {contended:11.2f} {per_chunk:11.2f} "
            f"{observing:9.2f} {encoding:8.2f}"
        )


if __name__ == "__main__":
    main()
