"""The generation runtime's continuous batching against one stream at a time and against Hugging
Face ``generate()``, in one run on one machine, in process (no server, no network).

A Llama of the example model's shape (``tiny_llm``: 4 layers, hidden 256, 4 heads, 2 KV heads,
vocabulary 2048; random weights: speed does not depend on them) is written in Hugging Face
format and read by both. Every request has a prompt of ``--prompt`` tokens and generates exactly
``--tokens`` tokens (greedy, EOS ignored), so all three columns compute the same work:

- ``batched``: ``--streams`` requests submitted at once to the engine (continuous batching);
- ``one at a time``: the same requests, each submitted when the previous one finished;
- ``HF generate``: ``model.generate(do_sample=False)`` of each request alone, with its KV cache
  (TTFT measured with a streamer).

It prints generated tokens per second over the whole wall time, the time to first token (p50,
p99) and the ratios, for ``--rounds`` rounds (medians). Threads: the engine thread and HF use
``--threads`` intra-op threads each.

    python bench/llm.py [--streams 16] [--prompt 32] [--tokens 64] [--rounds 3] [--threads 2]
                        [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from inferd.backends.llm.engine import Generation, GenerationEngine
from inferd.backends.llm.model import LlamaModel
from inferd.backends.llm.params import SamplingParams
from inferd.backends.llm.policy import PolicyConfig


def write_model(folder: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, show_progress=False)
    tokenizer.train_from_iterator(["hello world"] * 10, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Request:
    def __init__(self) -> None:
        self.start = 0.0
        self.first = 0.0
        self.tokens = 0
        self.done = threading.Event()

    def on_token(self, _token: int) -> None:
        if not self.tokens:
            self.first = time.perf_counter()
        self.tokens += 1

    def respond(self, text: str | None, error: Any, final: bool) -> None:
        if error is not None:
            raise RuntimeError(str(error))
        if final:
            self.done.set()


def _submit(engine: GenerationEngine, prompt: list[int], tokens: int) -> _Request:
    request = _Request()
    request.start = time.perf_counter()
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    engine.submit(
        Generation(prompt, params, request.respond, stream=True, on_token=request.on_token)
    )
    return request


def run_engine(
    engine: GenerationEngine, prompts: list[list[int]], tokens: int, concurrent: bool
) -> tuple[float, list[float]]:
    start = time.perf_counter()
    requests = []
    if concurrent:
        requests = [_submit(engine, p, tokens) for p in prompts]
        for r in requests:
            r.done.wait()
    else:
        for p in prompts:
            r = _submit(engine, p, tokens)
            r.done.wait()
            requests.append(r)
    wall = time.perf_counter() - start
    assert all(r.tokens == tokens for r in requests)
    return len(prompts) * tokens / wall, [r.first - r.start for r in requests]


def run_hf(
    hf: Any, prompts: list[list[int]], tokens: int, device: str
) -> tuple[float, list[float]]:
    from transformers.generation.streamers import BaseStreamer

    class First(BaseStreamer):  # type: ignore[misc]
        def __init__(self) -> None:
            self.calls = 0
            self.first = 0.0

        def put(self, value: Any) -> None:
            self.calls += 1
            if self.calls == 2:  # the first put is the prompt
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                self.first = time.perf_counter()

        def end(self) -> None:
            pass

    ttft = []
    start = time.perf_counter()
    for prompt in prompts:
        streamer = First()
        began = time.perf_counter()
        with torch.no_grad():
            out = hf.generate(
                torch.tensor([prompt], device=device),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.int64, device=device),
                do_sample=False,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                pad_token_id=0,
                streamer=streamer,
            )
        assert out.shape[1] == len(prompt) + tokens
        ttft.append(streamer.first - began)
    wall = time.perf_counter() - start
    return len(prompts) * tokens / wall, ttft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        folder = write_model(Path(tmp) / "m")
        model = LlamaModel.load(folder, dtype=torch.float32, device=args.device)
        hf = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).to(args.device).eval()
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    cfg = PolicyConfig(
        max_running=args.streams,
        max_step_tokens=max(256, args.streams),
        block_tokens=16,
        total_blocks=args.streams * (-(-(args.prompt + args.tokens) // 16)),
        max_model_len=512,
    )
    engine = GenerationEngine(
        model, tokenizer, cfg, eos_ids=frozenset({2}), threads=args.threads, name="bench"
    )
    engine.start()
    g = torch.Generator().manual_seed(1)
    prompts = [
        torch.randint(3, 2048, (args.prompt,), generator=g).tolist() for _ in range(args.streams)
    ]
    run_engine(engine, prompts[:2], 4, True)  # warm-up
    columns: dict[str, list[tuple[float, list[float]]]] = {
        "batched": [],
        "one at a time": [],
        "HF generate": [],
    }
    for _ in range(args.rounds):
        columns["batched"].append(run_engine(engine, prompts, args.tokens, True))
        columns["one at a time"].append(run_engine(engine, prompts, args.tokens, False))
        columns["HF generate"].append(run_hf(hf, prompts, args.tokens, args.device))
    engine.close()
    print(
        f"{args.streams} requests x {args.prompt} prompt tokens -> {args.tokens} tokens, "
        f"{args.device}, {args.threads} threads, torch {torch.__version__}, "
        f"{args.rounds} rounds (medians)"
    )
    print(f"{'':16}{'tokens/s':>10}{'TTFT p50 ms':>14}{'TTFT p99 ms':>14}")
    rates = {}
    for name, rounds in columns.items():
        rate = statistics.median(r for r, _ in rounds)
        p50 = statistics.median(_pct(t, 0.5) for _, t in rounds) * 1e3
        p99 = statistics.median(_pct(t, 0.99) for _, t in rounds) * 1e3
        rates[name] = rate
        print(f"{name:16}{rate:10.0f}{p50:14.1f}{p99:14.1f}")
    print(
        f"batched / one at a time: {rates['batched'] / rates['one at a time']:.2f}x; "
        f"batched / HF generate: {rates['batched'] / rates['HF generate']:.2f}x; "
        f"one at a time / HF generate: {rates['one at a time'] / rates['HF generate']:.2f}x"
    )


if __name__ == "__main__":
    main()
