"""Per model version statistics in Triton's shape, updated on the event loop thread only.

Components update plain counters on the hot path; the statistics endpoints and the Prometheus
collectors read :meth:`ModelStats.snapshot` when asked, so no metric call sits on the hot path.
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from collections.abc import Callable

from inferd.core.statistics import (
    BATCH_BUCKETS,
    FAILURE_REASONS,
    LATENCY_BUCKETS_US,
    BatchStat,
    Duration,
    Histogram,
    ResponseStat,
    StatsSnapshot,
)
from inferd.core.streaming import ResponseTiming


class ModelStats:
    """Counters of one model version. Single-threaded: call only from the event loop."""

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = str(version)
        self.last_inference_ms = 0
        self.inference_count = 0
        self.execution_count = 0
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.cache_hit = Duration()
        self.cache_miss = Duration()
        self.response_cache = False  # set at load: whether answers may come from the cache
        self.batch_stats: dict[int, BatchStat] = {}
        self.response_stats: dict[int, ResponseStat] = {}  # decoupled: by response index
        self.failures: Counter[str] = Counter()
        self.rejections: Counter[str] = Counter()
        self.close_reasons: Counter[str] = Counter()
        self.latency_us = Histogram.with_bounds(LATENCY_BUCKETS_US)
        self.batch_rows = Histogram.with_bounds(BATCH_BUCKETS)
        # the scheduler's bound methods, held weakly: the statistics outlive an unloaded
        # version (they are kept across its loads), its scheduler and instances must not
        self._pending: weakref.WeakMethod[Callable[[], int]] | None = None
        self._sequences: weakref.WeakMethod[Callable[[], dict[str, int]]] | None = None

    def watch(
        self,
        pending: Callable[[], int],
        sequences: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        """Read the requests not yet executing (and, for sequence models, the sequences
        active, backlogged, started, ended and released when idle) from the scheduler's bound
        methods while it lives."""
        self._pending = weakref.WeakMethod(pending)
        self._sequences = None if sequences is None else weakref.WeakMethod(sequences)

    def pending(self) -> int:
        method = None if self._pending is None else self._pending()
        return 0 if method is None else method()

    def sequences(self) -> dict[str, int]:
        method = None if self._sequences is None else self._sequences()
        return {} if method is None else method()

    def record_execution(
        self,
        rows: int,
        input_ns: int,
        infer_ns: int,
        output_ns: int,
        inferences: int | None = None,
    ) -> None:
        """One execution of ``rows`` rows, of which ``inferences`` (default: all) are requests'
        rows: a sequence batch's padding rows count in the batch size, not as inferences."""
        self.execution_count += 1
        self.inference_count += rows if inferences is None else inferences
        stat = self.batch_stats.get(rows)
        if stat is None:
            stat = self.batch_stats[rows] = BatchStat()
        stat.compute_input.add(input_ns)
        stat.compute_infer.add(infer_ns)
        stat.compute_output.add(output_ns)
        self.batch_rows.observe(rows)
        self.last_inference_ms = time.time_ns() // 1_000_000  # a reported timestamp, not a timer

    def record_success(
        self, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        self.success.add(total_ns)
        self.queue.add(queue_ns)
        self.compute_input.add(input_ns)
        self.compute_infer.add(infer_ns)
        self.compute_output.add(output_ns)
        self.latency_us.observe(total_ns / 1000)

    def record_cache_hit(self, total_ns: int, queue_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache: a success with a queue time (until the
        lookup began) and a cache hit, and no compute phase, execution or inference count."""
        self.success.add(total_ns)
        self.queue.add(queue_ns)
        self.cache_hit.add(lookup_ns)
        self.latency_us.observe(total_ns / 1000)

    def record_cache_miss(self, lookup_and_insert_ns: int) -> None:
        """A successful request that missed: its lookup and insertion also count in its
        request time."""
        self.success.ns += lookup_and_insert_ns
        self.cache_miss.add(lookup_and_insert_ns)

    def record_failure(self, total_ns: int, reason: str) -> None:
        self.fail.add(total_ns)
        self.failures[reason] += 1

    def record_rejection(self, reason: str) -> None:
        self.rejections[reason] += 1
        self.fail.add(0)
        self.failures["REJECTED"] += 1

    def record_response(self, timing: ResponseTiming) -> None:
        """One response of a decoupled model's request, counted at its index as Triton's
        core counts it: a success or a failure takes its infer and output times (a failure
        its output time only when it had one), the final flag alone its infer time, a
        cancellation the time the model took to end the request."""
        stat = self.response_stats.get(timing.index)
        if stat is None:
            stat = self.response_stats[timing.index] = ResponseStat()
        infer, output = timing.infer_ns, timing.output_ns
        kind = timing.kind
        if kind == "cancel":
            stat.cancel.add(infer)
            return
        stat.compute_infer.add(infer)
        if kind == "success":
            stat.compute_output.add(output)
            stat.success.add(infer + output)
        elif kind == "fail":
            if output:
                stat.compute_output.add(output)
            stat.fail.add(infer + output)
        else:
            stat.empty_response.add(infer)

    def snapshot(self) -> StatsSnapshot:
        def d(x: Duration) -> Duration:
            return Duration(x.count, x.ns)

        return StatsSnapshot(
            name=self.name,
            version=self.version,
            last_inference_ms=self.last_inference_ms,
            inference_count=self.inference_count,
            execution_count=self.execution_count,
            success=d(self.success),
            fail=d(self.fail),
            queue=d(self.queue),
            compute_input=d(self.compute_input),
            compute_infer=d(self.compute_infer),
            compute_output=d(self.compute_output),
            cache_hit=d(self.cache_hit),
            cache_miss=d(self.cache_miss),
            batch_stats={
                k: BatchStat(d(v.compute_input), d(v.compute_infer), d(v.compute_output))
                for k, v in sorted(self.batch_stats.items())
            },
            failures={r: self.failures.get(r, 0) for r in FAILURE_REASONS},
            rejections=dict(self.rejections),
            batch_close_reasons=dict(self.close_reasons),
            pending=self.pending(),
            sequences=self.sequences(),
            latency_us=self.latency_us.copy(),
            batch_rows=self.batch_rows.copy(),
            response_cache=self.response_cache,
            response_stats={k: v.copy() for k, v in sorted(self.response_stats.items())},
        )
