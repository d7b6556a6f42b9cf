"""What ``/v1`` adds per request over the same model's v2 ``generate`` call, at concurrency 1.

One decoupled Python text model (``text_input`` -> ``text_output``, one response: the prompt's
words) with a word-level tokenizer, so ``/v1/completions`` counts usage as it does for a real
model. The same prompt goes through ``POST /v2/models/echo/generate`` and ``POST
/v1/completions`` in interleaved rounds on one server, one client connection each; the script
prints each route's median latency and the difference (the goal: at most 100 us).

    python bench/openai_overhead.py [--requests 500] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from inferd.testing import running_server

CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "stream", data_type: TYPE_BOOL, dims: [ 1 ], optional: true }
]
output [ { name: "text_output", data_type: TYPE_STRING, dims: [ -1 ] } ]
"""

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            text = "".join(" " + w for w in prompt.reshape(-1)[0].decode().split())
            out = pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object))
            request.get_response_sender().send(
                pb_utils.InferenceResponse([out]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""

PROMPT = "the quick brown fox jumps over the lazy dog " * 4


def build(repo: Path) -> None:
    folder = repo / "echo"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG)
    (folder / "1" / "model.py").write_text(MODEL)
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator([PROMPT], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": ""}))


def latencies_us(client: httpx.Client, path: str, body: object, count: int) -> list[float]:
    took = []
    for _ in range(count):
        start = time.perf_counter()
        reply = client.post(path, json=body)
        took.append((time.perf_counter() - start) * 1e6)
        assert reply.status_code == 200, reply.text
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="requests per route per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    routes = {
        "v2 generate": ("/v2/models/echo/generate", {"text_input": PROMPT, "stream": False}),
        "v1 completions": ("/v1/completions", {"model": "echo", "prompt": PROMPT}),
    }
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "models"
        build(repo)
        with running_server([repo], ["--allow-grpc=false", "--allow-metrics=false"]) as server:
            base = f"http://{server.http_url}"
            with httpx.Client(base_url=base, timeout=30) as client:
                for path, body in routes.values():  # warm up both
                    latencies_us(client, path, body, 50)
                medians: dict[str, list[float]] = {name: [] for name in routes}
                for round_ in range(args.rounds):
                    for name, (path, body) in routes.items():
                        took = latencies_us(client, path, body, args.requests)
                        medians[name].append(statistics.median(took))
                    print(
                        f"round {round_ + 1}: "
                        + ", ".join(f"{n} {m[-1]:.0f} us" for n, m in medians.items())
                    )
    v2 = statistics.median(medians["v2 generate"])
    v1 = statistics.median(medians["v1 completions"])
    print(f"median of round medians: v2 generate {v2:.0f} us, v1 completions {v1:.0f} us")
    print(f"/v1 adds {v1 - v2:.0f} us per request ({v1 / v2:.2f}x); goal: at most 100 us")


if __name__ == "__main__":
    main()
