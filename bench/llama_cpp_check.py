"""llama.cpp (GGUF, through ``llama-cpp-python``) against inferd's generation runtime on the CPU,
in one run, in process, the same threads: is a second path for GGUF files worth keeping?

The model is bench/llm.py's (``tiny_llm``'s shape with hidden 256, random weights) or, with
``--model tiny_llm``, the example model itself (``python -m inferd.examples.tiny_llm``). It is
written in Hugging Face format and converted to GGUF (f32, f16, q8_0) by llama.cpp's own
``convert_hf_to_gguf.py`` from ``--llama-cpp-dir`` (the ``vendor/llama.cpp`` folder of the
llama-cpp-python sdist: ``pip download --no-deps --no-binary :all: llama-cpp-python``; the
converter imports ``gguf`` and ``sentencepiece``). Both
models have a byte-level BPE tokenizer of their own, which the converter does not accept as it
is: it identifies a BPE pre-tokenizer by hashing the ids its vocabulary gives a fixed text and
looking the hash up in a table of known models, and a vocabulary trained here is in none. Their
pre-tokenizer is Hugging Face's plain ``ByteLevel`` (GPT-2's split), so the conversion is run
with that one case mapped to llama.cpp's ``gpt-2`` pre-tokenizer; the check below then compares
llama.cpp's tokenization and greedy tokens with inferd's.

Checks before timing (printed): llama.cpp's tokens of a few texts against ``tokenizers``'; the
greedy answer of each GGUF to one prompt against the inferd engine's (float32), as the length of
the common prefix.

Timing: bench/llm.py's workload (prompts 8-96 tokens, answers 16-128 tokens, greedy, EOS
ignored, fixed by a seed; the ids are given as ids, no text), ``--rounds`` rounds with the
columns alternating inside each round: medians of output tokens/s, TTFT and the process's CPU
seconds per 1000 output tokens (all its threads, the clients' included; what a column cost,
whatever else loads the machine, though a thread spinning at a barrier counts too), and each
round's llama.cpp rate over the same round's inferd rate (median and range). Columns:

- ``inferd``: the ``GenerationEngine`` (float32), as bench/llm.py's ``continuous``;
- ``llama.cpp <type>``: one ``Llama`` object and its ``generate()`` (greedy sampler), one
  sequence at a time: what llama-cpp-python's high-level API offers (its own server runs
  requests one after another under a lock); with 16 clients they are served one after another;
- ``llama.cpp <type> batched``: llama.cpp's own multi-sequence batching reached through
  llama-cpp-python's low-level bindings (``llama_batch`` with one ``seq_id`` per sequence,
  ``n_seq_max`` = streams), driven by a small continuous-batching loop in Python here (each step:
  one token for each decoding sequence, then prompt chunks up to ``--step-tokens``; greedy argmax
  of the logits row in NumPy); llama-cpp-python itself ships no such loop.

One stream is one client sending every request in turn; "16 streams" is ``--streams`` clients in
a closed loop (bench/llm.py's). Every column runs ``--threads`` threads.

    python bench/llama_cpp_check.py --llama-cpp-dir PATH/vendor/llama.cpp
        [--model bench|tiny_llm] [--tiny-llm DIR] [--types f32,f16,q8_0] [--streams 16]
        [--requests 4] [--rounds 3] [--threads 2] [--gguf-dir DIR] [--no-serial] [--no-one]
        [--no-batched]

``--gguf-dir`` keeps the GGUF files and reuses them by name (``<model>-<type>.gguf``).

Without ``llama_cpp`` importable it prints why and exits 0 (it is not a project dependency).
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Runs llama.cpp's converter with one change: a byte-level BPE tokenizer whose pre-tokenizer is
# Hugging Face's plain ByteLevel (GPT-2's regex split), unknown to the converter's hash table,
# is written as llama.cpp's "gpt-2" pre-tokenizer. Anything else it refuses stays refused.
_CONVERT = r"""
import json, runpy, sys
from pathlib import Path
src, model, outtype, out = sys.argv[1:5]
sys.path[:0] = [src, str(Path(src) / "gguf-py")]
from conversion import base
original = base.TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    try:
        return original(self, tokenizer)
    except NotImplementedError:
        pre = json.loads((Path(model) / "tokenizer.json").read_text())["pre_tokenizer"]
        if pre and pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
            print("pre-tokenizer: Hugging Face ByteLevel (GPT-2 split) -> gpt-2", file=sys.stderr)
            return "gpt-2"
        raise
base.TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = ["convert_hf_to_gguf.py", model, "--outtype", outtype, "--outfile", out]
runpy.run_path(str(Path(src) / "convert_hf_to_gguf.py"), run_name="__main__")
"""


def convert(llama_cpp_dir: Path, model: Path, outtype: str, out: Path) -> None:
    """The Hugging Face folder ``model`` to ``out`` (GGUF ``outtype``), by llama.cpp's converter."""
    if out.exists():
        return
    probe = [sys.executable, "-c", "import sentencepiece, gguf"]
    if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        raise SystemExit(
            "llama.cpp's converter imports gguf and sentencepiece: pip install gguf sentencepiece"
        )
    done = subprocess.run(
        [sys.executable, "-c", _CONVERT, str(llama_cpp_dir), str(model), outtype, str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"conversion to {outtype} failed:\n{done.stderr[-3000:]}")


def load_llama(path: Path, threads: int, n_ctx: int) -> Any:
    from llama_cpp import Llama

    return Llama(
        model_path=str(path),
        n_ctx=n_ctx,
        n_batch=256,
        n_ubatch=256,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )


def _greedy_llama(llm: Any, prompt: list[int], tokens: int) -> list[int]:
    out: list[int] = []
    for token in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, reset=True):
        out.append(int(token))
        if len(out) == tokens:
            break
    return out


def llama_serial(llm: Any, b: Any) -> Any:
    """A server of one ``Llama`` object: one request at a time, in arrival order."""

    def serve(inbox: queue.Queue[Any], stop: threading.Event) -> None:
        while (r := b._take(inbox, stop)) is not None:
            for token in llm.generate(
                r.job.prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, reset=True
            ):
                r.on_token(int(token))
                if r.tokens == r.job.tokens:
                    break
            r.done.set()

    return serve


class BatchedLlama:
    """llama.cpp's multi-sequence batching through the low-level bindings: one context with
    ``n_seq_max`` sequences (a KV slice of ``n_ctx / n_seq_max`` each), one ``llama_decode`` a
    step for every running sequence."""

    def __init__(self, path: Path, threads: int, seqs: int, seq_len: int, step: int) -> None:
        import llama_cpp as lc
        import numpy as np

        self.lc, self.np = lc, np
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = seqs * -(-seq_len // 256) * 256  # llama.cpp pads a slice to 256
        cparams.n_batch = step
        cparams.n_ubatch = step
        cparams.n_seq_max = seqs
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        self.ctx = lc.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))
        self.mem = lc.llama_get_memory(self.ctx)
        self.batch = lc.llama_batch_init(step, 0, 1)
        self.seqs, self.step = seqs, step

    def close(self) -> None:
        self.lc.llama_batch_free(self.batch)
        self.lc.llama_free(self.ctx)
        self.lc.llama_model_free(self.model)

    def serve(self, b: Any) -> Any:
        lc, np = self.lc, self.np

        def serve(inbox: queue.Queue[Any], stop: threading.Event) -> None:
            free = list(range(self.seqs))
            waiting: list[Any] = []
            # slot -> [request, tokens fed so far, next token to feed or None while prefilling]
            running: dict[int, list[Any]] = {}
            while not stop.is_set() or running or waiting:
                while True:
                    try:
                        waiting.append(inbox.get_nowait())
                    except queue.Empty:
                        break
                while waiting and free:
                    running[free.pop(0)] = [waiting.pop(0), 0, None]
                if not running:
                    if stop.is_set():
                        return
                    with contextlib.suppress(queue.Empty):
                        waiting.append(inbox.get(timeout=0.05))
                    continue
                rows: list[tuple[int, int]] = []  # (batch row, slot) whose logits are sampled
                n = 0
                batch = self.batch
                plan: list[tuple[int, list[int], int, bool]] = []
                for slot, state in running.items():  # decodes first
                    if state[2] is not None:
                        plan.append((slot, [state[2]], state[1], True))
                budget = self.step - len(plan)
                for slot, state in running.items():  # then prompt chunks
                    if state[2] is None and budget > 0:
                        prompt = state[0].job.prompt
                        chunk = prompt[state[1] : state[1] + budget]
                        budget -= len(chunk)
                        plan.append((slot, chunk, state[1], state[1] + len(chunk) == len(prompt)))
                for slot, tokens, pos, last in plan:
                    for i, token in enumerate(tokens):
                        batch.token[n] = token
                        batch.pos[n] = pos + i
                        batch.n_seq_id[n] = 1
                        batch.seq_id[n][0] = slot
                        batch.logits[n] = last and i == len(tokens) - 1
                        n += 1
                    running[slot][1] += len(tokens)
                    if last:
                        rows.append((n - 1, slot))
                batch.n_tokens = n
                if lc.llama_decode(self.ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed")
                for row, slot in rows:
                    logits = np.ctypeslib.as_array(
                        lc.llama_get_logits_ith(self.ctx, row), shape=(self.n_vocab,)
                    )
                    token = int(logits.argmax())
                    state = running[slot]
                    state[0].on_token(token)
                    state[2] = token
                    if state[0].tokens == state[0].job.tokens:
                        lc.llama_memory_seq_rm(self.mem, slot, -1, -1)
                        state[0].done.set()
                        del running[slot]
                        free.append(slot)

        return serve


def tokenizer_check(llm: Any, folder: Path) -> str:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    texts = [
        "The server batches requests for each model.",
        "  two spaces, tabs\tand new\nlines; numbers 12345 and 3.14!",
        "A model's version folder holds config.json — and UTF-8: é, 日本, 🚀.",
        "<|user|>\nHello<|end|>\n<|assistant|>\n",
    ]
    same = 0
    for text in texts:
        theirs = llm.tokenize(text.encode(), add_bos=False, special=True)
        ours = tokenizer.encode(text, add_special_tokens=False).ids
        same += theirs == ours
    return f"{same}/{len(texts)} texts tokenized alike"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-cpp-dir", type=Path, help="llama.cpp's source (the converter)")
    parser.add_argument("--model", choices=["bench", "tiny_llm"], default="bench")
    parser.add_argument("--tiny-llm", type=Path, help="a built tiny_llm model folder (its 1/)")
    parser.add_argument("--types", default="f32,f16,q8_0", help="GGUF types to time")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--prompt", default="8:96")
    parser.add_argument("--tokens", default="16:128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--step-tokens", type=int, default=256)
    parser.add_argument("--gguf-dir", type=Path, help="keep the GGUF files here (reused)")
    parser.add_argument("--no-batched", action="store_true", help="leave out the batched columns")
    parser.add_argument(
        "--no-serial", action="store_true", help="leave out the one-Llama columns at --streams"
    )
    parser.add_argument("--no-one", action="store_true", help="leave out the one-stream rows")
    args = parser.parse_args()
    try:
        import llama_cpp
    except ImportError as exc:
        print(
            f"skipped: llama_cpp is not importable ({exc}); it is not a project dependency: "
            "pip install llama-cpp-python (built from source) to run this check"
        )
        return
    if args.llama_cpp_dir is None or not (args.llama_cpp_dir / "convert_hf_to_gguf.py").is_file():
        raise SystemExit("--llama-cpp-dir must name llama.cpp's source (convert_hf_to_gguf.py)")
    import llm as b
    import torch
    from tokenizers import Tokenizer

    from inferd.backends.llm.model import LlamaModel
    from inferd.backends.llm.policy import blocks_for

    torch.set_num_threads(args.threads)
    types = [t for t in args.types.split(",") if t]
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "bench":
            folder = b.write_model(Path(tmp) / "m")
        else:
            if args.tiny_llm is None:
                raise SystemExit("--model tiny_llm needs --tiny-llm DIR (tiny_llm/1)")
            folder = args.tiny_llm
        out = args.gguf_dir or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        files = {t: out / f"{args.model}-{t}.gguf" for t in types}
        for t, path in files.items():
            start = time.perf_counter()
            convert(args.llama_cpp_dir, folder, t, path)
            took = time.perf_counter() - start
            print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB (converted in {took:.1f} s)")
        model = LlamaModel.load(folder, dtype=torch.float32, device="cpu")
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        prompt, tokens = b._span(args.prompt), b._span(args.tokens)
        seq_len = prompt[1] + tokens[1]
        jobs = b.workload(args.streams, args.requests, prompt, tokens)
        blocks = args.streams * blocks_for(seq_len, b.BLOCK)
        engine, _ = b.make_engine(
            model, tokenizer, args.streams, blocks, args.threads, args.step_tokens
        )
        llamas = {t: load_llama(p, args.threads, 512) for t, p in files.items()}
        batched = {}
        if not args.no_batched:
            batched = {
                t: BatchedLlama(p, args.threads, args.streams, seq_len, args.step_tokens)
                for t, p in files.items()
            }

        # checks: tokenization and greedy answers against the engine
        if args.model == "tiny_llm":
            print(f"tokenizer: {tokenizer_check(next(iter(llamas.values())), folder)}")
        check = b.Job(jobs[0][0].prompt, 48)
        seen: list[int] = []

        class Recorded(b._Request):  # type: ignore[misc,name-defined]
            def on_token(self, token: int) -> None:
                seen.append(token)
                super().on_token(token)

        ours = Recorded(check)
        b._submit(engine, ours)
        if not ours.done.wait(120) or ours.error:
            raise SystemExit(f"the engine's check answer failed: {ours.error}")
        for t, llm in llamas.items():
            theirs = _greedy_llama(llm, check.prompt, check.tokens)
            pairs = enumerate(zip(seen, theirs, strict=False))
            common = next((i for i, (x, y) in pairs if x != y), min(len(seen), len(theirs)))
            print(f"greedy {t}: {common}/{len(seen)} tokens equal to the engine's (float32)")

        b.closed_loop([[b.Job([5, 6, 7], 4)] * 2] * 2, b.continuous(engine))  # warm-up
        columns: dict[str, tuple[Callable[[], Any], int]] = {}
        cases = [args.streams] if args.no_one else [1, args.streams]
        for clients in cases:
            columns[f"inferd, {clients}"] = (lambda: b.continuous(engine), clients)
            for t in types:
                if not (args.no_serial and clients > 1):
                    columns[f"llama.cpp {t}, {clients}"] = (
                        lambda t=t: llama_serial(llamas[t], b),
                        clients,
                    )
                if t in batched:
                    columns[f"llama.cpp {t} batched, {clients}"] = (
                        lambda t=t: batched[t].serve(b),
                        clients,
                    )
        results: dict[str, list[tuple[float, list[float]]]] = {name: [] for name in columns}
        cpu: dict[str, list[float]] = {name: [] for name in columns}  # CPU s per 1000 tokens
        for _ in range(args.rounds):
            for name, (serve, clients) in columns.items():
                mine = jobs if clients > 1 else [[j for client in jobs for j in client]]
                used = time.process_time()
                out = b.closed_loop(mine, serve())
                used = time.process_time() - used
                results[name].append((out[0], out[1]))  # tokens/s, TTFTs
                cpu[name].append(used / sum(j.tokens for c in mine for j in c) * 1e3)
        engine.close()
        for item in batched.values():
            item.close()
    print(
        f"{args.model} model, {args.streams} clients x {args.requests} requests, prompts "
        f"{prompt[0]}..{prompt[1]} tokens, answers {tokens[0]}..{tokens[1]} tokens, "
        f"{args.threads} threads, llama-cpp-python {llama_cpp.__version__}, torch "
        f"{torch.__version__}, {args.rounds} rounds (medians; tokens/s min..max over rounds)"
    )
    print(
        f"{'streams':28}{'tokens/s':>10}{'(min..max)':>14}{'TTFT p50 ms':>13}{'p99 ms':>9}"
        f"{'CPU s/1k tok':>14}"
    )
    rates = {}
    for name, rounds in results.items():
        per = [r for r, _ in rounds]
        rates[name] = statistics.median(per)
        p50 = statistics.median(b._pct(t, 0.5) for _, t in rounds) * 1e3
        p99 = statistics.median(b._pct(t, 0.99) for _, t in rounds) * 1e3
        span = f"{min(per):.0f}..{max(per):.0f}"
        cost = statistics.median(cpu[name])
        print(f"{name:28}{rates[name]:10.0f}{span:>14}{p50:13.1f}{p99:9.1f}{cost:14.2f}")
    # each round's llama.cpp rate over the same round's inferd rate (paired: the machine's load
    # moves both sides of a round alike), median and range over the rounds
    for clients in cases:
        ours = [r for r, _ in results[f"inferd, {clients}"]]
        parts = []
        for name, rounds in results.items():
            if name.startswith("llama.cpp") and name.endswith(f", {clients}"):
                ratios = [r / o for (r, _), o in zip(rounds, ours, strict=True)]
                parts.append(
                    f"{name.split(',')[0][10:]} {statistics.median(ratios):.2f}x "
                    f"({min(ratios):.2f}..{max(ratios):.2f})"
                )
        print(f"{clients} stream(s), llama.cpp / inferd per round: " + ", ".join(parts))


if __name__ == "__main__":
    main()
