"""inferd's generation runtime against LitServe serving the same model with transformers, over
HTTP with streaming, in one run on one machine.

Both serve the example language model ``tiny_llm`` (built by ``python -m inferd.examples.tiny_llm``
into bench/.work/tiny_llm once, or ``--repository`` names a build):

- ``inferd``: ``inferd serve`` with the ``llm`` backend (continuous batching), ``max_running``
  set to ``--streams``; requests go to ``/v2/models/tiny_llm/generate_stream`` (greedy,
  ``max_tokens`` N, ``ignore_eos``), one server-sent event per text delta;
- ``litserve``: LitServe's documented LLM pattern: a ``LitAPI(stream=True)`` whose ``predict``
  runs Hugging Face ``generate()`` (``do_sample=False``, ``min_new_tokens`` = ``max_new_tokens``
  = N) in a thread and yields each token as the streamer hands it over; one worker on the CPU
  (the environment is bench/.work/venvs/litserve-llm, made by this script through
  bench/envs.py).

``--streams`` clients (threads of this process) each send ``--requests`` requests in turn (a
closed loop). Prompts have mixed lengths (``--words MIN:MAX`` words of the model's own
prose) and every answer is exactly N tokens, N mixed (uniform in ``--tokens MIN:MAX``), fixed by
a seed, so both servers compute the same work. Output tokens per second (the answers' N over the
wall time) and the time to first token (request sent to the first streamed text) p50 / p99 are
printed for each, and the ratios. Each server gets ``--threads`` torch threads.

    python bench/llm_peers.py [--streams 16] [--requests 3] [--words 4:60] [--tokens 16:128]
                              [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import envs

from inferd.testing import running_server

WORK = Path(__file__).resolve().parent / ".work"
MODEL = "tiny_llm"
envs.REQUIREMENTS.setdefault(
    "litserve-llm", ["litserve", "transformers", "safetensors", "tokenizers", "torch==2.13.0+cpu"]
)

LITSERVE_APP = """
import queue, sys, threading
import litserve as ls
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from transformers.generation.streamers import BaseStreamer

FOLDER, PORT, THREADS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


class Tokens(BaseStreamer):
    def __init__(self):
        self.queue = queue.Queue()
        self.prompt = True

    def put(self, value):
        if self.prompt:  # the first put is the prompt
            self.prompt = False
            return
        self.queue.put(int(value.reshape(-1)[0]))

    def end(self):
        self.queue.put(None)


class Llm(ls.LitAPI):
    def setup(self, device):
        torch.set_num_threads(THREADS)
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_file=FOLDER + "/tokenizer.json")
        self.model = AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.float32).eval()

    def decode_request(self, request):
        return request["prompt"], int(request["max_tokens"])

    def predict(self, x):
        prompt, n = x
        ids = torch.tensor([self.tokenizer.encode(prompt)])
        streamer = Tokens()

        def run():
            with torch.no_grad():
                self.model.generate(
                    ids, attention_mask=torch.ones_like(ids), do_sample=False,
                    max_new_tokens=n, min_new_tokens=n, pad_token_id=0, streamer=streamer,
                )

        thread = threading.Thread(target=run)
        thread.start()
        count = 0
        while (token := streamer.queue.get()) is not None:
            count += 1
            yield {"text": self.tokenizer.decode([token]), "tokens": count}
        thread.join()

    def encode_response(self, outputs):
        for out in outputs:
            yield out


if __name__ == "__main__":
    server = ls.LitServer(Llm(stream=True), accelerator="cpu", workers_per_device=1, timeout=600)
    server.run(port=PORT, generate_client_file=False, log_level="warning")
"""


def model_folder(repo: Path) -> Path:
    """The tiny_llm repository ``repo`` (built when it lacks the model)."""
    if not (repo / MODEL / "config.pbtxt").is_file():
        subprocess.run(
            [sys.executable, "-m", "inferd.examples.tiny_llm", "--output", str(repo)], check=True
        )
    return repo


def prompts(words: tuple[int, int], count: int) -> list[str]:
    text = (Path(__file__).resolve().parents[1] / "docs" / "llm.md").read_text().split()
    rng = random.Random(1)
    out = []
    for _ in range(count):
        n = rng.randint(*words)
        at = rng.randrange(0, len(text) - n)
        out.append(" ".join(text[at : at + n]))
    return out


Send = Callable[[httpx.Client, str, int], tuple[float, int]]


def send_inferd(client: httpx.Client, prompt: str, tokens: int) -> tuple[float, int]:
    body = {
        "text_input": prompt,
        "stream": True,
        "sampling_parameters": json.dumps(
            {"temperature": 0, "max_tokens": tokens, "ignore_eos": True}
        ),
    }
    first = 0.0
    with client.stream("POST", f"/v2/models/{MODEL}/generate_stream", json=body) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"inferd answered {reply.status_code}: {reply.read()[:200]!r}")
        for line in reply.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if "error" in event:
                    raise RuntimeError(f"inferd: {event['error']}")
                if not first and event.get("text_output"):
                    first = time.perf_counter()
    return first, tokens  # ignore_eos and max_tokens: exactly `tokens` (checked by metrics)


def send_litserve(client: httpx.Client, prompt: str, tokens: int) -> tuple[float, int]:
    first = 0.0
    got = 0
    decoder = json.JSONDecoder()
    with client.stream("POST", "/predict", json={"prompt": prompt, "max_tokens": tokens}) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"LitServe answered {reply.status_code}: {reply.read()[:200]!r}")
        buffer = ""
        for chunk in reply.iter_text():
            if chunk and not first:
                first = time.perf_counter()
            buffer += chunk
            while buffer.strip():  # chunks are JSON objects, one after the other
                try:
                    item, end = decoder.raw_decode(buffer.lstrip())
                except ValueError:
                    break
                got = max(got, int(item["tokens"]))
                buffer = buffer.lstrip()[end:]
    return first, got


def closed_loop(
    url: str, send: Send, work: list[list[tuple[str, int]]]
) -> tuple[float, list[float], int]:
    """Each client sends its requests in turn; tokens/s, TTFTs, tokens received."""
    ttft: list[float] = []
    total = [0]
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client(mine: list[tuple[str, int]]) -> None:
        with httpx.Client(base_url=url, timeout=600) as http:
            for prompt, tokens in mine:
                sent = time.perf_counter()
                try:
                    first, got = send(http, prompt, tokens)
                except BaseException as exc:  # reported after the run
                    with lock:
                        errors.append(exc)
                    return
                if got != tokens:
                    errors.append(RuntimeError(f"{got} tokens for {tokens} asked"))
                with lock:
                    ttft.append(first - sent)
                    total[0] += got

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(mine,)) for mine in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed: {errors[0]}")
    return total[0] / wall, ttft, total[0]


@contextmanager
def litserve(folder: Path, threads: int) -> Iterator[str]:
    py = envs.ensure("litserve-llm")
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "litserve_llm.py"
        app.write_text(LITSERVE_APP)
        with socket_port() as port:
            pass  # a free port (LitServe binds it itself)
        log = (WORK / "litserve-llm.log").open("w")
        proc = subprocess.Popen(
            [str(py), str(app), str(folder), str(port), str(threads)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 300
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"LitServe exited; see {WORK / 'litserve-llm.log'}")
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("LitServe did not become healthy in 300 s")
                time.sleep(0.5)
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()


@contextmanager
def socket_port() -> Iterator[int]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def inferd_repository(source: Path, into: Path, streams: int, threads: int) -> Path:
    """A copy of the tiny_llm repository whose config runs ``streams`` sequences together."""
    import shutil

    repo = into / "models"
    shutil.copytree(source, repo)
    config = repo / MODEL / "config.pbtxt"
    kept = [
        line
        for line in config.read_text().splitlines()
        if not any(f'"{key}"' in line for key in ("max_running", "threads", "kv_cache_bytes"))
    ]
    kept += [
        f'parameters {{ key: "max_running" value {{ string_value: "{streams}" }} }}',
        f'parameters {{ key: "threads" value {{ string_value: "{threads}" }} }}',
    ]
    config.write_text("\n".join(kept) + "\n")
    return repo


def generated_total(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("inferd_llm_generated_tokens_total{")
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--requests", type=int, default=3, help="requests per client")
    parser.add_argument("--words", default="4:60", help="prompt words, MIN:MAX")
    parser.add_argument("--tokens", default="16:128", help="generated tokens, MIN:MAX")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--repository",
        type=Path,
        default=WORK / "tiny_llm",
        help="a model repository holding tiny_llm (built there when missing)",
    )
    args = parser.parse_args()
    words = tuple(int(v) for v in args.words.split(":"))
    span = tuple(int(v) for v in args.tokens.split(":"))
    rng = random.Random(2)
    texts = iter(prompts((words[0], words[1]), args.streams * args.requests))
    work = [
        [(next(texts), rng.randint(span[0], span[1])) for _ in range(args.requests)]
        for _ in range(args.streams)
    ]
    warm = [[("hello", 4)]]
    source = model_folder(args.repository)
    results: dict[str, tuple[float, list[float], int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = inferd_repository(source, Path(tmp), args.streams, args.threads)
        with running_server([repo]) as server:
            url, metrics = f"http://{server.http_url}", f"http://{server.metrics_url}"
            closed_loop(url, send_inferd, warm)
            before = generated_total(metrics)
            results["inferd"] = closed_loop(url, send_inferd, work)
            counted = generated_total(metrics) - before
            if counted != results["inferd"][2]:
                raise RuntimeError(
                    f"inferd generated {counted} tokens, {results['inferd'][2]} asked"
                )
    with litserve(source / MODEL / "1", args.threads) as url:
        closed_loop(url, send_litserve, warm)
        results["litserve"] = closed_loop(url, send_litserve, work)
    print(
        f"{args.streams} clients x {args.requests} requests, prompts of {words[0]}..{words[1]} "
        f"words, answers of {span[0]}..{span[1]} tokens, {args.threads} threads each"
    )
    print(f"{'':10}{'tokens/s':>10}{'TTFT p50 ms':>14}{'TTFT p99 ms':>14}")
    for name, (rate, ttft, _) in results.items():
        print(f"{name:10}{rate:10.0f}{_pct(ttft, 0.5) * 1e3:14.1f}{_pct(ttft, 0.99) * 1e3:14.1f}")
    ours, theirs = results["inferd"], results["litserve"]
    print(
        f"inferd / LitServe tokens/s {ours[0] / theirs[0]:.2f}x; TTFT p99 "
        f"{_pct(ours[1], 0.99) * 1e3:.1f} vs {_pct(theirs[1], 0.99) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
