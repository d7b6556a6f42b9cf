"""Instance pools: one worker thread per model instance.

Native runtimes release the GIL while they compute, so each instance runs on its own thread and
several instances compute in parallel. Work reaches the threads through one shared queue, so a
batch goes to whichever instance is free first; results come back to the event loop with a single
``call_soon_threadsafe`` per batch.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inferd.backends.base import ModelInstance, Result
from inferd.core.inference import InferRequest
from inferd.errors import InferdError, InternalError

_log = logging.getLogger("inferd.scheduling")

Waiter = asyncio.Future[Any]


@dataclass(slots=True)
class WorkItem:
    requests: list[InferRequest]
    waiters: list[Waiter]
    loop: asyncio.AbstractEventLoop


def _deliver(waiters: Sequence[Waiter], results: Sequence[Result | BaseException]) -> None:
    for waiter, result in zip(waiters, results, strict=True):
        if waiter.done():  # the client went away meanwhile
            continue
        if isinstance(result, BaseException):
            waiter.set_exception(result)
        else:
            waiter.set_result(result)


class InstancePool:
    """Owns the instance threads of one model version."""

    def __init__(self, name: str, instances: Sequence[ModelInstance]) -> None:
        if not instances:
            raise InternalError(f"model '{name}' has no instances")
        self._name = name
        self._instances = list(instances)
        self._queue: queue.SimpleQueue[WorkItem | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, args=(inst,), name=f"inferd-{name}-{i}", daemon=True)
            for i, inst in enumerate(self._instances)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def size(self) -> int:
        return len(self._instances)

    def put(self, item: WorkItem) -> None:
        self._queue.put(item)

    def _run(self, instance: ModelInstance) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            live = [i for i, w in enumerate(item.waiters) if not w.done()]
            if not live:
                continue  # every client of this batch has gone: skip the work
            if len(live) != len(item.waiters):
                requests = [item.requests[i] for i in live]
                waiters = [item.waiters[i] for i in live]
            else:
                requests, waiters = item.requests, item.waiters
            results: list[Result | BaseException]
            try:
                results = list(instance.execute(requests))
                if len(results) != len(requests):
                    raise InternalError(
                        f"model '{self._name}' returned {len(results)} results "
                        f"for {len(requests)} requests"
                    )
            except InferdError as exc:
                results = [exc] * len(requests)
            except Exception:
                _log.exception("model '%s' failed while executing a batch", self._name)
                results = [InternalError(f"model '{self._name}' failed while executing")] * len(
                    requests
                )
            try:
                item.loop.call_soon_threadsafe(_deliver, waiters, results)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the threads after the queued work and close the instances."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout_s)
        for instance in self._instances:
            try:
                instance.close()
            except Exception:
                _log.exception("closing an instance of model '%s' failed", self._name)
