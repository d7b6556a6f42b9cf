"""The llm backend's decode attention on CPU: the compiled paged kernel (the cache read in place)
against the gather + SDPA path, alternated in one run.

The shape is bench/llm.py's ``tiny`` model (4 layers, 4 heads, 2 KV heads, head_dim 64, float32)
with its cache (blocks of 16 tokens, 224 blocks): ``--sequences`` decode tokens with 41 to 221
tokens of context each (seeded) on shuffled blocks. One sample is what a decode step spends on
attention over all layers: the step's attention batch built from the block tables (the gather
path's block rows and mask, the kernel's tables and lengths), then every layer's attention.
The two sides alternate sample by sample (which goes first alternates too), for 1 and 2
intra-op threads; medians with p10 and p90. The kernel's first load (a build, or torch's cache
in ``TORCH_EXTENSIONS_DIR``) is timed too.

    python bench/llm_paged_attention.py [--sequences 16] [--samples 2000] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch

from inferd.backends.llm import paged_attention as paged
from inferd.backends.llm.model import LlamaConfig, StepSequence, _AttentionGroup

BLOCK = 16
TOTAL_BLOCKS = 224
LAYERS = 4


def _config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=2048,
        hidden_size=256,
        layers=LAYERS,
        heads=4,
        kv_heads=2,
        head_dim=64,
        intermediate_size=512,
        rms_norm_eps=1e-6,
        rope_theta=1e4,
        tie_word_embeddings=False,
        max_position_embeddings=2048,
        eos_token_ids=(),
        bos_token_id=None,
    )


def _summary(values: list[float]) -> str:
    deciles = statistics.quantiles(values, n=10)
    return (
        f"{statistics.median(values) * 1e6:7.0f} us "
        f"(p10 {deciles[0] * 1e6:.0f}, p90 {deciles[-1] * 1e6:.0f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--samples", type=int, default=2000, help="per side and thread count")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    began = time.perf_counter()
    kernel = paged.load()
    loaded = time.perf_counter() - began
    if kernel is None:
        raise SystemExit(f"the kernel is not available: {paged.load_error()}")
    print(f"kernel {paged.extension_name()} loaded in {loaded:.2f} s")
    cfg = _config()
    rng = random.Random(args.seed)
    free = list(range(TOTAL_BLOCKS))
    rng.shuffle(free)
    contexts = [rng.randint(41, 221) for _ in range(args.sequences)]
    tables = [[free.pop() for _ in range(-(-n // BLOCK))] for n in contexts]
    seqs = [StepSequence([1], n - 1, t) for n, t in zip(contexts, tables, strict=True)]
    b = len(seqs)
    shape = (2 * cfg.kv_heads, TOTAL_BLOCKS, BLOCK, cfg.head_dim)
    caches = [torch.randn(shape) for _ in range(LAYERS)]
    queries = [torch.randn(b, cfg.heads, cfg.head_dim) for _ in range(LAYERS)]
    cpu = torch.device("cpu")

    def side(module: object | None) -> Callable[[], list[torch.Tensor]]:
        def run() -> list[torch.Tensor]:
            group = _AttentionGroup.build(
                range(b), seqs, [1] * b, BLOCK, b, TOTAL_BLOCKS, cfg, torch.float32, cpu, module
            )
            return [group.attend(q, kv) for q, kv in zip(queries, caches, strict=True)]

        return run

    gather, inplace = side(None), side(kernel)
    with torch.inference_mode():
        diff = max(float((x - y).abs().max()) for x, y in zip(gather(), inplace(), strict=True))
        print(
            f"{b} sequences, contexts {min(contexts)}..{max(contexts)} tokens "
            f"(mean {statistics.fmean(contexts):.0f}), {LAYERS} layers; largest difference "
            f"{diff:.1e}"
        )
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            times: dict[str, list[float]] = {"gather + SDPA": [], "paged kernel": []}
            for i in range(args.samples):
                order = [("gather + SDPA", gather), ("paged kernel", inplace)]
                for name, run in order if i % 2 else order[::-1]:
                    start = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - start)
            ratio = statistics.median(times["gather + SDPA"]) / statistics.median(
                times["paged kernel"]
            )
            print(
                f"threads {threads}: "
                + "; ".join(f"{name} {_summary(v)}" for name, v in times.items())
                + f"; gather / kernel {ratio:.2f}x"
            )


if __name__ == "__main__":
    main()
