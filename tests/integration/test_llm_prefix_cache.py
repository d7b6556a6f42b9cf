"""Prefix reuse in the generation engine on a random tiny Llama (float64): greedy answers are
token for token the same with the prefix cache on and off (prompts sharing a head, some
arriving after others finished, some together, some preempted and recomputed), the hits are
counted, and no step ever writes into a block that is shared or cached (checked on every
forward pass of the real model)."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from inferd.backends.llm.engine import Generation, GenerationEngine  # noqa: E402
from inferd.backends.llm.model import KVCache, LlamaModel, StepSequence  # noqa: E402
from inferd.backends.llm.params import SamplingParams  # noqa: E402
from inferd.backends.llm.policy import PolicyConfig  # noqa: E402
from inferd.errors import InferdError  # noqa: E402
from tests.helpers.tiny_llama import write_tiny_llama  # noqa: E402

EOS = 2
WAIT_S = 120


class _CheckedModel:
    """The real model, with a check before every step: each position a step writes lies in a
    block its sequence holds alone and that is not cached."""

    def __init__(self, inner: LlamaModel) -> None:
        self.inner = inner
        self.config = inner.config
        self.dtype = inner.dtype
        self.device = inner.device
        self.engine: GenerationEngine | None = None
        self.violations: list[str] = []
        self.writes = 0

    def step(self, seqs: Sequence[StepSequence], cache: KVCache) -> Any:
        assert self.engine is not None
        blocks = self.engine.blocks
        bt = cache.block_tokens
        for s in seqs:
            for pos in range(s.start, s.start + len(s.tokens)):
                block = s.block_table[pos // bt]
                self.writes += 1
                if blocks.refs(block) != 1 or blocks.key_of(block) is not None:
                    self.violations.append(
                        f"position {pos} written into block {block} "
                        f"(refs {blocks.refs(block)}, cached {blocks.key_of(block) is not None})"
                    )
        return self.inner.step(seqs, cache)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("llm") / "m", seed=3)


@pytest.fixture(scope="module")
def model(folder: Path) -> LlamaModel:
    return LlamaModel.load(folder, dtype=torch.float64)


@pytest.fixture(scope="module")
def tokenizer(folder: Path) -> Any:
    return tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))


@contextlib.contextmanager
def _engine(
    model: LlamaModel, tokenizer: Any, caching: bool, **kwargs: int
) -> Iterator[tuple[GenerationEngine, _CheckedModel]]:
    settings = {
        "max_running": 8,
        "max_step_tokens": 32,
        "block_tokens": 4,
        "total_blocks": 128,
        "max_model_len": 256,
        **kwargs,
    }
    checked = _CheckedModel(model)
    engine = GenerationEngine(
        cast(LlamaModel, checked),
        tokenizer,
        PolicyConfig(**settings),
        eos_ids=frozenset({EOS}),
        prefix_caching=caching,
    )
    checked.engine = engine
    engine.start()
    try:
        yield engine, checked
    finally:
        engine.close()


class _Run:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.error: InferdError | None = None
        self.done = threading.Event()

    def respond(self, text: str | None, error: InferdError | None, final: bool) -> None:
        if error is not None:
            self.error = error
        if final:
            self.done.set()


def _submit(engine: GenerationEngine, prompt: list[int], max_tokens: int) -> _Run:
    run = _Run()
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    engine.submit(Generation(prompt, params, run.respond, stream=True, on_token=run.ids.append))
    return run


def _wait(runs: Sequence[_Run]) -> list[list[int]]:
    for run in runs:
        assert run.done.wait(WAIT_S), "a request did not finish"
        assert run.error is None, run.error
    return [run.ids for run in runs]


def _prompts(count: int, head: int, seed: int) -> list[list[int]]:
    rnd = random.Random(seed)
    shared = [rnd.randrange(3, 200) for _ in range(head)]
    # the head alone (first and again last: the repeat is all cached blocks when the head is
    # whole blocks, and computes its last block again), the head plus one block, and the
    # others a distinct question after the head
    tails = [[], [rnd.randrange(3, 200) for _ in range(4)]]
    tails += [[rnd.randrange(3, 200) for _ in range(rnd.randint(1, 9))] for _ in range(count - 3)]
    return [shared + tail for tail in [*tails, []]]


def _serve(
    model: LlamaModel,
    tokenizer: Any,
    prompts: list[list[int]],
    caching: bool,
    max_tokens: int,
    **kwargs: int,
) -> tuple[list[list[int]], Any, _CheckedModel]:
    with _engine(model, tokenizer, caching, **kwargs) as (engine, checked):
        # two first (they fill the cache), then the rest together
        first = _wait([_submit(engine, p, max_tokens) for p in prompts[:2]])
        rest = _wait([_submit(engine, p, max_tokens) for p in prompts[2:]])
        stats = engine.statistics()
        assert engine.blocks.used_count == 0
        assert engine.blocks.free_count == engine.cfg.total_blocks
    return first + rest, stats, checked


def test_greedy_answers_are_the_same_with_and_without_prefix_reuse(
    model: LlamaModel, tokenizer: Any
) -> None:
    prompts = _prompts(12, head=32, seed=11)
    on, stats_on, checked_on = _serve(model, tokenizer, prompts, True, 12)
    off, stats_off, checked_off = _serve(model, tokenizer, prompts, False, 12)
    assert on == off
    assert checked_on.violations == []
    assert checked_off.violations == []
    # the head (8 full blocks of 4) is reused by every prompt after the first two (the second
    # reuses it too when the first was prefilled before it arrived); the repeated head alone
    # computes its last block again
    least = 32 * (len(prompts) - 3) + 28
    assert least <= stats_on.prefix_cache_hit_tokens_total <= least + 32
    assert stats_on.prefix_cache_queried_tokens_total == sum(len(p) for p in prompts)
    assert checked_on.writes < checked_off.writes  # the reused tokens were not computed
    assert stats_off.prefix_cache_hit_tokens_total == 0
    assert stats_off.prefix_cache_queried_tokens_total == 0


def test_greedy_answers_are_the_same_under_preemption(model: LlamaModel, tokenizer: Any) -> None:
    prompts = _prompts(10, head=17, seed=5)
    tight = {"total_blocks": 16, "max_running": 6}
    on, stats_on, checked_on = _serve(model, tokenizer, prompts, True, 16, **tight)
    off, stats_off, checked_off = _serve(model, tokenizer, prompts, False, 16, **tight)
    assert stats_on.preemptions_total > 0
    assert stats_off.preemptions_total > 0
    assert on == off
    assert checked_on.violations == []
    assert checked_off.violations == []
    assert stats_on.prefix_cache_hit_tokens_total > 0
    # preempted sequences are admitted again: more queried tokens than the prompts hold
    assert stats_on.prefix_cache_queried_tokens_total > sum(len(p) for p in prompts)
