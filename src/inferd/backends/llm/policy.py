"""The generation scheduler's policy: one pure function from the sequences' state to a step plan.

``plan_step(waiting, running, free_blocks, cfg)`` says what the next forward pass does: which
running sequences decode one token, which prompts are prefilled and by how many tokens (chunks),
which running sequences are preempted to free KV blocks, how many blocks each sequence must be
given before the pass, and which sequences can never be served. It never waits, allocates or
reads a clock, so it is tested exhaustively on a simulated runtime
(``tests/unit/test_llm_policy.py``).

What the runtime applies, in this order: free the blocks of ``abort`` (finish those sequences
with an error) and of ``preempt`` (move them back to waiting with ``computed = 0``, their
generated tokens folded into ``prompt_len`` to be recomputed, their arrival kept); allocate
``grow``; run the pass over ``prefill`` chunks and ``decode`` tokens.

Token accounting of one sequence (the runtime must keep it so):

* ``computed < prompt_len``: it is (or will be) prefilling; a chunk of ``n`` tokens needs
  ``blocks_for(computed + n)`` blocks. The chunk that completes the prompt also yields the first
  new token (``generated += 1``).
* ``computed >= prompt_len``: it decodes; the pass writes the KV of its last sampled token, so it
  needs ``blocks_for(computed + 1)`` blocks (one more block when its last block is full).

With prefix caching, a waiting sequence whose prompt head is cached comes with ``computed`` =
the cached tokens and ``blocks = 0``: its admission is planned as if every block of
``computed + chunk`` were new (its ``grow``), and the runtime takes the cached blocks as part of
that grant, so the cost is never underestimated. A running sequence's ``shared_blocks`` (held by
others too) are not counted as freed when it is preempted or aborted.

The rules, in order:

1. Running sequences come first, oldest (``arrival``, then ``seq_id``) first: each gets room for
   one token. When the free blocks cannot cover that, the youngest running sequence is preempted
   (its blocks freed) until the rest fit. If a sequence cannot fit even with every younger one
   gone, it is itself the youngest left and is preempted too — except the oldest, which is never
   preempted: it keeps its blocks (and is aborted if it alone needs more than the whole cache).
   So the oldest running sequence always advances and nothing starves.
2. Decoding sequences take one token each from the step budget before any prefill, so short
   requests keep decoding while a long prompt is prefilled.
3. Sequences already mid-prefill keep their place: oldest first, each takes a chunk of up to
   ``long_prefill_tokens`` (default half the step budget) within the free blocks, so a long
   prompt never holds back the admission of short requests for its whole prefill.
4. Waiting sequences are admitted strictly first come, first served while ``max_running``, the
   step budget and free blocks allow, each with a first chunk of at most the remaining budget.
   The oldest waiting sequence is never overtaken: if its chunk does not fit, nobody younger is
   admitted in its place. Whatever budget the admissions leave goes back to the sequences
   mid-prefill (a lone long prompt still prefills with the whole budget).
5. A sequence whose whole need exceeds the cache (``total_blocks``) or ``max_model_len`` is never
   admitted; it is listed in ``abort`` when it reaches the head of the queue (the runtime
   refuses such requests up front with :func:`check_fits`, so this is a safety net).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inferd.backends.llm.blocks import blocks_for
from inferd.errors import ConfigError, InvalidArgumentError

__all__ = [
    "PolicyConfig",
    "SeqState",
    "StepPlan",
    "blocks_for",
    "check_fits",
    "final_kv_tokens",
    "plan_step",
    "step_tokens",
]


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    max_running: int  # max concurrent sequences in the running batch
    max_step_tokens: int  # token budget of one forward pass (prefill chunks + decodes)
    block_tokens: int  # tokens per KV block
    total_blocks: int  # the KV budget in blocks
    max_model_len: int
    # the most tokens a sequence already mid-prefill takes from a step before waiting sequences
    # are admitted (it takes what they leave afterwards); 0: half of max_step_tokens
    long_prefill_tokens: int = 0

    @property
    def prefill_cap(self) -> int:
        """``long_prefill_tokens`` resolved (0 means half the step budget, at least 1)."""
        return self.long_prefill_tokens or max(1, self.max_step_tokens // 2)

    def __post_init__(self) -> None:
        for name in ("max_running", "max_step_tokens", "block_tokens", "total_blocks"):
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        if self.max_model_len < 2:
            raise ConfigError(f"max_model_len must be at least 2, got {self.max_model_len}")
        if self.max_step_tokens < self.max_running:
            raise ConfigError(
                f"max_step_tokens ({self.max_step_tokens}) must be at least max_running "
                f"({self.max_running}): every running sequence decodes one token per step"
            )
        if not 0 <= self.long_prefill_tokens <= self.max_step_tokens:
            raise ConfigError(
                f"long_prefill_tokens must be between 0 (half the step budget) and "
                f"max_step_tokens ({self.max_step_tokens}), got {self.long_prefill_tokens}"
            )


@dataclass(frozen=True, slots=True)
class SeqState:
    """What the policy sees of one sequence."""

    seq_id: int
    arrival: float  # monotonic seconds; FCFS order (kept across preemptions)
    prompt_len: int  # prompt tokens (plus generated tokens to recompute after a preemption)
    computed: int  # tokens whose KV is in the cache (0 when waiting or preempted)
    generated: int
    max_new_tokens: int
    blocks: int  # KV blocks it holds now
    # of those, blocks other sequences hold too (a shared prompt head): freeing this sequence
    # does not free them
    shared_blocks: int = 0

    def __post_init__(self) -> None:
        if self.prompt_len < 1:
            raise ValueError(f"sequence {self.seq_id}: prompt_len must be at least 1")
        if min(self.computed, self.generated, self.max_new_tokens, self.blocks) < 0:
            raise ValueError(f"sequence {self.seq_id}: negative token or block count in {self}")
        if not 0 <= self.shared_blocks <= self.blocks:
            raise ValueError(f"sequence {self.seq_id}: shared_blocks must be 0..blocks in {self}")

    @property
    def own_blocks(self) -> int:
        """The blocks that freeing this sequence frees (those it holds alone)."""
        return self.blocks - self.shared_blocks


@dataclass(frozen=True, slots=True)
class StepPlan:
    prefill: tuple[tuple[int, int], ...] = ()  # (seq_id, tokens to prefill this step), chunked
    decode: tuple[int, ...] = ()  # seq_ids that advance one token this step
    preempt: tuple[int, ...] = ()  # running seq_ids to evict (free their blocks; recompute later)
    grow: tuple[tuple[int, int], ...] = ()  # (seq_id, blocks to allocate before the step)
    abort: tuple[int, ...] = ()  # seq_ids that can never be served (free their blocks, fail them)
    reason: str = ""  # why the step looks as it does, for logs ("" when nothing is unusual)

    @property
    def tokens(self) -> int:
        """Tokens this step computes (prefill chunks plus one per decode)."""
        return sum(n for _, n in self.prefill) + len(self.decode)


def final_kv_tokens(s: SeqState) -> int:
    """The most KV tokens ``s`` will ever hold (the last sampled token's KV is never written)."""
    known = s.computed + 1 if s.computed >= s.prompt_len else s.prompt_len
    return known + max(0, s.max_new_tokens - s.generated) - 1


def _never_fits(s: SeqState, cfg: PolicyConfig) -> str | None:
    kv = final_kv_tokens(s)
    if blocks_for(kv, cfg.block_tokens) > cfg.total_blocks:
        return (
            f"sequence {s.seq_id} needs {blocks_for(kv, cfg.block_tokens)} KV blocks, "
            f"more than the cache's {cfg.total_blocks}"
        )
    if kv + 1 > cfg.max_model_len:
        return (
            f"sequence {s.seq_id} reaches {kv + 1} tokens, over max_model_len {cfg.max_model_len}"
        )
    return None


def check_fits(prompt_tokens: int, max_new_tokens: int, cfg: PolicyConfig) -> None:
    """Refuse, with a message naming the limit, a request the cache or the model can never hold."""
    total = prompt_tokens + max_new_tokens
    if total > cfg.max_model_len:
        raise InvalidArgumentError(
            f"the prompt ({prompt_tokens} tokens) plus max_tokens ({max_new_tokens}) is "
            f"{total} tokens, over the model's max_model_len of {cfg.max_model_len}"
        )
    need = blocks_for(max(total - 1, 0), cfg.block_tokens)
    if need > cfg.total_blocks:
        capacity = cfg.total_blocks * cfg.block_tokens + 1
        raise InvalidArgumentError(
            f"the prompt ({prompt_tokens} tokens) plus max_tokens ({max_new_tokens}) is "
            f"{total} tokens, more than the KV cache holds ({capacity} tokens)"
        )


def step_tokens(s: SeqState) -> int:
    """Tokens ``s`` would compute in a step without limits (its whole prompt rest, or 1)."""
    return s.prompt_len - s.computed if s.computed < s.prompt_len else 1


def _age(s: SeqState) -> tuple[float, int]:
    return (s.arrival, s.seq_id)


def plan_step(
    waiting: Sequence[SeqState],
    running: Sequence[SeqState],
    free_blocks: int,
    cfg: PolicyConfig,
) -> StepPlan:
    """Plan the next forward pass (see the module docstring for the rules)."""
    _check_inputs(waiting, running, free_blocks, cfg)
    bt = cfg.block_tokens
    free = free_blocks
    budget = cfg.max_step_tokens
    notes: list[str] = []
    abort: list[int] = []
    preempt: list[int] = []
    stalled: list[int] = []

    # 1. room for one token per running sequence, oldest first; evict the youngest when short
    active = sorted(running, key=_age)
    kept: list[SeqState] = []
    need_of: dict[int, int] = {}
    while active and budget > 0:
        s = active.pop(0)
        need = max(0, blocks_for(s.computed + 1, bt) - s.blocks)
        # the oldest is never preempted: does it fit even with every younger one gone?
        if not kept and need > free + sum(o.own_blocks for o in active):
            if blocks_for(s.computed + 1, bt) > cfg.total_blocks or _never_fits(s, cfg):
                abort.append(s.seq_id)
                free += s.own_blocks
                notes.append(f"abort {s.seq_id}: needs more than the whole cache")
            else:  # blocks are held outside the running set; wait for them
                stalled.append(s.seq_id)
                notes.append(f"stall {s.seq_id}: blocks held elsewhere")
            continue
        while need > free and active:
            victim = active.pop()
            preempt.append(victim.seq_id)
            free += victim.own_blocks
        if need > free:
            preempt.append(s.seq_id)  # s is the youngest left and cannot advance
            free += s.own_blocks
            continue
        free -= need
        budget -= 1
        need_of[s.seq_id] = need
        kept.append(s)
    if preempt:
        notes.append(f"preempted {len(preempt)} for KV blocks")
    if active:  # the step budget ran out (more running sequences than max_step_tokens)
        notes.append(f"{len(active)} running sequences wait for step budget")

    # 2. decoders take their token (reserved above) before any prefill
    decode = [s.seq_id for s in kept if s.computed >= s.prompt_len]
    prefilling = [s for s in kept if s.computed < s.prompt_len]
    held = {s.seq_id: s.blocks + need_of[s.seq_id] for s in kept}
    chunk = {s.seq_id: 1 for s in prefilling}  # their first token is reserved above

    def extend(s: SeqState, limit: int) -> None:
        """Grow the chunk of ``s`` towards ``limit`` tokens within the budget and free blocks."""
        nonlocal free, budget
        current = chunk[s.seq_id]
        room = (held[s.seq_id] + free) * bt - s.computed
        new = max(current, min(s.prompt_len - s.computed, current + budget, limit, room))
        blocks = max(held[s.seq_id], blocks_for(s.computed + new, bt))
        free -= blocks - held[s.seq_id]
        budget -= new - current
        held[s.seq_id] = blocks
        chunk[s.seq_id] = new

    # 3. sequences mid-prefill keep their place, but leave room for admissions (chunk cap)
    for s in prefilling:
        extend(s, cfg.prefill_cap)

    # 4./5. admit waiting sequences first come, first served
    slots = cfg.max_running - len(kept) - len(stalled)
    for w in sorted(waiting, key=_age):
        if slots <= 0 or budget <= 0:
            break
        why = _never_fits(w, cfg)
        if why is not None:
            abort.append(w.seq_id)
            notes.append(f"abort {why}")
            continue
        want = min(step_tokens(w), budget)
        blocks = max(w.blocks, blocks_for(w.computed + want, bt))
        if blocks - w.blocks > free:
            # the head of the queue waits for blocks; nobody overtakes it
            notes.append(f"head {w.seq_id} waits for {blocks - w.blocks} KV blocks ({free} free)")
            break
        free -= blocks - w.blocks
        budget -= want
        slots -= 1
        held[w.seq_id] = blocks
        chunk[w.seq_id] = want
        prefilling.append(w)

    # 3b. what the admissions left goes to the sequences mid-prefill, oldest first
    for s in prefilling:
        extend(s, cfg.max_step_tokens)

    everyone = {s.seq_id: s for s in (*kept, *prefilling)}
    grow = tuple(
        (sid, n) for sid, blocks in held.items() if (n := blocks - everyone[sid].blocks) > 0
    )
    return StepPlan(
        prefill=tuple((s.seq_id, chunk[s.seq_id]) for s in prefilling),
        decode=tuple(decode),
        preempt=tuple(preempt),
        grow=grow,
        abort=tuple(abort),
        reason="; ".join(notes),
    )


def _check_inputs(
    waiting: Sequence[SeqState], running: Sequence[SeqState], free_blocks: int, cfg: PolicyConfig
) -> None:
    """Refuse states no correct runtime produces, rather than plan on them."""
    if free_blocks < 0:
        raise ValueError(f"free_blocks must not be negative, got {free_blocks}")
    ids = {s.seq_id for s in waiting} | {s.seq_id for s in running}
    if len(ids) != len(waiting) + len(running):
        raise ValueError("a seq_id appears twice among the waiting and running sequences")
    for s in running:
        if s.blocks < blocks_for(s.computed, cfg.block_tokens):
            raise ValueError(
                f"sequence {s.seq_id} holds {s.blocks} KV blocks for {s.computed} computed tokens"
            )
