"""The sequence batcher's slot policy: a deterministic state machine with no clock and no I/O.

A sequence is identified by its correlation id. The policy decides:

* which batch slot a sequence gets when it starts (a slot belongs to one instance, so every
  request of a sequence runs on that instance), and which sequences wait in the backlog while
  every slot is taken;
* which requests form the next batch of an instance: at most one request per sequence, the
  oldest of that sequence, and never while an earlier request of the same sequence is still
  executing (so a sequence's requests run one after another, in arrival order, each seeing the
  state the previous one left);
* when a sequence's slot is freed: after its END request has run, or when it has been idle
  longer than ``max_sequence_idle``; a freed slot goes to the oldest backlogged sequence.

A START for an id whose sequence is still open ends that sequence early and starts a new one,
as Triton does: the old sequence's queued requests still run, in order, and the new START
follows them in the same slot (so it starts from fresh state, and the old sequence's state is
dropped when the START runs). :attr:`SequenceSlots.restarted` counts these conflicts.

Strategies (Triton's): ``direct`` batches the ready slots of an instance (one slot per batch
row, ``max_batch_size`` slots per instance) as soon as the instance is free, or waits up to
``max_queue_delay`` for ``minimum_slot_utilization`` of them to be ready; its batch covers the
slots from 0 up to the highest ready one, an idle slot below that getting a padding row (the
driver sends it with READY false), so that row ``i`` of every batch is slot ``i`` and a model
may keep per-slot data by row; ``oldest`` keeps up
to ``max_candidate_sequences`` sequences per instance and batches their oldest requests like
the dynamic batcher (preferred sizes, ``max_queue_delay``).

Requests are opaque items (``Item``); the driver keeps their payloads. Every method takes the
current time as an argument, so tests drive the policy with plain integers.
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

SequenceKey = Hashable  # an int (uint64 id) or a str id

#: how many ended / released ids are remembered, to explain a late request precisely
REMEMBERED_IDS = 4096


class Refusal(enum.Enum):
    """Why :meth:`SequenceSlots.admit` refused a request."""

    NOT_STARTED = "not_started"  # no START and the id is not a live sequence
    ENDED = "ended"  # the id's sequence has ended (its END request was received)
    RELEASED = "released"  # the id's sequence was released after being idle too long
    BACKLOG_FULL = "backlog_full"  # every slot is taken and the backlog is full


@dataclass(frozen=True, slots=True)
class SlotPolicy:
    strategy: str  # "direct" or "oldest"
    instances: int
    slots_per_instance: int  # direct: max(1, max_batch_size); oldest: candidate sequences
    max_batch_size: int  # rows per batch (>= 1)
    max_sequence_idle_ns: int
    max_queue_delay_ns: int = 0
    minimum_slot_utilization: float = 0.0  # direct only
    preferred_batch_sizes: tuple[int, ...] = ()  # oldest only
    max_backlog_sequences: int = 1024
    max_queued_requests: int = 8192


@dataclass(frozen=True, slots=True)
class Item:
    """One queued request as the policy sees it."""

    id: int  # unique per request, chosen by the driver
    arrival_ns: int
    start: bool
    end: bool


@dataclass(slots=True)
class _Sequence:
    key: SequenceKey
    queue: deque[Item] = field(default_factory=deque)
    instance: int = -1  # -1: in the backlog
    slot: int = -1
    in_flight: bool = False
    end_received: bool = False  # its END request is queued or running: no more requests
    last_ns: int = 0  # arrival of its latest request, or completion of its latest execution


@dataclass(frozen=True, slots=True)
class Batch:
    instance: int
    items: tuple[tuple[SequenceKey, int, Item], ...]  # (sequence, slot, item), slot order
    # direct: the slots below the highest slot of ``items`` that have no item (each gets a
    # padding row, so the batch's row i is slot i); always () for oldest
    padded: tuple[int, ...] = ()

    @property
    def rows(self) -> int:
        """Rows the model sees: the items and the padding."""
        return len(self.items) + len(self.padded)


@dataclass(frozen=True, slots=True)
class Released:
    """A sequence whose slot was freed for being idle (its state is to be dropped)."""

    key: SequenceKey


@dataclass(frozen=True, slots=True)
class Plan:
    batches: tuple[Batch, ...] = ()
    wake_at_ns: int | None = None  # look again at this time even if nothing happens


class SequenceSlots:
    """The slot table of one model version. Not thread-safe: the driver calls it on one loop."""

    def __init__(self, policy: SlotPolicy) -> None:
        if policy.instances < 1 or policy.slots_per_instance < 1 or policy.max_batch_size < 1:
            raise ValueError("a sequence batcher needs at least one instance, slot and row")
        self.policy = policy
        self._live: dict[SequenceKey, _Sequence] = {}
        # sequences waiting for a slot, in the order they started
        self._backlog: OrderedDict[int, _Sequence] = OrderedDict()
        self._backlog_serial = 0
        # free (instance, slot) pairs; lowest slot first, instances interleaved
        self._free: list[tuple[int, int]] = sorted(
            ((i, s) for i in range(policy.instances) for s in range(policy.slots_per_instance)),
            key=lambda pair: (pair[1], pair[0]),
            reverse=True,
        )
        # per instance: the sequences holding its slots, by slot
        self._seated: list[dict[int, _Sequence]] = [{} for _ in range(policy.instances)]
        self._ended: OrderedDict[SequenceKey, None] = OrderedDict()
        self._released: OrderedDict[SequenceKey, None] = OrderedDict()
        self.queued = 0
        self.started = 0
        self.ended = 0
        self.released_idle = 0
        self.restarted = 0  # STARTs that ended a sequence still open (Triton: a conflict)

    # -- views -----------------------------------------------------------------------------

    @property
    def active(self) -> int:
        """Sequences holding a slot."""
        return sum(len(seated) for seated in self._seated)

    @property
    def backlogged(self) -> int:
        """Sequences waiting for a slot."""
        return len(self._backlog)

    def slot_of(self, key: SequenceKey) -> tuple[int, int] | None:
        seq = self._live.get(key)
        if seq is None or seq.instance < 0:
            return None
        return seq.instance, seq.slot

    def is_live(self, key: SequenceKey) -> bool:
        return key in self._live

    def is_open(self, key: SequenceKey) -> bool:
        """A sequence of ``key`` has started and its END has not been received."""
        seq = self._live.get(key)
        return seq is not None and not seq.end_received

    # -- arrivals --------------------------------------------------------------------------

    def admit(self, key: SequenceKey, item: Item) -> Refusal | None:
        """Queue ``item`` for sequence ``key``; None when accepted, else why not."""
        seq = self._live.get(key)
        if not item.start and (seq is None or seq.end_received):
            if key in self._released:
                return Refusal.RELEASED
            if key in self._ended or seq is not None:
                return Refusal.ENDED
            return Refusal.NOT_STARTED
        if self.queued >= self.policy.max_queued_requests:
            return Refusal.BACKLOG_FULL
        if seq is None:
            if not self._free and len(self._backlog) >= self.policy.max_backlog_sequences:
                return Refusal.BACKLOG_FULL
            seq = self._live[key] = _Sequence(key)
            self._ended.pop(key, None)
            self._released.pop(key, None)
            self.started += 1
            if self._free:
                self._seat(seq, *self._free.pop())
            else:
                self._backlog[self._backlog_serial] = seq
                self._backlog_serial += 1
        elif item.start:
            # the id's previous sequence has ended but not finished running, or is still open
            # and ends here (Triton: terminated early): the new one follows it in the same slot
            if not seq.end_received:
                self.restarted += 1
                self.ended += 1
            seq.end_received = False
            self._ended.pop(key, None)
            self.started += 1
        seq.queue.append(item)
        seq.last_ns = max(seq.last_ns, item.arrival_ns)
        if item.end:
            seq.end_received = True
            self._remember(self._ended, key)
        self.queued += 1
        return None

    def _seat(self, seq: _Sequence, instance: int, slot: int) -> None:
        seq.instance, seq.slot = instance, slot
        self._seated[instance][slot] = seq

    @staticmethod
    def _remember(memory: OrderedDict[SequenceKey, None], key: SequenceKey) -> None:
        memory[key] = None
        memory.move_to_end(key)
        while len(memory) > REMEMBERED_IDS:
            memory.popitem(last=False)

    # -- batches ---------------------------------------------------------------------------

    def _ready(self, instance: int) -> list[tuple[int, _Sequence]]:
        """The instance's seated sequences with a request that may run now, by slot."""
        return sorted(
            (slot, seq)
            for slot, seq in self._seated[instance].items()
            if seq.queue and not seq.in_flight
        )

    def plan(self, now_ns: int, free_instances: frozenset[int]) -> Plan:
        """The batches to run now on the free instances (their items leave the queues and their
        sequences are marked in flight), and when to look again."""
        batches: list[Batch] = []
        wakes: list[int] = []
        for instance in sorted(free_instances):
            ready = self._ready(instance)
            if not ready:
                continue
            if self.policy.strategy == "oldest":
                chosen, wake = self._oldest(ready, now_ns)
            else:
                chosen, wake = self._direct(ready, now_ns)
            if wake is not None:
                wakes.append(wake)
            if not chosen:
                continue
            items = []
            for slot, seq in chosen:
                item = seq.queue.popleft()
                seq.in_flight = True
                self.queued -= 1
                items.append((seq.key, slot, item))
            padded: tuple[int, ...] = ()
            if self.policy.strategy == "direct":
                taken = {slot for slot, _ in chosen}
                padded = tuple(s for s in range(max(taken) + 1) if s not in taken)
            batches.append(Batch(instance, tuple(items), padded))
        idle = self._next_idle_deadline()
        if idle is not None:
            wakes.append(idle)
        return Plan(tuple(batches), min(wakes) if wakes else None)

    def _direct(
        self, ready: list[tuple[int, _Sequence]], now_ns: int
    ) -> tuple[list[tuple[int, _Sequence]], int | None]:
        policy = self.policy
        chosen = ready[: policy.max_batch_size]
        if policy.max_queue_delay_ns <= 0 or policy.minimum_slot_utilization <= 0:
            return chosen, None
        if len(chosen) / policy.slots_per_instance >= policy.minimum_slot_utilization:
            return chosen, None
        oldest = min(seq.queue[0].arrival_ns for _, seq in chosen)
        if now_ns - oldest >= policy.max_queue_delay_ns:
            return chosen, None
        return [], oldest + policy.max_queue_delay_ns

    def _oldest(
        self, ready: list[tuple[int, _Sequence]], now_ns: int
    ) -> tuple[list[tuple[int, _Sequence]], int | None]:
        policy = self.policy
        by_age = sorted(ready, key=lambda pair: (pair[1].queue[0].arrival_ns, pair[0]))
        chosen = by_age[: policy.max_batch_size]
        size = len(chosen)
        if size >= policy.max_batch_size or policy.max_queue_delay_ns <= 0:
            return chosen, None
        preferred = [p for p in policy.preferred_batch_sizes if p <= size]
        if preferred:
            return chosen[: max(preferred)], None
        oldest = chosen[0][1].queue[0].arrival_ns
        if now_ns - oldest >= policy.max_queue_delay_ns:
            return chosen, None
        return [], oldest + policy.max_queue_delay_ns

    # -- completions and release -----------------------------------------------------------

    def complete(self, key: SequenceKey, item: Item, now_ns: int) -> None:
        """``item`` of sequence ``key`` has finished executing (successfully or not)."""
        seq = self._live[key]
        seq.in_flight = False
        seq.last_ns = max(seq.last_ns, now_ns)
        if item.end:
            self.ended += 1
            if not seq.queue:  # else a new sequence of the same id follows in this slot
                self._free_slot(seq)

    def _free_slot(self, seq: _Sequence) -> list[Item]:
        """Forget ``seq``; its slot goes to the oldest backlogged sequence. Returns the items it
        still had queued (dropped)."""
        dropped = list(seq.queue)
        self.queued -= len(dropped)
        seq.queue.clear()
        del self._live[seq.key]
        if seq.instance < 0:
            for serial, waiting in self._backlog.items():
                if waiting is seq:
                    del self._backlog[serial]
                    break
            return dropped
        del self._seated[seq.instance][seq.slot]
        if self._backlog:
            _, successor = self._backlog.popitem(last=False)
            self._seat(successor, seq.instance, seq.slot)
        else:
            self._free.append((seq.instance, seq.slot))
            self._free.sort(key=lambda pair: (pair[1], pair[0]), reverse=True)
        return dropped

    def _idle(self) -> Iterator[_Sequence]:
        """Sequences with nothing queued and nothing running (only those can be released)."""
        for seq in self._live.values():
            if not seq.queue and not seq.in_flight:
                yield seq

    def _next_idle_deadline(self) -> int | None:
        deadlines = [seq.last_ns + self.policy.max_sequence_idle_ns for seq in self._idle()]
        return min(deadlines) if deadlines else None

    def release_idle(self, now_ns: int) -> list[Released]:
        """Free the slot of every sequence idle for ``max_sequence_idle`` or longer."""
        limit = self.policy.max_sequence_idle_ns
        stale = [seq for seq in self._idle() if now_ns - seq.last_ns >= limit]
        for seq in stale:
            self._free_slot(seq)
            self._ended.pop(seq.key, None)
            self._remember(self._released, seq.key)
            self.released_idle += 1
        return [Released(seq.key) for seq in stale]

    def drain(self) -> list[Item]:
        """Forget every sequence; return the items still queued (on shutdown)."""
        dropped: list[Item] = []
        for seq in list(self._live.values()):
            dropped += self._free_slot(seq)
        return dropped
