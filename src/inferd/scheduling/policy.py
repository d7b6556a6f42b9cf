"""The dynamic batching policy, as a pure function of the queue, the time and the config.

``decide`` looks at the pending requests (already in service order: priority level first, then
arrival), the current time and how many instances are free, and says which requests form the
next batch, which have outlived their queue timeout, and when to look again. It never waits and
never touches a clock, so it can be tested exhaustively.

The rules follow Triton's dynamic batcher:

* a batch holds requests whose non-batch shapes agree, up to ``max_batch_size`` rows;
* a batch is sent at once when it is full or the next request cannot join it (shape or size);
* otherwise, if some prefix of the queue adds up to a preferred size, the largest such prefix
  is sent at once;
* otherwise the batcher waits for more requests, but never longer than
  ``max_queue_delay`` after the oldest request arrived;
* nothing is sent while every instance is busy: batches keep growing instead;
* a request whose queue timeout has passed is dropped (REJECT) before it enters a batch.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


class CloseReason(enum.Enum):
    """Why a batch was sent when it was (counted, so users can see why batches stay small)."""

    FULL = "full"  # reached max_batch_size
    PREFERRED = "preferred"  # reached a preferred batch size
    SHAPE_MISMATCH = "shape_mismatch"  # the next request has other non-batch dims
    NO_ROOM = "no_room"  # the next request's rows would overflow max_batch_size
    DELAY_EXPIRED = "delay_expired"  # the oldest request waited max_queue_delay
    NO_DELAY = "no_delay"  # max_queue_delay is 0: send what is there


@dataclass(frozen=True, slots=True)
class PendingView:
    """What the policy needs to know about one queued request."""

    rows: int  # the request's batch size
    shape_key: Hashable  # requests batch together only if their keys are equal
    arrival_ns: int
    deadline_ns: int | None = None  # queue timeout (absolute); None = no timeout
    reject_on_timeout: bool = True  # False: DELAY, the request stays but loses its priority


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...]  # ascending; empty = only max_batch_size
    max_queue_delay_ns: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    take: tuple[int, ...] = ()  # indices of the next batch, in service order
    expired: tuple[int, ...] = ()  # indices whose queue timeout passed (to be rejected)
    wake_at_ns: int | None = None  # look again at this time even if nothing happens
    reason: CloseReason | None = None


def decide(
    pending: Sequence[PendingView], now_ns: int, policy: BatchPolicy, free_instances: int
) -> Decision:
    expired = tuple(
        i
        for i, p in enumerate(pending)
        if p.reject_on_timeout and p.deadline_ns is not None and p.deadline_ns <= now_ns
    )
    dropped = set(expired)
    live = [i for i in range(len(pending)) if i not in dropped]
    deadlines = [
        d
        for i in live
        if pending[i].reject_on_timeout and (d := pending[i].deadline_ns) is not None
    ]
    next_deadline = min(deadlines) if deadlines else None
    if not live or free_instances <= 0:
        # nothing to send, or nowhere to send it: an instance finishing wakes the driver
        return Decision(expired=expired, wake_at_ns=next_deadline)

    take: list[int] = []
    rows = 0
    sizes: list[int] = []  # cumulative rows after each taken request
    head = pending[live[0]]
    reason: CloseReason | None = None
    for i in live:
        p = pending[i]
        if take and p.shape_key != head.shape_key:
            reason = CloseReason.SHAPE_MISMATCH
            break
        if take and rows + p.rows > policy.max_batch_size:
            reason = CloseReason.NO_ROOM
            break
        take.append(i)
        rows += p.rows
        sizes.append(rows)
        if rows >= policy.max_batch_size:
            reason = CloseReason.FULL
            break

    if reason is None:
        # every live request fits and the batch is not full: it could still grow
        best = max(
            (n for n, size in enumerate(sizes) if size in policy.preferred_batch_sizes),
            default=None,
        )
        if best is not None:
            return Decision(
                take=tuple(take[: best + 1]), expired=expired, reason=CloseReason.PREFERRED
            )
        if policy.max_queue_delay_ns <= 0:
            reason = CloseReason.NO_DELAY
        elif now_ns - head.arrival_ns >= policy.max_queue_delay_ns:
            reason = CloseReason.DELAY_EXPIRED
        else:
            wake = head.arrival_ns + policy.max_queue_delay_ns
            if next_deadline is not None:
                wake = min(wake, next_deadline)
            return Decision(expired=expired, wake_at_ns=wake)
    return Decision(take=tuple(take), expired=expired, reason=reason)
