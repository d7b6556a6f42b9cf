"""Prefix reuse in the generation runtime's KV cache, on against off, in one run, in process.

A Llama of the example model's shape (4 layers, hidden 256, 4 heads, 2 KV heads, vocabulary
2048; random weights: speed does not depend on them) is served by two engines with the same
limits, one with ``enable_prefix_caching`` on and one with it off. ``--streams`` clients each
send ``--requests`` requests one after the other (a closed loop). Two workloads, fixed by a
seed:

- ``shared``: every prompt is one system prompt of ``--system`` tokens followed by a short
  question of its own (``--question MIN:MAX`` tokens), as chat requests with one system prompt
  are. Each round draws a new system prompt, so every round starts with a cold cache and the
  first requests compute it;
- ``distinct``: prompts of the same lengths with no common head (what the cache costs when it
  never hits).

Answers are ``--tokens MIN:MAX`` tokens (greedy, EOS ignored), so both engines compute the same
answers. Each round runs every (workload, engine) pair, the engines' order alternating between
rounds; it prints output tokens per second over the wall time, the time to first token (p50,
p99, from when the client sent the request), the share of prompt tokens found cached, and the
on/off ratios (medians over ``--rounds``) with the spread of the ratio across rounds. It also
prints the process's CPU seconds per run (every thread: the engine's, torch's intra-op threads
and the clients'), a figure that moves far less than wall time on a machine shared with other
work.

    python bench/llm_prefix.py [--streams 16] [--requests 4] [--system 256] [--question 8:24]
                               [--tokens 16:48] [--rounds 5] [--threads 2] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from llm import _pct, _Request, _span, write_model  # bench/llm.py: the same model, the same helpers

from inferd.backends.llm.engine import Generation, GenerationEngine
from inferd.backends.llm.model import LlamaModel
from inferd.backends.llm.params import SamplingParams
from inferd.backends.llm.policy import PolicyConfig, blocks_for

BLOCK = 16
MAX_LEN = 512


@dataclass(frozen=True)
class Job:
    prompt: list[int]
    tokens: int


def workload(args: argparse.Namespace, shared: bool, seed: int) -> list[list[Job]]:
    """Each client's requests: the system prompt (or a distinct head) and a question."""
    rng = random.Random(seed)
    question, tokens = _span(args.question), _span(args.tokens)
    system = [rng.randrange(3, 2048) for _ in range(args.system)]

    def head() -> list[int]:
        return system if shared else [rng.randrange(3, 2048) for _ in range(args.system)]

    return [
        [
            Job(
                [1, *head(), *(rng.randrange(3, 2048) for _ in range(rng.randint(*question)))],
                rng.randint(*tokens),
            )
            for _ in range(args.requests)
        ]
        for _ in range(args.streams)
    ]


def closed_loop(
    engine: GenerationEngine, jobs: list[list[Job]]
) -> tuple[float, list[float], float]:
    """Each client sends its jobs in turn; output tokens/s over the wall time, TTFTs, and the
    process's CPU seconds."""
    finished: list[_Request] = []
    lock = threading.Lock()

    def client(mine: list[Job]) -> None:
        for job in mine:
            request = _Request(job)
            params = SamplingParams(temperature=0.0, max_tokens=job.tokens, ignore_eos=True)
            engine.submit(
                Generation(
                    job.prompt, params, request.respond, stream=True, on_token=request.on_token
                )
            )
            if not request.done.wait(600):
                raise RuntimeError("a request did not finish in 600 s")
            with lock:
                finished.append(request)

    start, cpu = time.perf_counter(), time.process_time()
    threads = [threading.Thread(target=client, args=(mine,)) for mine in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    for r in finished:
        if r.error is not None or r.tokens != r.job.tokens:
            raise RuntimeError(f"a request failed: {r.error} ({r.tokens}/{r.job.tokens} tokens)")
    return sum(r.tokens for r in finished) / wall, [r.first - r.sent for r in finished], cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=16, help="concurrent clients")
    parser.add_argument("--requests", type=int, default=4, help="requests per client")
    parser.add_argument("--system", type=int, default=256, help="system prompt tokens")
    parser.add_argument("--question", default="8:24", help="question tokens, MIN:MAX")
    parser.add_argument("--tokens", default="16:48", help="generated tokens, MIN:MAX")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        folder = write_model(Path(tmp) / "m")
        model = LlamaModel.load(folder, dtype=torch.float32, device=args.device)
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    longest = 1 + args.system + _span(args.question)[1] + _span(args.tokens)[1]
    if longest > MAX_LEN:
        parser.error(f"a request reaches {longest} tokens, over the model's {MAX_LEN}")
    cfg = PolicyConfig(
        max_running=args.streams,
        max_step_tokens=max(256, args.streams),
        block_tokens=BLOCK,
        total_blocks=args.streams * blocks_for(longest, BLOCK),
        max_model_len=MAX_LEN,
    )
    engines = {
        caching: GenerationEngine(
            model,
            tokenizer,
            cfg,
            eos_ids=frozenset({2}),
            threads=args.threads,
            name="bench",
            prefix_caching=caching,
        )
        for caching in (True, False)
    }
    for engine in engines.values():
        engine.start()
        closed_loop(engine, [[Job([5, 6, 7], 4)] * 2] * 2)  # warm-up
    names = {True: "on", False: "off"}
    results: dict[tuple[str, bool], list[tuple[float, list[float], float, float]]] = {}
    for index in range(args.rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        for kind in ("shared", "distinct"):
            jobs = workload(args, kind == "shared", seed=1000 * index + (kind == "shared"))
            for caching in order:
                engine = engines[caching]
                before = engine.statistics()
                rate, ttft, cpu = closed_loop(engine, jobs)
                after = engine.statistics()
                queried = after.prefix_cache_queried_tokens_total
                queried -= before.prefix_cache_queried_tokens_total
                hit = after.prefix_cache_hit_tokens_total - before.prefix_cache_hit_tokens_total
                share = hit / queried if queried else 0.0
                results.setdefault((kind, caching), []).append((rate, ttft, share, cpu))
    for engine in engines.values():
        engine.close()
    print(
        f"{args.streams} clients x {args.requests} requests, system prompt {args.system} tokens "
        f"+ question {args.question} tokens, answers {args.tokens} tokens, block {BLOCK}, "
        f"{args.device}, {args.threads} threads, torch {torch.__version__}, {args.rounds} rounds "
        "(medians; on and off alternate within each round)"
    )
    print(
        f"{'':20}{'tokens/s':>10}{'TTFT p50 ms':>14}{'TTFT p99 ms':>14}{'cached prompt':>15}"
        f"{'CPU s':>8}"
    )
    for kind in ("shared", "distinct"):
        for caching in (True, False):
            rounds = results[(kind, caching)]
            rate = statistics.median(r[0] for r in rounds)
            p50 = statistics.median(_pct(r[1], 0.5) for r in rounds) * 1e3
            p99 = statistics.median(_pct(r[1], 0.99) for r in rounds) * 1e3
            share = statistics.median(r[2] for r in rounds)
            cpu = statistics.median(r[3] for r in rounds)
            label = f"{kind}, cache {names[caching]}"
            print(f"{label:20}{rate:10.0f}{p50:14.1f}{p99:14.1f}{share:14.0%}{cpu:9.2f}")
    for kind in ("shared", "distinct"):
        on, off = results[(kind, True)], results[(kind, False)]
        rate_ratios = [a[0] / b[0] for a, b in zip(on, off, strict=True)]
        p50_ratios = [_pct(b[1], 0.5) / _pct(a[1], 0.5) for a, b in zip(on, off, strict=True)]
        cpu_ratios = [b[3] / a[3] for a, b in zip(on, off, strict=True)]

        def spread(ratios: list[float]) -> str:
            low, high = min(ratios), max(ratios)
            return f"{statistics.median(ratios):.2f}x (rounds {low:.2f}..{high:.2f})"

        print(
            f"{kind}: tokens/s on/off {spread(rate_ratios)}; TTFT p50 off/on "
            f"{spread(p50_ratios)}; CPU s off/on {spread(cpu_ratios)}"
        )


if __name__ == "__main__":
    main()
