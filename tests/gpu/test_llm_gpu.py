"""The generation runtime on a CUDA GPU (``pytest -m gpu``; skipped where torch sees no CUDA
device): the forward pass over a paged cache on the GPU gives Hugging Face's logits (float64 on
the host as the reference), continuous batching on the GPU gives Hugging Face's greedy tokens
of each sequence alone (compared up to a near-tie, see tests/integration/test_llm_engine.py),
and bfloat16 runs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tiny_llama import load_hf, write_tiny_llama

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

TIE_GAP = 1e-3


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("llm") / "m", seed=4)


def test_logits_on_the_gpu_equal_hugging_face(folder: Path) -> None:
    from inferd.backends.llm.model import KVCache, LlamaModel, StepSequence

    hf = load_hf(folder)
    model = LlamaModel.load(folder, dtype=torch.float32, device="cuda")
    cache = KVCache(model.config, 32, 4, torch.float32, torch.device("cuda"))
    a, b = [5, 9, 40, 41, 42, 7, 8], [100, 3]
    model.step([StepSequence(a[:-1], 0, [3, 4])], cache)
    logits = model.step(
        [StepSequence(a[-1:], len(a) - 1, [3, 4]), StepSequence(b, 0, [9])], cache
    ).cpu()
    with torch.no_grad():
        for row, ids in zip(logits, (a, b), strict=True):
            want = hf(torch.tensor([ids])).logits[0, -1]
            torch.testing.assert_close(row.double(), want, rtol=1e-3, atol=1e-3)


def _run(engine: Any, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    from inferd.backends.llm.engine import Generation
    from inferd.backends.llm.params import SamplingParams

    ids: list[list[int]] = [[] for _ in prompts]
    done = [threading.Event() for _ in prompts]
    for i, prompt in enumerate(prompts):
        engine.submit(
            Generation(
                prompt,
                SamplingParams(temperature=0.0, max_tokens=max_tokens),
                lambda text, error, final, i=i: done[i].set() if final else None,
                stream=True,
                on_token=ids[i].append,
            )
        )
    for event in done:
        assert event.wait(120)
    return ids


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_continuous_batching_on_the_gpu(folder: Path, dtype: str) -> None:
    from inferd.backends.llm.engine import GenerationEngine
    from inferd.backends.llm.model import LlamaModel
    from inferd.backends.llm.policy import PolicyConfig

    model = LlamaModel.load(folder, dtype=getattr(torch, dtype), device="cuda")
    tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    cfg = PolicyConfig(
        max_running=6, max_step_tokens=32, block_tokens=4, total_blocks=40, max_model_len=128
    )
    engine = GenerationEngine(model, tokenizer, cfg, eos_ids=frozenset({2}))
    engine.start()
    prompts = [[3 + (7 * i + j) % 250 for j in range(4 + 5 * i)] for i in range(8)]
    try:
        ours = _run(engine, prompts, 16)
        assert engine.statistics().kv_blocks_used == 0
    finally:
        engine.close()
    if dtype == "bfloat16":
        assert all(ids for ids in ours)
        return
    hf = load_hf(folder)
    compared = total = 0
    for prompt, got in zip(prompts, ours, strict=True):
        with torch.no_grad():
            out = hf.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                do_sample=False,
                max_new_tokens=16,
                eos_token_id=2,
                pad_token_id=0,
                output_scores=True,
                return_dict_in_generate=True,
            )
        want = out.sequences[0, len(prompt) :].tolist()
        total += len(want)
        for i, token in enumerate(want):
            assert got[i] == token, f"token {i}: ours {got[i]}, HF {token}"
            compared += 1
            top = out.scores[i][0].topk(2).values
            if float(top[0] - top[1]) < TIE_GAP:
                break
    assert compared >= 0.75 * total
