"""Admission control: per-priority queues with size bounds and queue timeouts.

Separate from batching on purpose: this module decides whether a request may wait at all and
for how long; :mod:`inferd.scheduling.policy` decides which waiting requests run together.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from inferd.core.inference import InferRequest
from inferd.core.model_spec import DynamicBatchingSpec, QueuePolicySpec
from inferd.errors import InvalidArgumentError, OverloadedError
from inferd.scheduling.policy import PendingView


@dataclass(slots=True, eq=False)
class Entry:
    """One waiting request."""

    request: InferRequest
    waiter: asyncio.Future[Any]
    view: PendingView
    level: int
    delayed: bool = False  # DELAY action: deadline passed, the request now goes last


@dataclass(slots=True)
class _Level:
    policy: QueuePolicySpec
    items: deque[Entry] = field(default_factory=deque)


def request_priority(request: InferRequest, levels: int, default_level: int) -> int:
    """The request's priority level: 1 is highest; 0 or absent means the model's default."""
    value = request.parameters.get("priority", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"request parameter 'priority' must be an unsigned integer, got {value!r}"
        )
    if levels <= 0 or value == 0:
        return default_level if levels > 0 else 1
    if value > levels:
        raise InvalidArgumentError(
            f"request priority {value} is outside the model's priority levels 1..{levels}"
        )
    return value


def request_timeout_us(request: InferRequest) -> int:
    value = request.parameters.get("timeout", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"request parameter 'timeout' must be microseconds >= 0, got {value!r}"
        )
    return value


class AdmissionQueues:
    """The waiting requests of one model version, by priority level (1 = served first)."""

    def __init__(self, spec: DynamicBatchingSpec) -> None:
        self._levels_count = spec.priority_levels
        self._default_level = spec.default_priority_level or 1
        count = max(1, spec.priority_levels)
        self._levels: dict[int, _Level] = {
            level: _Level(spec.priority_queue_policy.get(level, spec.default_queue_policy))
            for level in range(1, count + 1)
        }
        self._level_list = [self._levels[level] for level in sorted(self._levels)]  # served first
        self._delayed: deque[Entry] = deque()
        self._size = 0
        self._timed = 0  # waiting entries with a queue timeout

    def __len__(self) -> int:
        return self._size

    def admit(
        self,
        request: InferRequest,
        waiter: asyncio.Future[Any],
        *,
        rows: int,
        shape_key: Hashable,
        now_ns: int,
    ) -> Entry:
        """Queue a request or refuse it at once (queue full, bad priority or timeout)."""
        level = request_priority(request, self._levels_count, self._default_level)
        queue = self._levels[level]
        policy = queue.policy
        if policy.max_queue_size and len(queue.items) >= policy.max_queue_size:
            raise OverloadedError(
                f"Exceeds maximum queue size: model '{request.model_name}' already has "
                f"{len(queue.items)} request(s) waiting at priority {level} "
                f"(max_queue_size {policy.max_queue_size})"
            )
        timeout_us = policy.default_timeout_us
        asked = request_timeout_us(request)
        if asked and (policy.allow_timeout_override or not timeout_us or asked < timeout_us):
            timeout_us = asked
        deadline = now_ns + timeout_us * 1000 if timeout_us else None
        view = PendingView(
            rows=rows,
            shape_key=shape_key,
            arrival_ns=now_ns,
            deadline_ns=deadline,
            reject_on_timeout=policy.timeout_action != "DELAY",
        )
        entry = Entry(request, waiter, view, level)
        queue.items.append(entry)
        self._size += 1
        if deadline is not None:
            self._timed += 1
        return entry

    @property
    def has_deadlines(self) -> bool:
        """True while some waiting request has a queue timeout (REJECT or DELAY)."""
        return self._timed > 0

    def ordered(self, now_ns: int, limit: int | None = None) -> list[Entry]:
        """Entries in service order (the first ``limit`` of them); DELAY entries past their
        deadline move behind all others."""
        if self._timed:
            self._demote_delayed(now_ns)
        out: list[Entry] = []
        for level in self._level_list:
            if limit is None:
                out.extend(level.items)
            else:
                out.extend(islice(level.items, limit - len(out)))
                if len(out) >= limit:
                    return out
        out.extend(self._delayed if limit is None else islice(self._delayed, limit - len(out)))
        return out

    def _demote_delayed(self, now_ns: int) -> None:
        for level in self._level_list:
            if any(_delay_passed(e, now_ns) for e in level.items):
                keep: deque[Entry] = deque()
                for e in level.items:
                    if _delay_passed(e, now_ns):
                        e.delayed = True
                        self._delayed.append(e)
                    else:
                        keep.append(e)
                level.items = keep

    def remove(self, entries: Iterator[Entry] | list[Entry]) -> None:
        """Take entries out of the queues (entries no longer queued are ignored). Removing the
        heads of the queues, as a dispatched batch does, costs O(removed)."""
        gone = {id(e): e for e in entries}
        if not gone:
            return
        left = len(gone)
        for items in (*(level.items for level in self._level_list), self._delayed):
            while items and left and id(items[0]) in gone:
                self._forget(items.popleft())
                left -= 1
        if not left:
            return
        for level in self._level_list:  # not at the heads: rebuild what holds any of them
            if any(id(e) in gone for e in level.items):
                level.items = self._without(level.items, gone)
        if any(id(e) in gone for e in self._delayed):
            self._delayed = self._without(self._delayed, gone)

    def _without(self, items: deque[Entry], gone: dict[int, Entry]) -> deque[Entry]:
        keep: deque[Entry] = deque()
        for e in items:
            if id(e) in gone:
                self._forget(e)
            else:
                keep.append(e)
        return keep

    def _forget(self, entry: Entry) -> None:
        self._size -= 1
        if entry.view.deadline_ns is not None:
            self._timed -= 1

    def drain_all(self) -> list[Entry]:
        out = self.ordered(0)
        for level in self._levels.values():
            level.items = deque()
        self._delayed = deque()
        self._size = 0
        self._timed = 0
        return out


def _delay_passed(entry: Entry, now_ns: int) -> bool:
    view = entry.view
    deadline = view.deadline_ns
    return not view.reject_on_timeout and deadline is not None and deadline <= now_ns
