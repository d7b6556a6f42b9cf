"""``inferd perf -i openai`` beside NVIDIA's AIPerf: the same server, prompts and concurrency.

One ``inferd serve`` serves two decoupled text models over ``/v1``:

* ``paced_llm`` (written here): answers with the words of its prompt, the first after
  ``--first-token-ms`` and each next one ``--inter-token-ms`` later, as a model that generates
  at a steady pace would; the server's own cost is small beside those times, so what is
  compared is what the two tools measure;
* ``echo_llm`` (tests/data/triton_openai): the same words at once, so the figures are the
  server's and the tools' own overhead on this machine's cores.

Both read the same JSONL prompts (``--prompt-words`` words each) and count tokens with the same
word-level tokenizer (also the server's, so ``usage`` agrees). For each model, AIPerf (in its
own virtual environment, bench/.work/venvs/aiperf, installed on first use with
``pip install aiperf``) and then ``inferd perf`` load ``/v1/completions`` with streaming at the
same concurrency; the script prints request throughput and TTFT p50 of both and their ratios
(inferd / AIPerf; goal: within 10%).

    .venv/bin/python bench/aiperf_check.py [--concurrency 4] [--duration-s 30]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from inferd.testing import running_server
from inferd.tools.perf.llm_inputs import WORDS

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "bench" / ".work" / "venvs" / "aiperf"
ECHO = ROOT / "tests" / "data" / "triton_openai" / "echo_llm"

PACED_CONFIG = """backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
parameters { key: "first_token_ms" value: { string_value: "%s" } }
parameters { key: "inter_token_ms" value: { string_value: "%s" } }
input [
  { name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "stream", data_type: TYPE_BOOL, dims: [ 1 ], optional: true },
  { name: "sampling_parameters", data_type: TYPE_STRING, dims: [ 1 ], optional: true }
]
output [ { name: "text_output", data_type: TYPE_STRING, dims: [ -1 ] } ]
"""

PACED_MODEL = '''"""Answers with its prompt's words at a set pace (see bench/aiperf_check.py)."""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.first_s = float(params["first_token_ms"]["string_value"]) / 1000
        self.gap_s = float(params["inter_token_ms"]["string_value"]) / 1000

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.answer, args=(request,), daemon=True).start()
        return None

    def answer(self, request):
        start = time.perf_counter()
        sender = request.get_response_sender()
        words = _scalar(request, "text_input", b"").decode().split()
        stream = bool(_scalar(request, "stream", False))
        sampling = json.loads(_scalar(request, "sampling_parameters", b"{}").decode() or "{}")
        if sampling.get("max_tokens"):
            words = words[: int(sampling["max_tokens"])]

        def send(text):
            out = pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object))
            sender.send(pb_utils.InferenceResponse([out]))

        for index, word in enumerate(words):
            due = start + self.first_s + index * self.gap_s
            time.sleep(max(0.0, due - time.perf_counter()))
            if stream:
                send(" " + word)
        if not stream:
            send("".join(" " + word for word in words))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''


def aiperf() -> Path:
    """AIPerf's command, installed in its own virtual environment on first use."""
    exe = VENV / "bin" / "aiperf"
    if not exe.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "aiperf"], check=True)
    return exe


def build_tokenizer(folder: Path) -> None:
    """A word-level tokenizer over the prompts' words, loadable by ``tokenizers`` (the server,
    inferd perf) and by transformers' AutoTokenizer (AIPerf)."""
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(WORDS, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def build_repository(root: Path, first_ms: float, gap_ms: float) -> Path:
    repo = root / "models"
    (repo / "paced_llm" / "1").mkdir(parents=True)
    (repo / "paced_llm" / "config.pbtxt").write_text(PACED_CONFIG % (first_ms, gap_ms))
    (repo / "paced_llm" / "1" / "model.py").write_text(PACED_MODEL)
    shutil.copytree(ECHO, repo / "echo_llm", ignore=shutil.ignore_patterns("__pycache__"))
    config = repo / "echo_llm" / "config.pbtxt"
    (root / "markers").mkdir()
    config.write_text(config.read_text().replace("MARKER_DIR", str(root / "markers")))
    for name in ("paced_llm", "echo_llm"):
        build_tokenizer(repo / name)
    return repo


def write_prompts(path: Path, count: int, words: int) -> None:
    lines = []
    for i in range(count):
        chosen = [WORDS[(i * 7919 + j * 104729) % len(WORDS)] for j in range(words)]
        lines.append(json.dumps({"text": " ".join(chosen)}))
    path.write_text("\n".join(lines) + "\n")


def timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``cmd``; its result and the cores it used on average (CPU time over run time,
    its child processes included)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - start
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, cpu / wall


def run_aiperf(url: str, model: str, args: argparse.Namespace, work: Path) -> dict[str, float]:
    out = work / f"aiperf-{model}"
    cmd = [
        str(aiperf()), "profile", "-m", model, "--url", f"http://{url}",
        "--endpoint-type", "completions", "--streaming",
        "--input-file", str(work / "prompts.jsonl"), "--custom-dataset-type", "single_turn",
        "--tokenizer", str(work / "tokenizer"), "--concurrency", str(args.concurrency),
        "--benchmark-duration", str(args.duration_s), "--benchmark-grace-period", "30",
        "--warmup-request-count", str(4 * args.concurrency),
        "--output-artifact-dir", str(out), "--ui-type", "none", "--no-server-metrics",
        "--no-gpu-telemetry",
    ]  # fmt: skip
    done, cores = timed(cmd)
    if done.returncode != 0:
        raise SystemExit(
            f"aiperf exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    found = min(
        out.rglob("profile_export_aiperf.json"), key=lambda p: len(p.parts)
    )  # not a phase's
    metrics: dict[str, Any] = json.loads(found.read_text())
    return {
        "throughput": float(metrics["request_throughput"]["avg"]),
        "ttft_p50_ms": float(metrics["time_to_first_token"]["p50"]),
        "itl_p50_ms": float(metrics["inter_token_latency"]["p50"]),
        "requests": float(metrics["request_count"]["avg"]),
        "cores": cores,
    }


def run_inferd(url: str, model: str, args: argparse.Namespace, work: Path) -> dict[str, float]:
    report = work / f"inferd-{model}.json"
    window_ms = int(args.duration_s * 1000 / 3)
    cmd = [
        sys.executable, "-m", "inferd.cli.main", "perf", "-i", "openai", "-m", model,
        "-u", url, "--endpoint-type", "completions", "--streaming",
        "--input-file", str(work / "prompts.jsonl"), "--tokenizer", str(work / "tokenizer"),
        "--concurrency-range", str(args.concurrency), "-p", str(window_ms), "-r", "4",
        "--json-output", str(report), "-q",
    ]  # fmt: skip
    done, cores = timed(cmd)
    if done.returncode != 0:
        raise SystemExit(f"inferd perf exited {done.returncode}:\n{done.stdout}{done.stderr}")
    (point,) = json.loads(report.read_text())["points"]
    llm = point["llm"]
    return {
        "throughput": float(llm["requests_per_s"]),
        "ttft_p50_ms": float(llm["ttft_us"]["p50"]) / 1000,
        "itl_p50_ms": float(llm["itl_us"]["p50"]) / 1000,
        "requests": float(llm["request_count"]),
        "cores": cores,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--prompt-words", type=int, default=32)
    parser.add_argument("--first-token-ms", type=float, default=50.0)
    parser.add_argument("--inter-token-ms", type=float, default=10.0)
    parser.add_argument("--models", default="paced_llm,echo_llm")
    args = parser.parse_args()
    aiperf()
    work = ROOT / "bench" / ".work" / "aiperf_check"  # kept for a look at both tools' files
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    repo = build_repository(work, args.first_token_ms, args.inter_token_ms)
    (work / "tokenizer").mkdir()
    build_tokenizer(work / "tokenizer")
    write_prompts(work / "prompts.jsonl", 100, args.prompt_words)
    rows = []
    with running_server([repo], []) as server:
        for model in args.models.split(","):
            theirs = run_aiperf(server.http_url, model, args, work)
            ours = run_inferd(server.http_url, model, args, work)
            rows.append((model, theirs, ours))
            print(f"{model}: aiperf {theirs}, inferd perf {ours}", flush=True)
    print(
        f"\n/v1/completions, streaming, concurrency {args.concurrency}, "
        f"{args.prompt_words}-word prompts, about {args.duration_s:g} s each\n"
    )
    print(
        "| model | AIPerf req/s | inferd perf req/s | ratio | AIPerf TTFT p50 ms | "
        "inferd perf TTFT p50 ms | ratio | AIPerf cores | inferd perf cores |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for model, theirs, ours in rows:
        print(
            f"| {model} | {theirs['throughput']:.2f} | {ours['throughput']:.2f} | "
            f"{ours['throughput'] / theirs['throughput']:.3f} | {theirs['ttft_p50_ms']:.2f} | "
            f"{ours['ttft_p50_ms']:.2f} | {ours['ttft_p50_ms'] / theirs['ttft_p50_ms']:.3f} | "
            f"{theirs['cores']:.2f} | {ours['cores']:.2f} |"
        )


if __name__ == "__main__":
    main()
