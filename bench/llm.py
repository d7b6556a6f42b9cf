"""The generation runtime's continuous batching against request-level batching, one request at a
time and Hugging Face ``generate()``, in one run on one machine, in process (no server, no
network).

A Llama of the example model's shape (``tiny_llm``: 4 layers, hidden 256, 4 heads, 2 KV heads,
vocabulary 2048; random weights: speed does not depend on them) is written in Hugging Face
format and read by all columns. The workload is fixed by a seed: ``--streams`` clients, each
sending ``--requests`` requests one after the other (a closed loop: the next when the previous
one finished). Prompts have mixed lengths (uniform in ``--prompt MIN:MAX`` tokens) and so do the
answers (each generates exactly its own count, uniform in ``--tokens MIN:MAX``; greedy, EOS
ignored), so every column computes the same work:

- ``continuous``: the engine, every client's request submitted as it comes (continuous
  batching: a request joins the running batch at the next step);
- ``request batch``: the same engine admitting whole requests only: a dispatcher takes what
  waits (up to ``--streams``), submits it as one batch and admits nothing until all of it
  finished (how request-level dynamic batching serves generation);
- ``HF request batch``: request-level batching as a Python backend does it: the waiting
  requests left-padded into one Hugging Face ``generate()`` call that runs for the longest
  answer of the batch;
- ``one at a time``: one client sending every request in turn to the engine;
- ``HF generate``: ``model.generate(do_sample=False)`` of each request alone.

It prints output tokens per second over the whole wall time, the time to first token (p50,
p99; measured from when the client sent the request), the process's CPU time per output token
and the ratios (of wall-time rates, then of CPU time per token: on a machine that other work
loads, the CPU time a column costs moves less than its wall time), for ``--rounds`` rounds
(medians). The engine's KV blocks in use are sampled at every step and must stay within its
budget. Then ``--overload`` requests (default 200) are submitted at once to an engine whose KV
budget holds ``--streams`` sequences of the longest shape: every one must finish without an
error (the scheduler queues and preempts; nothing runs over the budget). Threads: the engine
thread and HF use ``--threads`` intra-op threads each.

    python bench/llm.py [--streams 16] [--requests 4] [--prompt 8:96] [--tokens 16:128]
                        [--rounds 3] [--threads 2] [--overload 200] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import queue
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inferd.backends.llm.engine import Generation, GenerationEngine
from inferd.backends.llm.model import KVCache, LlamaModel, StepSequence
from inferd.backends.llm.params import SamplingParams
from inferd.backends.llm.policy import PolicyConfig, blocks_for

BLOCK = 16


#: model shapes (Llama architecture, random weights): ``tiny`` is the bundled example's, whose
#: steps cost mostly fixed per-operation overhead; ``small`` is GPT-2-small sized (12 layers,
#: hidden 768, 95 M parameters), whose one-sequence decode step reads more weight bytes than
#: the caches hold, as larger models do
SHAPES: dict[str, dict[str, int]] = {
    "tiny": {
        "vocab_size": 2048,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
    "small": {
        "vocab_size": 8192,
        "hidden_size": 768,
        "intermediate_size": 2048,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
    },
}


def write_model(folder: Path, shape: str = "tiny") -> Path:
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
        **SHAPES[shape],
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _span(text: str) -> tuple[int, int]:
    low, _, high = text.partition(":")
    return int(low), int(high or low)


@dataclass(frozen=True)
class Job:
    prompt: list[int]
    tokens: int


def workload(
    clients: int, per_client: int, prompt: tuple[int, int], tokens: tuple[int, int]
) -> list[list[Job]]:
    """Each client's requests, fixed by a seed."""
    rng = random.Random(1)
    return [
        [
            Job(
                [rng.randrange(3, 2048) for _ in range(rng.randint(*prompt))],
                rng.randint(*tokens),
            )
            for _ in range(per_client)
        ]
        for _ in range(clients)
    ]


class _Request:
    def __init__(self, job: Job) -> None:
        self.job = job
        self.sent = time.perf_counter()
        self.first = 0.0
        self.tokens = 0
        self.error: str | None = None
        self.done = threading.Event()

    def on_token(self, _token: int) -> None:
        if not self.tokens:
            self.first = time.perf_counter()
        self.tokens += 1

    def respond(self, text: str | None, error: Any, final: bool) -> None:
        if error is not None:
            self.error = str(error)
        if final:
            self.done.set()


def _submit(engine: GenerationEngine, request: _Request) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=request.job.tokens, ignore_eos=True)
    engine.submit(
        Generation(
            request.job.prompt, params, request.respond, stream=True, on_token=request.on_token
        )
    )


Serve = Callable[["queue.Queue[_Request]", threading.Event], None]


def closed_loop(jobs: list[list[Job]], serve: Serve) -> tuple[float, list[float], float]:
    """Each client sends its jobs in turn, the next when the previous finished; ``serve`` takes
    requests from the queue (until the event is set). Output tokens/s, TTFTs, and the process's
    CPU seconds per output token (what the run cost, whatever else loads the machine)."""
    inbox: queue.Queue[_Request] = queue.Queue()
    stop = threading.Event()
    server = threading.Thread(target=serve, args=(inbox, stop), daemon=True)
    server.start()
    finished: list[_Request] = []
    lock = threading.Lock()

    def client(mine: list[Job]) -> None:
        for job in mine:
            request = _Request(job)
            inbox.put(request)
            if not request.done.wait(600):
                raise RuntimeError("a request did not finish in 600 s")
            with lock:
                finished.append(request)

    start = time.perf_counter()
    cpu_start = time.process_time()
    threads = [threading.Thread(target=client, args=(mine,)) for mine in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    stop.set()
    server.join()
    for r in finished:
        if r.error is not None or r.tokens != r.job.tokens:
            raise RuntimeError(f"a request failed: {r.error} ({r.tokens}/{r.job.tokens} tokens)")
    tokens = sum(r.tokens for r in finished)
    return tokens / wall, [r.first - r.sent for r in finished], cpu / tokens


def _take(inbox: queue.Queue[_Request], stop: threading.Event) -> _Request | None:
    while not stop.is_set():
        try:
            return inbox.get(timeout=0.05)
        except queue.Empty:
            continue
    return None


def continuous(engine: GenerationEngine) -> Serve:
    def serve(inbox: queue.Queue[_Request], stop: threading.Event) -> None:
        while (request := _take(inbox, stop)) is not None:
            _submit(engine, request)

    return serve


def _batch(inbox: queue.Queue[_Request], stop: threading.Event, size: int) -> list[_Request]:
    first = _take(inbox, stop)
    if first is None:
        return []
    batch = [first]
    while len(batch) < size:
        try:
            batch.append(inbox.get_nowait())
        except queue.Empty:
            break
    return batch


def request_batches(engine: GenerationEngine, size: int) -> Serve:
    def serve(inbox: queue.Queue[_Request], stop: threading.Event) -> None:
        while batch := _batch(inbox, stop, size):
            for request in batch:
                _submit(engine, request)
            for request in batch:
                request.done.wait()

    return serve


class _FirstToken:
    """A ``generate()`` streamer noting when the first generated token came out."""

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


def hf_batches(hf: Any, size: int, device: str) -> Serve:
    def serve(inbox: queue.Queue[_Request], stop: threading.Event) -> None:
        while batch := _batch(inbox, stop, size):
            longest = max(len(r.job.prompt) for r in batch)
            ids = torch.zeros((len(batch), longest), dtype=torch.int64)
            mask = torch.zeros((len(batch), longest), dtype=torch.int64)
            for row, r in enumerate(batch):  # left padding
                ids[row, longest - len(r.job.prompt) :] = torch.tensor(r.job.prompt)
                mask[row, longest - len(r.job.prompt) :] = 1
            most = max(r.job.tokens for r in batch)
            streamer = _FirstToken()
            with torch.no_grad():
                out = hf.generate(
                    ids.to(device),
                    attention_mask=mask.to(device),
                    do_sample=False,
                    max_new_tokens=most,
                    min_new_tokens=most,
                    pad_token_id=0,
                    streamer=streamer,
                )
            assert out.shape[1] == longest + most
            for r in batch:  # each answer is its own first tokens of the batch's run
                r.first = streamer.first
                r.tokens = r.job.tokens
                r.done.set()

    return serve


def hf_alone(hf: Any, device: str) -> Serve:
    def serve(inbox: queue.Queue[_Request], stop: threading.Event) -> None:
        while (r := _take(inbox, stop)) is not None:
            streamer = _FirstToken()
            with torch.no_grad():
                out = hf.generate(
                    torch.tensor([r.job.prompt], device=device),
                    attention_mask=torch.ones(
                        1, len(r.job.prompt), dtype=torch.int64, device=device
                    ),
                    do_sample=False,
                    max_new_tokens=r.job.tokens,
                    min_new_tokens=r.job.tokens,
                    pad_token_id=0,
                    streamer=streamer,
                )
            assert out.shape[1] == len(r.job.prompt) + r.job.tokens
            r.first = streamer.first
            r.tokens = r.job.tokens
            r.done.set()

    return serve


class KvWatch:
    """Samples the engine's KV blocks in use at every forward pass (wraps ``model.step``)."""

    def __init__(self, engine: GenerationEngine) -> None:
        self.engine = engine
        self.peak = 0
        self.steps = 0
        step = engine.model.step

        def sampled(seqs: Sequence[StepSequence], cache: KVCache) -> torch.Tensor:
            used = engine.kv_blocks_used
            self.peak = max(self.peak, used)
            self.steps += 1
            if used > engine.cfg.total_blocks:
                raise RuntimeError(f"KV blocks in use {used} > budget {engine.cfg.total_blocks}")
            return step(seqs, cache)

        engine.model.step = sampled  # type: ignore[method-assign]


def make_engine(
    model: LlamaModel, tokenizer: Any, running: int, blocks: int, threads: int, step_tokens: int
) -> tuple[GenerationEngine, KvWatch]:
    cfg = PolicyConfig(
        max_running=running,
        max_step_tokens=step_tokens,
        block_tokens=BLOCK,
        total_blocks=blocks,
        max_model_len=512,
    )
    engine = GenerationEngine(
        model, tokenizer, cfg, eos_ids=frozenset({2}), threads=threads, name="bench"
    )
    watch = KvWatch(engine)
    engine.start()
    return engine, watch


def overload(
    model: LlamaModel, tokenizer: Any, args: argparse.Namespace, jobs: list[Job], blocks: int
) -> None:
    """``--overload`` requests at once against a KV budget for ``--streams`` sequences."""
    engine, watch = make_engine(model, tokenizer, args.overload, blocks, args.threads, 256)
    requests = [_Request(jobs[i % len(jobs)]) for i in range(args.overload)]
    start = time.perf_counter()
    for r in requests:
        _submit(engine, r)
    for r in requests:
        if not r.done.wait(600):
            raise RuntimeError("an overload request did not finish in 600 s")
    wall = time.perf_counter() - start
    stats = engine.statistics()
    engine.close()
    errors = [r.error for r in requests if r.error is not None]
    short = [r for r in requests if r.tokens != r.job.tokens]
    print(
        f"overload: {args.overload} requests at once, max_running {args.overload}, KV budget "
        f"{blocks} blocks ({args.streams} sequences of the longest shape): "
        f"{len(requests) - len(errors)} finished, {len(errors)} errors, {len(short)} short; "
        f"{sum(r.tokens for r in requests) / wall:.0f} tokens/s; "
        f"{stats.preemptions_total} preemptions; peak KV {watch.peak}/{blocks} blocks "
        f"over {watch.steps} steps"
    )
    if errors or short:
        raise RuntimeError(f"overload: {len(errors)} errors ({errors[:1]}), {len(short)} short")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=16, help="concurrent clients")
    parser.add_argument("--requests", type=int, default=4, help="requests per client")
    parser.add_argument("--prompt", default="8:96", help="prompt tokens, MIN:MAX")
    parser.add_argument("--tokens", default="16:128", help="generated tokens, MIN:MAX")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--step-tokens", type=int, default=0, help="max_step_tokens (0: default)")
    parser.add_argument("--overload", type=int, default=200, help="0 to skip")
    parser.add_argument("--skip-hf", action="store_true", help="leave out the HF columns")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="tiny",
        help="model shape: tiny (the example's, default) or small (GPT-2-small sized)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        folder = write_model(Path(tmp) / "m", args.shape)
        model = LlamaModel.load(folder, dtype=torch.float32, device=args.device)
        hf = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).to(args.device).eval()
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    prompt, tokens = _span(args.prompt), _span(args.tokens)
    jobs = workload(args.streams, args.requests, prompt, tokens)
    blocks = args.streams * blocks_for(prompt[1] + tokens[1], BLOCK)
    step_tokens = args.step_tokens or max(256, args.streams)
    engine, watch = make_engine(model, tokenizer, args.streams, blocks, args.threads, step_tokens)
    closed_loop([[Job([5, 6, 7], 4)] * 2] * 2, continuous(engine))  # warm-up
    columns: dict[str, tuple[Callable[[], Serve], int]] = {
        "continuous": (lambda: continuous(engine), args.streams),
        "request batch": (lambda: request_batches(engine, args.streams), args.streams),
        "HF request batch": (lambda: hf_batches(hf, args.streams, args.device), args.streams),
        "one at a time": (lambda: continuous(engine), 1),
        "HF generate": (lambda: hf_alone(hf, args.device), 1),
    }
    if args.skip_hf:
        columns = {k: v for k, v in columns.items() if not k.startswith("HF")}
    results: dict[str, list[tuple[float, list[float], float]]] = {name: [] for name in columns}
    for _ in range(args.rounds):
        for name, (serve, clients) in columns.items():
            mine = jobs if clients > 1 else [[j for client in jobs for j in client]]
            results[name].append(closed_loop(mine, serve()))
    engine.close()
    print(
        f"{args.shape} model, {args.streams} clients x {args.requests} requests, prompts "
        f"{prompt[0]}..{prompt[1]} tokens, answers {tokens[0]}..{tokens[1]} tokens, "
        f"{args.device}, {args.threads} threads, max_step_tokens {step_tokens}, "
        f"torch {torch.__version__}, {args.rounds} rounds (medians)"
    )
    print(f"{'':18}{'tokens/s':>10}{'TTFT p50 ms':>14}{'TTFT p99 ms':>14}{'CPU ms/token':>14}")
    rates, p50s, cpus = {}, {}, {}
    for name, rounds in results.items():
        rates[name] = statistics.median(r for r, _, _ in rounds)
        p50s[name] = statistics.median(_pct(t, 0.5) for _, t, _ in rounds) * 1e3
        p99 = statistics.median(_pct(t, 0.99) for _, t, _ in rounds) * 1e3
        cpus[name] = statistics.median(c for _, _, c in rounds) * 1e3
        print(f"{name:18}{rates[name]:10.0f}{p50s[name]:14.1f}{p99:14.1f}{cpus[name]:14.3f}")
    c = rates["continuous"]
    line = [
        f"continuous / request batch {c / rates['request batch']:.2f}x",
        f"continuous / one at a time {c / rates['one at a time']:.2f}x",
        f"TTFT p50 continuous / one at a time {p50s['continuous'] / p50s['one at a time']:.2f}x",
    ]
    if not args.skip_hf:
        line += [
            f"continuous / HF request batch {c / rates['HF request batch']:.2f}x",
            f"one at a time / HF generate {rates['one at a time'] / rates['HF generate']:.2f}x",
        ]
    print("; ".join(line))
    # the same ratios from CPU time per token: what each column costs, steadier than wall time
    # on a machine that other work loads (the columns' wall time moves with that work)
    others = [n for n in ("request batch", "one at a time", "HF request batch") if n in cpus]
    print(
        "by CPU time per token: "
        + "; ".join(f"continuous / {n} {cpus[n] / cpus['continuous']:.2f}x" for n in others)
        + (
            f"; one at a time / HF generate {cpus['HF generate'] / cpus['one at a time']:.2f}x"
            if "HF generate" in cpus
            else ""
        )
    )
    print(f"KV: peak {watch.peak}/{blocks} blocks in use over {watch.steps} sampled steps")
    if args.overload:
        overload(model, tokenizer, args, [j for client in jobs for j in client], blocks)


if __name__ == "__main__":
    main()
