"""The continuous-batching engine on a random tiny Llama (float64), against Hugging Face's
``generate(do_sample=False)`` of each sequence alone.

Float-noise ties: the sampler picks the argmax of float32 logits, Hugging Face of float64 ones,
so two tokens whose logits differ by less than float32 noise may be picked differently. Each
sequence is compared token by token up to and including the first step where Hugging Face's
top-2 logit gap is under 1e-4 (after it the texts may rightly diverge); the test also checks
that nearly all tokens were compared, so it cannot pass by skipping."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from inferd.backends.llm.engine import Generation, GenerationEngine  # noqa: E402
from inferd.backends.llm.model import LlamaModel  # noqa: E402
from inferd.backends.llm.params import SamplingParams  # noqa: E402
from inferd.backends.llm.policy import PolicyConfig  # noqa: E402
from inferd.errors import InferdError, InvalidArgumentError, OverloadedError  # noqa: E402
from tests.helpers.tiny_llama import load_hf, write_tiny_llama  # noqa: E402

EOS = 2
TIE_GAP = 1e-4
WAIT_S = 60


@dataclass
class Run:
    """What one request received."""

    texts: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    error: InferdError | None = None
    finals: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    handle: Any = None

    def respond(self, text: str | None, error: InferdError | None, final: bool) -> None:
        assert self.finals == 0, "a response after the final one"
        if text is not None:
            self.texts.append(text)
        if error is not None:
            self.error = error
        if final:
            self.finals += 1
            self.done.set()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("llm") / "m", seed=3)


@pytest.fixture(scope="module")
def model(folder: Path) -> LlamaModel:
    return LlamaModel.load(folder, dtype=torch.float64)


@pytest.fixture(scope="module")
def hf(folder: Path) -> Any:
    return load_hf(folder)


@pytest.fixture(scope="module")
def tokenizer(folder: Path) -> Any:
    return tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))


@contextlib.contextmanager
def _engine(
    model: LlamaModel, tokenizer: Any, max_waiting: int = 1024, **kwargs: int
) -> Iterator[GenerationEngine]:
    settings = {
        "max_running": 8,
        "max_step_tokens": 24,
        "block_tokens": 4,
        "total_blocks": 128,
        "max_model_len": 256,
        **kwargs,
    }
    engine = GenerationEngine(
        model,
        tokenizer,
        PolicyConfig(**settings),
        eos_ids=frozenset({EOS}),
        max_waiting=max_waiting,
    )
    engine.start()
    try:
        yield engine
    finally:
        engine.close()


def _submit(engine: GenerationEngine, prompt: list[int], **params: Any) -> Run:
    run = Run()
    run.handle = engine.submit(
        Generation(
            prompt,
            SamplingParams(**{"temperature": 0.0, **params}),
            run.respond,
            stream=True,
            on_token=run.ids.append,
        )
    )
    return run


def _hf_greedy(hf: Any, prompt: list[int], max_new: int) -> tuple[list[int], list[float]]:
    """HF's greedy ids alone (stopping at EOS like ours) and the top-2 gap at each step."""
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=EOS,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
    ids = out.sequences[0, len(prompt) :].tolist()
    gaps = [float((s[0].topk(2).values[0] - s[0].topk(2).values[1]).item()) for s in out.scores]
    return ids, gaps


def _compare(ours: list[int], want: list[int], gaps: list[float]) -> tuple[int, int]:
    """Assert equality up to the first near-tie; (tokens compared, tokens expected)."""
    for i, expected in enumerate(want):
        assert i < len(ours), f"ours stopped after {len(ours)} tokens, HF made {len(want)}"
        assert ours[i] == expected, f"token {i}: ours {ours[i]}, HF {expected} (gap {gaps[i]})"
        if gaps[i] < TIE_GAP:
            return i + 1, len(want)
    assert len(ours) == len(want), f"ours made {len(ours)} tokens, HF {len(want)}"
    return len(want), len(want)


def _prompts(count: int, seed: int, low: int = 2, high: int = 40) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 300) for _ in range(rng.randrange(low, high))] for _ in range(count)]


def test_continuous_batching_equals_each_sequence_alone(
    model: LlamaModel, tokenizer: Any, hf: Any
) -> None:
    prompts = _prompts(10, seed=1)
    lengths = [random.Random(i).randrange(4, 24) for i in range(len(prompts))]
    runs: list[Run] = []
    with _engine(model, tokenizer) as engine:
        # half at once, the rest while the first ones are decoding (joining a running batch)
        runs = [
            _submit(engine, p, max_tokens=n) for p, n in zip(prompts[:5], lengths, strict=False)
        ]
        assert runs[0].done.wait(WAIT_S) or runs[0].ids
        runs += [
            _submit(engine, p, max_tokens=n) for p, n in zip(prompts[5:], lengths[5:], strict=True)
        ]
        for run in runs:
            assert run.done.wait(WAIT_S)
        stats = engine.statistics()
        assert stats.kv_blocks_used == 0
        assert stats.running == 0
        assert stats.waiting == 0
        assert stats.finished_total == len(prompts)
        assert stats.ttft_count == len(prompts)
    compared = expected = 0
    for run, prompt, n in zip(runs, prompts, lengths, strict=True):
        assert run.error is None
        want, gaps = _hf_greedy(hf, prompt, n)
        done, total = _compare(run.ids, want, gaps)
        compared += done
        expected += total
        assert run.texts, "streamed text deltas"
    assert compared >= 0.9 * expected


def test_budget_holds_fifty_sequences_with_preemption(
    model: LlamaModel, tokenizer: Any, hf: Any
) -> None:
    prompts = _prompts(50, seed=2, high=20)
    lengths = [random.Random(100 + i).randrange(4, 30) for i in range(50)]
    peak = 0
    with _engine(model, tokenizer, total_blocks=24, max_running=10, max_step_tokens=32) as engine:
        runs = [
            _submit(engine, p, max_tokens=n, ignore_eos=True)
            for p, n in zip(prompts, lengths, strict=True)
        ]
        while not all(r.done.is_set() for r in runs):
            runs[-1].done.wait(0.01)
            stats = engine.statistics()
            peak = max(peak, stats.kv_blocks_used)
            assert stats.kv_blocks_used <= 24
        stats = engine.statistics()
        assert stats.kv_blocks_used == 0
        assert stats.preemptions_total > 0, "the small budget should force preemptions"
        assert stats.finished_total == 50
    assert peak > 0
    for run, n in zip(runs, lengths, strict=True):
        assert run.error is None
        assert len(run.ids) == n
    # preempted sequences were recomputed correctly: the first ones equal HF alone
    for run, prompt, n in list(zip(runs, prompts, lengths, strict=True))[:8]:
        want, gaps = _hf_greedy(hf, prompt, n)
        cut = next((i for i, t in enumerate(want) if t == EOS), None)  # HF stops at EOS
        _compare(run.ids[: len(want)], want, gaps)
        if cut is None:
            assert len(want) == n


def test_cancelling_frees_blocks_within_a_step(model: LlamaModel, tokenizer: Any) -> None:
    with _engine(model, tokenizer) as engine:
        long = _submit(engine, list(range(10, 30)), max_tokens=200, ignore_eos=True)
        other = _submit(engine, list(range(40, 50)), max_tokens=30, ignore_eos=True)
        deadline = threading.Event()
        while len(long.ids) < 3:
            deadline.wait(0.005)
        assert engine.statistics().kv_blocks_used > 0
        long.handle.cancel()
        assert long.done.wait(WAIT_S)
        assert len(long.ids) < 200
        assert other.done.wait(WAIT_S)
        assert other.error is None
        assert len(other.ids) == 30
        stats = engine.statistics()
        assert stats.cancelled_total == 1
        assert stats.kv_blocks_used == 0


def test_seeds_reproduce_whatever_the_batch(model: LlamaModel, tokenizer: Any) -> None:
    prompt = list(range(20, 32))
    sampled = {"temperature": 0.9, "top_p": 0.95, "max_tokens": 20, "ignore_eos": True}
    with _engine(model, tokenizer) as engine:
        alone = _submit(engine, prompt, seed=7, **sampled)
        assert alone.done.wait(WAIT_S)
        crowd = [_submit(engine, p, **sampled) for p in _prompts(6, seed=5)]
        again = _submit(engine, prompt, seed=7, **sampled)
        other = _submit(engine, prompt, seed=8, **sampled)
        for run in (*crowd, again, other):
            assert run.done.wait(WAIT_S)
    assert again.ids == alone.ids
    assert other.ids != alone.ids


def test_a_request_too_long_is_refused_and_others_run(model: LlamaModel, tokenizer: Any) -> None:
    with _engine(model, tokenizer, max_model_len=64, total_blocks=8) as engine:
        ok = _submit(engine, [5, 6, 7], max_tokens=5, ignore_eos=True)
        with pytest.raises(InvalidArgumentError, match="max_model_len of 64"):
            _submit(engine, list(range(3, 63)), max_tokens=10)
        with pytest.raises(InvalidArgumentError, match="more than the KV cache holds"):
            _submit(engine, list(range(3, 40)), max_tokens=10)
        with pytest.raises(InvalidArgumentError, match="prompt is empty"):
            _submit(engine, [], max_tokens=10)
        assert ok.done.wait(WAIT_S)
        assert ok.error is None
        assert len(ok.ids) == 5


def test_whole_answer_and_stream_carry_the_same_text(model: LlamaModel, tokenizer: Any) -> None:
    prompt = tokenizer.encode("hello world, hello server").ids
    with _engine(model, tokenizer) as engine:
        streamed = _submit(engine, prompt, max_tokens=12)
        whole = Run()
        engine.submit(
            Generation(
                prompt,
                SamplingParams(temperature=0.0, max_tokens=12),
                whole.respond,
                stream=False,
                prefix="PROMPT:",
            )
        )
        assert streamed.done.wait(WAIT_S)
        assert whole.done.wait(WAIT_S)
    assert len(whole.texts) == 1
    assert whole.texts[0] == "PROMPT:" + "".join(streamed.texts)


def test_the_waiting_queue_is_bounded(model: LlamaModel, tokenizer: Any) -> None:
    with _engine(model, tokenizer, max_waiting=2, max_running=1) as engine:
        running = _submit(engine, [5, 6, 7], max_tokens=200, ignore_eos=True)
        pause = threading.Event()
        while not running.ids:  # admitted: it no longer waits
            pause.wait(0.005)
        queued = [_submit(engine, [8, 9], max_tokens=4) for _ in range(2)]
        with pytest.raises(OverloadedError, match=r"2 requests already wait .*max_waiting"):
            _submit(engine, [10, 11], max_tokens=4)
        running.handle.cancel()
        for run in queued:
            assert run.done.wait(WAIT_S)
            assert run.error is None
        assert engine.statistics().waiting == 0
