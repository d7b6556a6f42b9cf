"""Properties of the generation scheduler's pure step policy, on a simulated runtime.

``simulate`` plays the runtime: each step it snapshots the sequences, asks ``plan_step`` for a
plan, checks the plan against the rules, applies it to a real ``BlockAllocator`` (which refuses
any over-commitment) and advances a simulated clock of one tick per forward pass.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.backends.llm.blocks import BlockAllocator, blocks_for
from inferd.backends.llm.policy import (
    PolicyConfig,
    SeqState,
    StepPlan,
    check_fits,
    plan_step,
)
from inferd.errors import ConfigError, InvalidArgumentError


@dataclass
class _Seq:
    seq_id: int
    arrival: int
    prompt: int
    max_new: int
    prompt_len: int
    computed: int = 0
    generated: int = 0
    blocks: list[int] = field(default_factory=list)
    first_token: int | None = None

    @property
    def age(self) -> tuple[int, int]:
        return (self.arrival, self.seq_id)

    def state(self) -> SeqState:
        return SeqState(
            seq_id=self.seq_id,
            arrival=float(self.arrival),
            prompt_len=self.prompt_len,
            computed=self.computed,
            generated=self.generated,
            max_new_tokens=self.max_new,
            blocks=len(self.blocks),
        )


@dataclass
class _Result:
    outcome: dict[int, str] = field(default_factory=dict)  # done | cancelled | aborted
    first_token: dict[int, int] = field(default_factory=dict)  # step that produced it
    finished: dict[int, int] = field(default_factory=dict)  # step after which it ended
    preemptions: int = 0
    skipped_decodes: int = 0  # running, decoding sequences left out of a step
    steps: int = 0
    plans: list[StepPlan] = field(default_factory=list)


def _never_fits(q: _Seq, cfg: PolicyConfig) -> bool:
    total = q.prompt + q.max_new
    return total > cfg.max_model_len or blocks_for(total - 1, cfg.block_tokens) > cfg.total_blocks


def simulate(
    cfg: PolicyConfig,
    workload: list[tuple[int, int, int]],  # (arrival step, prompt tokens, max new tokens)
    cancel_at: dict[int, int] | None = None,  # seq_id -> step at which the client cancels
) -> _Result:
    cancel_at = cancel_at or {}
    alloc = BlockAllocator(cfg.total_blocks)
    seqs = [_Seq(i, a, p, m, p) for i, (a, p, m) in enumerate(workload)]
    upcoming = sorted(seqs, key=lambda q: q.age)
    waiting: list[_Seq] = []
    running: list[_Seq] = []
    res = _Result()
    # a liveness bound: each step the oldest unfinished sequence advances a token
    max_steps = sum(p + m + 1 for _, p, m in workload) + max((a for a, _, _ in workload), default=0)
    step = 0

    def end(q: _Seq, how: str) -> None:
        assert q.seq_id not in res.outcome, f"sequence {q.seq_id} ended twice"
        alloc.free(q.blocks)
        q.blocks = []
        res.outcome[q.seq_id] = how
        res.finished[q.seq_id] = step + 1

    while upcoming or waiting or running:
        assert step <= max_steps + 1, "the simulation did not converge (a sequence starves)"
        while upcoming and upcoming[0].arrival <= step:
            waiting.append(upcoming.pop(0))
        for q in [*waiting, *running]:
            if cancel_at.get(q.seq_id) == step:
                (waiting if q in waiting else running).remove(q)
                end(q, "cancelled")
        if not waiting and not running:
            step += 1
            continue
        free_before = alloc.free_count
        plan = plan_step(
            [q.state() for q in waiting], [q.state() for q in running], free_before, cfg
        )
        res.plans.append(plan)
        _check_plan(plan, waiting, running, free_before, cfg)

        by_id = {q.seq_id: q for q in [*waiting, *running]}
        for sid in plan.abort:
            q = by_id[sid]
            (waiting if q in waiting else running).remove(q)
            end(q, "aborted")
        for sid in plan.preempt:
            q = by_id[sid]
            running.remove(q)
            alloc.free(q.blocks)
            q.blocks, q.computed, q.prompt_len = [], 0, q.prompt + q.generated
            waiting.append(q)
            res.preemptions += 1
        for sid, n in plan.grow:
            by_id[sid].blocks += alloc.allocate(n)  # raises if the plan over-commits
        work = {sid: n for sid, n in plan.prefill} | {sid: 1 for sid in plan.decode}
        for sid in work:
            q = by_id[sid]
            if q in waiting:
                waiting.remove(q)
                running.append(q)
        assert len(running) <= cfg.max_running
        assert alloc.used_count == sum(len(q.blocks) for q in running) <= cfg.total_blocks
        assert all(not q.blocks for q in waiting)
        res.skipped_decodes += sum(
            1 for q in running if q.computed >= q.prompt_len and q.seq_id not in work
        )

        for sid, n in work.items():  # the forward pass
            q = by_id[sid]
            assert blocks_for(q.computed + n, cfg.block_tokens) <= len(q.blocks)
            q.computed += n
            if q.computed >= q.prompt_len:  # the prompt's last chunk or a decode samples a token
                q.generated += 1
                res.first_token.setdefault(sid, step)
        for q in list(running):
            if q.generated >= q.max_new:
                running.remove(q)
                end(q, "done")
        step += 1
    res.steps = step
    return res


def _check_plan(
    plan: StepPlan, waiting: list[_Seq], running: list[_Seq], free: int, cfg: PolicyConfig
) -> None:
    by_id = {q.seq_id: q for q in [*waiting, *running]}
    run_ids = {q.seq_id for q in running}
    wait_ids = {q.seq_id for q in waiting}
    prefill_ids = [sid for sid, _ in plan.prefill]
    roles = [*prefill_ids, *plan.decode, *plan.preempt, *plan.abort]
    assert len(roles) == len(set(roles)), f"a sequence has two roles: {plan}"
    assert set(plan.preempt) <= run_ids
    assert all(
        sid in run_ids and by_id[sid].computed >= by_id[sid].prompt_len for sid in plan.decode
    )
    for sid, n in plan.prefill:
        q = by_id[sid]
        assert 1 <= n <= q.prompt_len - q.computed
    assert plan.tokens <= cfg.max_step_tokens
    grown = [sid for sid, _ in plan.grow]
    assert len(grown) == len(set(grown))
    assert set(grown) <= {*prefill_ids, *plan.decode}
    assert all(n > 0 for _, n in plan.grow)
    freed = sum(len(by_id[sid].blocks) for sid in (*plan.preempt, *plan.abort))
    assert sum(n for _, n in plan.grow) <= free + freed

    # aborted: exactly the sequences that can never fit
    assert all(_never_fits(by_id[sid], cfg) for sid in plan.abort)
    # preemption takes the youngest running sequences
    survivors = [q for q in running if q.seq_id not in {*plan.preempt, *plan.abort}]
    for sid in plan.preempt:
        assert all(s.age < by_id[sid].age for s in survivors), "preempted an older sequence"
    # admission is first come, first served: a prefix of the servable queue
    queue = sorted((q for q in waiting if q.seq_id not in plan.abort), key=lambda q: q.age)
    admitted = [sid for sid in prefill_ids if sid in wait_ids]
    assert admitted == [q.seq_id for q in queue[: len(admitted)]], "a younger one overtook"
    # the next in line waits only when a slot, the budget or the blocks are missing
    cap = cfg.prefill_cap
    budget = cfg.max_step_tokens - len(plan.decode)
    used = sum(n for sid, n in plan.grow if sid in plan.decode)
    for sid, n in plan.prefill:
        q = by_id[sid]
        first = min(n, cap) if sid in run_ids else n  # what it took before the admissions
        budget -= first
        used += max(0, blocks_for(q.computed + first, cfg.block_tokens) - len(q.blocks))
    closed = len(survivors) + len(admitted) >= cfg.max_running or budget <= 0
    rest = queue[len(admitted) :]
    if rest:
        head = rest[0]
        if _never_fits(head, cfg):  # aborted once it reaches the head of an open queue
            assert closed, f"{head.seq_id} can never fit yet was not aborted: {plan}"
        else:
            want = min(head.prompt_len, budget)
            assert closed or blocks_for(want, cfg.block_tokens) > free + freed - used, (
                f"the head {head.seq_id} could have been admitted: {plan}"
            )


@st.composite
def configs(draw: st.DrawFn) -> PolicyConfig:
    max_running = draw(st.integers(1, 8))
    step_tokens = draw(st.integers(max_running, max_running + 40))
    return PolicyConfig(
        max_running=max_running,
        max_step_tokens=step_tokens,
        block_tokens=draw(st.integers(1, 8)),
        total_blocks=draw(st.integers(1, 40)),
        max_model_len=draw(st.integers(8, 128)),
        long_prefill_tokens=draw(st.one_of(st.just(0), st.integers(1, step_tokens))),
    )


workloads = st.lists(
    st.tuples(st.integers(0, 30), st.integers(1, 60), st.integers(1, 20)), max_size=20
)


@given(configs(), workloads, st.data())
@settings(max_examples=300, deadline=None)
def test_simulation_ends_every_sequence_exactly_once(
    cfg: PolicyConfig, workload: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    cancels = data.draw(
        st.dictionaries(st.integers(0, max(len(workload) - 1, 0)), st.integers(0, 60), max_size=4)
    )
    res = simulate(cfg, workload, cancels)
    assert set(res.outcome) == set(range(len(workload)))  # nothing lost
    for sid, (arrival, prompt, max_new) in enumerate(workload):
        how = res.outcome[sid]
        fits = not (
            prompt + max_new > cfg.max_model_len
            or blocks_for(prompt + max_new - 1, cfg.block_tokens) > cfg.total_blocks
        )
        if how == "aborted":
            assert not fits
        elif how == "cancelled":
            assert sid in cancels
        else:
            assert fits
            assert how == "done"
        # fairness: a sequence waits only for the work of older ones, never of younger ones
        older = [p + m + 1 for j, (a, p, m) in enumerate(workload) if (a, j) <= (arrival, sid)]
        assert res.finished[sid] - arrival <= sum(older)


@given(configs(), workloads, st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_plan_does_not_depend_on_input_order(
    cfg: PolicyConfig, workload: list[tuple[int, int, int]], rnd: random.Random
) -> None:
    res = simulate(cfg, workload)
    assert res.outcome.keys() == set(range(len(workload)))
    # replay a mid-run snapshot shuffled: the same plan
    states = [SeqState(i, float(a), p, 0, 0, m, 0) for i, (a, p, m) in enumerate(workload)]
    shuffled = states[:]
    rnd.shuffle(shuffled)
    free = rnd.randint(0, cfg.total_blocks)
    assert plan_step(states, [], free, cfg) == plan_step(shuffled, [], free, cfg)


def test_two_hundred_sequences_against_a_cache_for_sixteen_all_finish() -> None:
    rnd = random.Random(7)
    cfg = PolicyConfig(
        max_running=64, max_step_tokens=256, block_tokens=4, total_blocks=16 * 12, max_model_len=64
    )
    workload = [(rnd.randint(0, 20), rnd.randint(8, 24), rnd.randint(4, 24)) for _ in range(200)]
    res = simulate(cfg, workload)
    assert list(res.outcome.values()).count("done") == 200
    assert res.preemptions > 0  # the cache really was the bottleneck


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=20, deadline=None)
def test_two_hundred_sequences_finish_under_any_mix(seed: int) -> None:
    rnd = random.Random(seed)
    cfg = PolicyConfig(
        max_running=32, max_step_tokens=64, block_tokens=8, total_blocks=16 * 6, max_model_len=48
    )
    workload = [(rnd.randint(0, 40), rnd.randint(1, 32), rnd.randint(1, 16)) for _ in range(200)]
    res = simulate(cfg, workload)
    assert list(res.outcome.values()).count("done") == 200


def test_a_long_prompt_is_chunked_while_short_requests_decode_and_start() -> None:
    cfg = PolicyConfig(
        max_running=16, max_step_tokens=64, block_tokens=16, total_blocks=1000, max_model_len=4096
    )
    long_prompt = (0, 2000, 4)
    shorts = [(step, 12, 30) for step in range(1, 11)]
    res = simulate(cfg, [long_prompt, *shorts])
    assert set(res.outcome.values()) == {"done"}
    assert all(plan.tokens <= cfg.max_step_tokens for plan in res.plans)
    assert all(n <= cfg.max_step_tokens for plan in res.plans for _, n in plan.prefill)
    assert res.skipped_decodes == 0  # every short sequence decoded at every step
    # each short request's first token comes in the step it arrives: not after the long prefill
    for sid, (arrival, _, _) in enumerate(shorts, start=1):
        assert res.first_token[sid] == arrival
    assert res.first_token[0] > max(res.first_token[sid] for sid in range(1, 11))


@given(
    st.integers(48, 128),
    st.integers(100, 3000),
    st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 40)), min_size=1, max_size=8),
)
@settings(max_examples=100, deadline=None)
def test_short_requests_start_in_their_first_step_whatever_the_long_prompt(
    step_tokens: int, long_len: int, shorts: list[tuple[int, int]]
) -> None:
    cfg = PolicyConfig(
        max_running=16,
        max_step_tokens=step_tokens,
        block_tokens=16,
        total_blocks=4096,
        max_model_len=4096,
    )
    # short prompts fit in what one step leaves: half the budget minus the other shorts' decodes
    room = step_tokens - cfg.prefill_cap - len(shorts)
    workload = [(0, long_len, 2)] + [
        (step, 1 + size % room, new) for step, (size, new) in enumerate(shorts, start=1)
    ]
    res = simulate(cfg, workload)
    assert set(res.outcome.values()) == {"done"}
    assert res.skipped_decodes == 0
    for sid, (arrival, _, _) in enumerate(workload[1:], start=1):
        assert res.first_token[sid] == arrival


def test_a_lone_long_prompt_uses_the_whole_step_budget() -> None:
    cfg = PolicyConfig(
        max_running=4, max_step_tokens=64, block_tokens=16, total_blocks=200, max_model_len=4096
    )
    res = simulate(cfg, [(0, 640, 1)])
    assert [plan.prefill for plan in res.plans] == [((0, 64),)] * 10


def _seq(sid: int, arrival: float, *, prompt: int, computed: int, blocks: int) -> SeqState:
    generated = max(0, computed - prompt + 1)
    return SeqState(sid, arrival, prompt, computed, generated, generated + 4, blocks)


def test_preemption_takes_the_youngest_first() -> None:
    cfg = PolicyConfig(
        max_running=4, max_step_tokens=16, block_tokens=4, total_blocks=12, max_model_len=512
    )
    # three decoders, each with a full last block: each needs one more block; none are free
    running = [
        _seq(1, 1.0, prompt=8, computed=16, blocks=4),
        _seq(3, 0.5, prompt=8, computed=16, blocks=4),
        _seq(2, 2.0, prompt=8, computed=16, blocks=4),
    ]
    plan = plan_step([], running, 0, cfg)
    assert plan.preempt == (2,)  # the latest arrival frees 4 blocks: enough for the other two
    assert plan.decode == (3, 1)
    assert plan.grow == ((3, 1), (1, 1))
    assert "preempted 1" in plan.reason


def test_the_oldest_is_never_preempted_and_waits_for_blocks_held_elsewhere() -> None:
    cfg = PolicyConfig(
        max_running=4, max_step_tokens=16, block_tokens=4, total_blocks=12, max_model_len=512
    )
    # its last block is full and the 10 other blocks are still held by finished sequences
    oldest = _seq(1, 0.0, prompt=8, computed=8, blocks=2)
    plan = plan_step([], [oldest], 0, cfg)
    assert plan == StepPlan(reason="stall 1: blocks held elsewhere")
    assert plan_step([], [oldest], 1, cfg) == StepPlan(decode=(1,), grow=((1, 1),))


def test_a_running_sequence_that_outgrows_the_cache_is_aborted() -> None:
    cfg = PolicyConfig(
        max_running=4, max_step_tokens=16, block_tokens=4, total_blocks=2, max_model_len=512
    )
    plan = plan_step([], [_seq(1, 0.0, prompt=4, computed=8, blocks=2)], 0, cfg)
    assert plan.abort == (1,)
    assert plan.decode == ()


def test_head_of_line_blocking_keeps_fcfs() -> None:
    cfg = PolicyConfig(
        max_running=4, max_step_tokens=64, block_tokens=4, total_blocks=10, max_model_len=512
    )
    head = SeqState(1, 0.0, 20, 0, 0, 4, 0)  # needs 5 blocks
    small = SeqState(2, 1.0, 4, 0, 0, 4, 0)  # needs 1 block
    plan = plan_step([small, head], [], 3, cfg)
    assert plan.prefill == ()  # the small one may not overtake the head
    assert "head 1 waits for 5 KV blocks (3 free)" in plan.reason
    assert plan_step([small, head], [], 6, cfg).prefill == ((1, 20), (2, 4))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_running": 0}, "max_running must be at least 1, got 0"),
        ({"block_tokens": 0}, "block_tokens must be at least 1"),
        ({"total_blocks": -1}, "total_blocks must be at least 1"),
        ({"max_model_len": 1}, "max_model_len must be at least 2"),
        ({"max_step_tokens": 4}, r"max_step_tokens \(4\) must be at least max_running \(8\)"),
        ({"long_prefill_tokens": 65}, "long_prefill_tokens must be between 0"),
        ({"long_prefill_tokens": -1}, "long_prefill_tokens must be between 0"),
    ],
)
def test_config_is_validated(kwargs: dict[str, int], message: str) -> None:
    base = {
        "max_running": 8,
        "max_step_tokens": 64,
        "block_tokens": 16,
        "total_blocks": 10,
        "max_model_len": 256,
    }
    with pytest.raises(ConfigError, match=message):
        PolicyConfig(**(base | kwargs))  # type: ignore[arg-type]


def test_check_fits_names_the_limit() -> None:
    cfg = PolicyConfig(
        max_running=4, max_step_tokens=64, block_tokens=16, total_blocks=4, max_model_len=100
    )
    check_fits(60, 5, cfg)
    check_fits(60, 5, cfg)
    with pytest.raises(InvalidArgumentError, match=r"101 tokens, over the model's max_model_len"):
        check_fits(90, 11, cfg)
    small = PolicyConfig(
        max_running=4, max_step_tokens=64, block_tokens=16, total_blocks=4, max_model_len=1000
    )
    check_fits(60, 5, small)  # 64 KV tokens: exactly 4 blocks
    with pytest.raises(InvalidArgumentError, match=r"more than the KV cache holds \(65 tokens\)"):
        check_fits(60, 6, small)


def test_impossible_states_are_refused() -> None:
    cfg = PolicyConfig(
        max_running=4, max_step_tokens=16, block_tokens=4, total_blocks=8, max_model_len=512
    )
    ok = SeqState(1, 0.0, 8, 0, 0, 4, 0)
    with pytest.raises(ValueError, match="free_blocks must not be negative"):
        plan_step([ok], [], -1, cfg)
    with pytest.raises(ValueError, match="a seq_id appears twice"):
        plan_step([ok], [ok], 4, cfg)
    with pytest.raises(ValueError, match="sequence 2 holds 1 KV blocks for 8 computed tokens"):
        plan_step([], [SeqState(2, 0.0, 8, 8, 1, 4, 1)], 4, cfg)
    with pytest.raises(ValueError, match="prompt_len must be at least 1"):
        SeqState(3, 0.0, 0, 0, 0, 4, 0)
    with pytest.raises(ValueError, match="negative token or block count"):
        SeqState(3, 0.0, 4, 0, 0, 4, -1)
