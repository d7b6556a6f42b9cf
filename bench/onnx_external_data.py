"""An ONNX model's weights three ways, served by an on-demand server: inside ``model.onnx`` with
each session building its own copy (``share_weights`` false), inside ``model.onnx`` read once
for all the sessions (the default for two sessions or more), and in a file beside it
(external data). For each: what it holds resident, how long its load takes and how far the
load peaks above that (the ``minilm_embeddings`` example: two instances and a solo session,
three ONNX Runtime sessions).

Each is measured on a server that loaded another one first (so none carries the runtime's
libraries); the figures are the server's own: ``memory_bytes`` from the repository index,
the load time and transient peak from its log. Then each server answers one short text at a
time, its two models in turn, for the latency of each. The embeddings of all must agree.

    .venv/bin/python bench/onnx_external_data.py
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import many_models_mixed as mixed  # this script's folder comes first on sys.path
import numpy as np
import onnx
import tritonclient.http as httpclient

_LOADED = re.compile(
    r"model '(\w+)' loaded on demand in ([\d.]+) s \(\w+, (\d+) bytes(?:, (\d+) bytes more)?"
)


ROUNDS = 300  # requests to each model loaded on each server

_COPIED = 'parameters { key: "share_weights" value { string_value: "false" } }\n'


def copy_model(source: Path, target: Path, name: str) -> None:
    (target / "1").mkdir(parents=True)
    shutil.copy(source / "tokenizer.json", target / "tokenizer.json")
    config = (source / "config.pbtxt").read_text()
    text = re.sub(r'^name: ".*"$', f'name: "{name}"', config, flags=re.MULTILINE)
    (target / "config.pbtxt").write_text(text + (_COPIED if name == "copied" else ""))
    if name != "external":
        shutil.copy(source / "1" / "model.onnx", target / "1" / "model.onnx")
        return
    model = onnx.load(str(source / "1" / "model.onnx"))
    onnx.save_model(
        model,
        str(target / "1" / "model.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=1024,
    )


def main() -> None:
    source = mixed.minilm_source()
    names = ("copied", "shared", "external")
    with tempfile.TemporaryDirectory(prefix="inferd-external-") as tmp:
        repo = Path(tmp) / "repo"
        for name in names:
            copy_model(source, repo / name, name)
        flags = ["--model-control-mode", "on-demand", "--model-memory-budget", "100%"]
        rows: list[str] = []
        embeddings: dict[str, Any] = {}
        latency: dict[str, list[float]] = {}
        # one server each: the model loaded second carries none of the runtime's libraries
        for first, second in zip(names[1:] + names[:1], names, strict=True):
            with mixed.running_server([repo], flags) as server:
                client = httpclient.InferenceServerClient(server.http_url)
                for name in (first, second):
                    answer = client.infer(name, mixed.inputs("minilm"))
                    embeddings[name] = answer.as_numpy("embedding")
                index = {e["name"]: e for e in client.get_model_repository_index()}
                load = next(m for m in _LOADED.finditer(server.log()) if m[1] == second)
                for _ in range(ROUNDS):  # the two loaded models alternate: one short text each
                    for name in (first, second):
                        start = time.perf_counter()
                        client.infer(name, mixed.inputs("minilm"))
                        latency.setdefault(name, []).append(time.perf_counter() - start)
            peak = "?" if load[4] is None else f"{int(load[4]) / 2**20:.0f} MiB"
            resident = int(index[second]["memory_bytes"]) / 2**20
            rows.append(f"| {second} | {resident:.0f} MiB | {float(load[2]):.2f} s | {peak} |")
    print(
        "| weights | resident (repository index) | load | transient peak above it "
        f"| one short text, p50 / p90 ({2 * ROUNDS} requests) |"
    )
    print("|---|---|---|---|---|")
    for name, row in zip(names, rows, strict=True):
        ms = np.asarray(latency[name]) * 1e3
        print(f"{row} {np.percentile(ms, 50):.1f} / {np.percentile(ms, 90):.1f} ms |")
    same = all(np.allclose(embeddings["copied"], embeddings[n], atol=1e-6) for n in names)
    print(f"same embeddings: {same}")


if __name__ == "__main__":
    main()
