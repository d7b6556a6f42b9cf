"""The continuous-batching loop: one thread that owns the model and its KV cache.

Requests arrive from any thread (:meth:`GenerationEngine.submit`); the loop sleeps on a condition
until there is work (never a busy loop), then runs steps. One step:

1. retire the sequences whose consumer left (a cancelled sink: their blocks are freed within
   this step) or whose deadline passed (an error response);
2. snapshot every sequence as a :class:`~inferd.backends.llm.policy.SeqState` and ask
   :func:`~inferd.backends.llm.policy.plan_step` what to do;
3. apply the plan: abort what can never run, preempt (free the blocks; the sequence goes back
   to waiting with its generated tokens folded into the prompt, recomputed later), let the
   admitted sequences take the cached blocks of their prompt's head (prefix caching: they
   start their prefill after them), grow;
4. one forward pass over the prefill chunks and decode tokens (:meth:`LlamaModel.step`), then
   register the blocks it filled in the prefix cache;
5. sample the sequences that completed their prompt or decoded (:class:`Sampler`), feed each
   token to the sequence's :class:`StopChecker`, and answer through the request's ``respond``:
   streamed, one response per text delta (the one that finishes it final, or a final flag
   alone); otherwise one response with the whole text when it finishes;
6. retire the finished sequences (their blocks freed).

A sequence's tokens are ``prompt + generated``; ``computed`` of them have their KV in the
cache, and a step feeds it ``tokens[computed : computed + n]``. This module knows nothing of
tensors on the wire: ``respond(text, error, final)`` is the runtime's.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from inferd.backends.llm.blocks import BlockAllocator, extend_keys
from inferd.backends.llm.model import KVCache, LlamaModel, StepSequence
from inferd.backends.llm.params import SamplingParams
from inferd.backends.llm.policy import PolicyConfig, SeqState, check_fits, plan_step
from inferd.backends.llm.sampling import Sampler, seeded_generator
from inferd.backends.llm.stops import StopChecker
from inferd.core.llm_stats import LlmStatistics
from inferd.errors import (
    DeadlineExceededError,
    InferdError,
    InternalError,
    InvalidArgumentError,
    OverloadedError,
    UnavailableError,
)

__all__ = ["Generation", "GenerationEngine", "GenerationHandle", "LlmStatistics", "Respond"]

log = logging.getLogger(__name__)

#: ``respond(text, error, final)``: a text delta (or whole text), or an error; ``final`` on
#: the last call. ``(None, None, True)`` is the final flag alone.
Respond = Callable[[str | None, InferdError | None, bool], None]

_LATENCY_WINDOW = 4096  # recent TTFT / inter-token samples kept for percentiles


@dataclass(slots=True)
class Generation:
    """One request as the engine takes it."""

    prompt_ids: list[int]
    params: SamplingParams
    respond: Respond
    stream: bool = False
    prefix: str = ""  # text before the generated text in a whole answer ("" to leave it out)
    deadline: float | None = None  # on the engine's clock (monotonic seconds)
    on_token: Callable[[int], None] | None = None  # sees each generated id (usage, tests)
    # sees each generated id with its log-probability (the runtime's ``logprobs`` output)
    on_logprob: Callable[[int, float], None] | None = None


@dataclass(slots=True)
class _Seq:
    seq_id: int
    arrival: float
    gen: Generation
    checker: StopChecker
    generator: torch.Generator | None
    tokens: list[int]  # prompt + generated
    prompt_len: int  # the request's prompt
    recompute_len: int  # tokens to prefill (the prompt, plus generated ones after a preemption)
    computed: int = 0
    generated: int = 0
    blocks: list[int] = field(default_factory=list)
    # prefix caching: the keys of the full blocks of ``tokens`` (extended as they fill), and
    # how many of ``blocks`` are registered in the cache (or were taken from it)
    keys: list[bytes] = field(default_factory=list)
    registered: int = 0
    parts: list[str] = field(default_factory=list)
    cancelled: bool = False
    last_token_at: float = 0.0

    def state(self, computed: int | None = None, shared: int = 0) -> SeqState:
        return SeqState(
            seq_id=self.seq_id,
            arrival=self.arrival,
            prompt_len=self.recompute_len,
            computed=self.computed if computed is None else computed,
            generated=self.generated,
            max_new_tokens=self.gen.params.max_tokens,
            blocks=len(self.blocks),
            shared_blocks=shared,
        )


class GenerationHandle:
    """What :meth:`GenerationEngine.submit` returns: ``cancel()`` from any thread."""

    __slots__ = ("_engine", "_seq")

    def __init__(self, engine: GenerationEngine, seq: _Seq) -> None:
        self._engine = engine
        self._seq = seq

    def cancel(self) -> None:
        self._seq.cancelled = True
        self._engine._wake()


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class GenerationEngine:
    """The loop thread over one model and its cache (start with :meth:`start`)."""

    def __init__(
        self,
        model: LlamaModel,
        tokenizer: Any,
        cfg: PolicyConfig,
        *,
        eos_ids: frozenset[int],
        threads: int = 0,
        max_waiting: int = 1024,
        name: str = "llm",
        clock: Callable[[], float] = time.monotonic,
        prefix_caching: bool = True,
    ) -> None:
        self.model = model
        self.cfg = cfg
        self.cache = KVCache(
            model.config, cfg.total_blocks, cfg.block_tokens, model.dtype, model.device
        )
        self._tokenizer = tokenizer
        self._eos = eos_ids
        self._threads = threads
        self._max_waiting = max_waiting
        self._clock = clock
        self._sampler = Sampler()
        self._blocks = BlockAllocator(cfg.total_blocks, caching=prefix_caching)
        self._cond = threading.Condition(threading.Lock())
        self._inbox: list[_Seq] = []
        self._waiting: list[_Seq] = []
        self._running: dict[int, _Seq] = {}
        self._next_id = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"inferd-llm {name}", daemon=True)
        self._ttft: collections.deque[float] = collections.deque(maxlen=_LATENCY_WINDOW)
        self._itl: collections.deque[float] = collections.deque(maxlen=_LATENCY_WINDOW)
        self._counts = collections.Counter[str]()
        self._sums = {"ttft": 0.0, "itl": 0.0}

    # -- any thread ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the loop; every open request gets an unavailable error."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._fail_all(UnavailableError("the model was unloaded"))

    def submit(self, gen: Generation) -> GenerationHandle:
        """Queue ``gen``; raises InvalidArgumentError (queuing nothing) for a request that can
        never fit the cache or ``max_model_len``, OverloadedError when ``max_waiting`` requests
        already wait."""
        if not gen.prompt_ids:
            raise InvalidArgumentError("the prompt is empty: give at least one token of text")
        check_fits(len(gen.prompt_ids), gen.params.max_tokens, self.cfg)
        vocab = self.model.config.vocab_size
        bad = [t for t in gen.params.stop_token_ids if not 0 <= t < vocab]
        if bad:
            raise InvalidArgumentError(
                f"sampling_parameters: 'stop_token_ids' holds {bad[0]}, outside the "
                f"vocabulary (0..{vocab - 1})"
            )
        checker = StopChecker(self._tokenizer, gen.params, self._eos, gen.prompt_ids)
        generator = seeded_generator(gen.params.seed, self.model.device)
        with self._cond:
            if self._closed:
                raise UnavailableError("the model is being unloaded")
            if len(self._inbox) + len(self._waiting) >= self._max_waiting:
                raise OverloadedError(
                    f"{self._max_waiting} requests already wait for this model "
                    "(parameter max_waiting); try again later"
                )
            seq = _Seq(
                seq_id=self._next_id,
                arrival=self._clock(),
                gen=gen,
                checker=checker,
                generator=generator,
                tokens=list(gen.prompt_ids),
                prompt_len=len(gen.prompt_ids),
                recompute_len=len(gen.prompt_ids),
            )
            self._next_id += 1
            self._inbox.append(seq)
            self._counts["requests"] += 1
            self._counts["prompt_tokens"] += len(gen.prompt_ids)
            self._cond.notify_all()
        return GenerationHandle(self, seq)

    def statistics(self) -> LlmStatistics:
        with self._cond:
            ttft, itl = list(self._ttft), list(self._itl)
            counts = dict(self._counts)
            sums = dict(self._sums)
            running, waiting = len(self._running), len(self._waiting) + len(self._inbox)
        used = self.kv_blocks_used
        return LlmStatistics(
            running=running,
            waiting=waiting,
            kv_blocks_used=used,
            kv_blocks_total=self.cfg.total_blocks,
            kv_blocks_cached=self._blocks.cached_count,
            requests_total=counts.get("requests", 0),
            finished_total=counts.get("finished", 0),
            cancelled_total=counts.get("cancelled", 0),
            failed_total=counts.get("failed", 0),
            preemptions_total=counts.get("preemptions", 0),
            prefix_cache_queried_tokens_total=counts.get("prefix_queried", 0),
            prefix_cache_hit_tokens_total=counts.get("prefix_hit", 0),
            prompt_tokens_total=counts.get("prompt_tokens", 0),
            generated_tokens_total=counts.get("generated", 0),
            steps_total=counts.get("steps", 0),
            ttft_sum_s=sums["ttft"],
            ttft_count=counts.get("ttft", 0),
            itl_sum_s=sums["itl"],
            itl_count=counts.get("itl", 0),
            ttft_p50_s=_percentile(ttft, 0.5),
            ttft_p99_s=_percentile(ttft, 0.99),
            itl_p50_s=_percentile(itl, 0.5),
            itl_p99_s=_percentile(itl, 0.99),
        )

    @property
    def blocks(self) -> BlockAllocator:
        """The KV block accounting (the loop thread's: read it from there or when idle)."""
        return self._blocks

    @property
    def kv_blocks_used(self) -> int:
        """KV blocks held by sequences now (a plain int, read without the loop's lock)."""
        return self._blocks.used_count

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- the loop thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        if self._threads > 0:
            torch.set_num_threads(self._threads)
        idle_wait: float | None = None
        while True:
            with self._cond:
                while not self._closed and not self._has_work(idle_wait):
                    self._cond.wait(self._wait_s(idle_wait))
                    idle_wait = None
                if self._closed:
                    return
                self._waiting.extend(self._inbox)
                self._inbox.clear()
            try:
                progressed = self._step()
            except Exception:  # one failing step never kills the loop
                log.exception("a generation step failed")
                self._fail_all(InternalError("internal error in the generation step"))
                progressed = True
            # a step that could do nothing (blocks held elsewhere) waits for a change
            idle_wait = None if progressed else 0.05

    def _has_work(self, idle_wait: float | None) -> bool:
        if self._inbox:
            return True
        if idle_wait is not None:
            return False  # the last step was idle: sleep until a change or the timeout
        return bool(self._waiting or self._running)

    def _wait_s(self, idle_wait: float | None) -> float | None:
        deadlines = [
            s.gen.deadline
            for s in (*self._waiting, *self._running.values())
            if s.gen.deadline is not None
        ]
        if not deadlines:
            return idle_wait
        until = max(0.0, min(deadlines) - self._clock())
        return until if idle_wait is None else min(until, idle_wait)

    def _all(self) -> list[_Seq]:
        return [*self._waiting, *self._running.values()]

    def _release(self, seq: _Seq) -> None:
        if seq.blocks:
            self._blocks.free(seq.blocks)
            seq.blocks = []
            seq.registered = 0
        self._running.pop(seq.seq_id, None)
        if seq in self._waiting:
            self._waiting.remove(seq)

    def _fail(self, seq: _Seq, error: InferdError) -> None:
        self._release(seq)
        with self._cond:
            self._counts["failed"] += 1
        seq.gen.respond(None, error, True)

    def _fail_all(self, error: InferdError) -> None:
        with self._cond:
            pending = [*self._inbox, *self._all()]
            self._inbox.clear()
        for seq in pending:
            self._fail(seq, error)

    def _retire_gone(self) -> None:
        now = self._clock()
        for seq in self._all():
            if seq.cancelled:
                self._release(seq)
                with self._cond:
                    self._counts["cancelled"] += 1
                seq.gen.respond(None, None, True)  # ends the request (dropped by its sink)
            elif seq.gen.deadline is not None and now >= seq.gen.deadline:
                self._fail(
                    seq,
                    DeadlineExceededError(
                        f"the request timed out after {seq.generated} generated tokens"
                    ),
                )

    def _step(self) -> bool:
        """One step; False when it could do nothing."""
        self._retire_gone()
        by_id = {s.seq_id: s for s in self._all()}
        if not by_id:
            return True
        hits = self._prefix_hits()
        plan = plan_step(
            [s.state(len(hits.get(s.seq_id, ())) * self.cfg.block_tokens) for s in self._waiting],
            [s.state(shared=self._shared(s)) for s in self._running.values()],
            self._blocks.free_count,
            self.cfg,
        )
        for sid in plan.abort:
            self._fail(
                by_id[sid],
                InvalidArgumentError(
                    "the request needs more KV cache than the model has "
                    f"({self.cfg.total_blocks} blocks of {self.cfg.block_tokens} tokens)"
                ),
            )
        for sid in plan.preempt:
            seq = by_id[sid]
            self._release(seq)
            seq.computed = 0
            seq.recompute_len = len(seq.tokens)
            self._waiting.append(seq)
            with self._cond:
                self._counts["preemptions"] += 1
        self._waiting.sort(key=lambda s: (s.arrival, s.seq_id))
        self._take_hits(plan.prefill, by_id, hits)
        for sid, count in plan.grow:
            seq = by_id[sid]
            # an admitted sequence's grant covers the cached blocks it took above
            taken = len(hits.get(sid, ())) if seq.seq_id not in self._running else 0
            seq.blocks.extend(self._blocks.allocate(count - taken))
        work: list[tuple[_Seq, int]] = [(by_id[sid], n) for sid, n in plan.prefill]
        work += [(by_id[sid], 1) for sid in plan.decode]
        if not work:
            return False
        for seq, _ in work:
            if seq.seq_id not in self._running:
                self._waiting.remove(seq)
                self._running[seq.seq_id] = seq
        logits = self.model.step(
            [
                StepSequence(s.tokens[s.computed : s.computed + n], s.computed, s.blocks)
                for s, n in work
            ],
            self.cache,
        )
        rows: list[int] = []
        for index, (seq, n) in enumerate(work):
            seq.computed += n
            if seq.computed >= seq.recompute_len:
                rows.append(index)
        if self._blocks.caching:
            self._register_full(seq for seq, _ in work)
        with self._cond:
            self._counts["steps"] += 1
        if rows:
            self._sample([work[i][0] for i in rows], logits[rows])
        return True

    # -- prefix caching --------------------------------------------------------------------------

    def _prefix_hits(self) -> dict[int, list[int]]:
        """The cached blocks of the prompt head of each waiting sequence that may be admitted
        this step (the first ``max_running``), by seq_id. At least the last token of what is
        to be computed is left out, so the prefill yields logits to sample, and it never ends
        inside the last block: a matched block is full and is never written."""
        if not self._blocks.caching:
            return {}
        bt = self.cfg.block_tokens
        hits: dict[int, list[int]] = {}
        for seq in self._waiting[: self.cfg.max_running]:
            usable = (seq.recompute_len - 1) // bt
            if usable < 1:
                continue
            extend_keys(seq.keys, seq.tokens, bt, usable)
            found = self._blocks.match(seq.keys[:usable])
            if found:
                hits[seq.seq_id] = found
        return hits

    def _shared(self, seq: _Seq) -> int:
        """How many of ``seq``'s blocks other sequences hold too."""
        if not self._blocks.caching:
            return 0
        refs = self._blocks.refs
        return sum(1 for block in seq.blocks[: seq.registered] if refs(block) > 1)

    def _take_hits(
        self,
        prefill: Sequence[tuple[int, int]],
        by_id: dict[int, _Seq],
        hits: dict[int, list[int]],
    ) -> None:
        """Admitted sequences take their cached blocks and start after them (before any
        allocation, which could evict them); counts the queried and hit tokens."""
        if not self._blocks.caching:
            return
        queried = hit = 0
        for sid, _ in prefill:
            seq = by_id[sid]
            if seq.seq_id in self._running:
                continue
            found = hits.get(sid, [])
            queried += seq.recompute_len
            if found:
                self._blocks.acquire(found)
                seq.blocks = list(found)
                seq.registered = len(found)
                seq.computed = len(found) * self.cfg.block_tokens
                hit += seq.computed
        with self._cond:
            self._counts["prefix_queried"] += queried
            self._counts["prefix_hit"] += hit

    def _register_full(self, seqs: Iterable[_Seq]) -> None:
        """Cache the blocks the step filled (a key another block holds leaves it private)."""
        bt = self.cfg.block_tokens
        for seq in seqs:
            full = seq.computed // bt
            if full <= seq.registered:
                continue
            extend_keys(seq.keys, seq.tokens, bt, full)
            for index in range(seq.registered, full):
                self._blocks.register(seq.blocks[index], seq.keys[index])
            seq.registered = full

    def _sample(self, seqs: list[_Seq], logits: torch.Tensor) -> None:
        wanted = any(s.gen.on_logprob is not None for s in seqs)
        ids, logprobs = self._sampler.sample(
            logits,
            [s.gen.params for s in seqs],
            [s.generator for s in seqs],
            [s.tokens for s in seqs],
            prompt_lens=[s.prompt_len for s in seqs],
            suppress=[s.checker.suppressed() for s in seqs],
            with_logprobs=wanted,  # the log-softmax only when a request asked for it
        )
        now = self._clock()
        chosen = ids.tolist()
        chosen_logprobs = logprobs.tolist() if wanted else None
        ttft: list[float] = []
        itl: list[float] = []
        for row, (seq, token) in enumerate(zip(seqs, chosen, strict=True)):
            if seq.generated == 0:
                ttft.append(now - seq.arrival)
            elif seq.last_token_at:
                itl.append(now - seq.last_token_at)
            seq.last_token_at = now
            seq.tokens.append(token)
            seq.generated += 1
            if seq.gen.on_token is not None:
                seq.gen.on_token(token)
            if seq.gen.on_logprob is not None and chosen_logprobs is not None:
                seq.gen.on_logprob(token, chosen_logprobs[row])
            text, reason = seq.checker.push(token)
            if reason is None and len(seq.tokens) >= self.cfg.max_model_len:
                text += seq.checker.flush()
                reason = "length"
            self._emit(seq, text, reason is not None)
        with self._cond:
            self._counts["generated"] += len(chosen)
            self._counts["ttft"] += len(ttft)
            self._counts["itl"] += len(itl)
            self._sums["ttft"] += sum(ttft)
            self._sums["itl"] += sum(itl)
            self._ttft.extend(ttft)
            self._itl.extend(itl)

    def _emit(self, seq: _Seq, text: str, finished: bool) -> None:
        if finished:
            self._release(seq)
            with self._cond:
                self._counts["finished"] += 1
        if seq.cancelled:
            if finished:
                seq.gen.respond(None, None, True)
            return
        if seq.gen.stream:
            if text:
                seq.gen.respond(text, None, finished)
            elif finished:
                seq.gen.respond(None, None, True)
        else:
            seq.parts.append(text)
            if finished:
                seq.gen.respond(seq.gen.prefix + "".join(seq.parts), None, True)
