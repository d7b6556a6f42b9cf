"""The generation runtime's own Llama forward pass against Hugging Face's on a random tiny Llama:
the same logits (float64, untied and tied heads, another rope_theta), a prompt prefilled in
chunks equal to it prefilled whole, sequences batched in one step equal to each alone, and
refusals of what it does not implement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from inferd.backends.llm.model import (  # noqa: E402
    KVCache,
    LlamaModel,
    StepSequence,
    read_llama_config,
)
from inferd.errors import ConfigError  # noqa: E402
from tests.helpers.tiny_llama import load_hf, write_tiny_llama  # noqa: E402

BLOCK = 4


def _cache(model: LlamaModel, blocks: int = 64) -> KVCache:
    return KVCache(model.config, blocks, BLOCK, model.dtype, model.device)


def _hf_logits(hf, ids: list[int]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0]


@pytest.mark.parametrize(
    ("tie", "theta", "kv_heads"), [(False, 10000.0, 2), (True, 500000.0, 4), (False, 1e4, 1)]
)
def test_logits_equal_hugging_face(tmp_path: Path, tie: bool, theta: float, kv_heads: int) -> None:
    folder = write_tiny_llama(tmp_path / "m", tie=tie, rope_theta=theta, kv_heads=kv_heads)
    hf = load_hf(folder)
    ours = LlamaModel.load(folder, dtype=torch.float64)
    ids = [5, 17, 42, 99, 3, 250, 7, 8, 61, 13, 14]
    want = _hf_logits(hf, ids)
    cache = _cache(ours)
    # every prefix's last logits: a whole prefill of each prefix
    for n in (1, 4, 5, len(ids)):
        got = ours.step([StepSequence(ids[:n], 0, list(range(8)))], cache)
        torch.testing.assert_close(got[0].double(), want[n - 1], rtol=1e-5, atol=1e-5)


def test_chunked_prefill_and_decode_equal_whole_prefill(tmp_path: Path) -> None:
    folder = write_tiny_llama(tmp_path / "m")
    hf = load_hf(folder)
    ours = LlamaModel.load(folder, dtype=torch.float64)
    ids = list(range(10, 33))
    want = _hf_logits(hf, ids)
    cache = _cache(ours)
    table = [9, 3, 40, 7, 1, 22, 5]  # blocks scattered, not in order
    got = []
    start = 0
    for chunk in (5, 3, 7, 1, 1, 6):  # chunks crossing block edges, then decodes
        step = ids[start : start + chunk]
        logits = ours.step([StepSequence(step, start, table)], cache)
        got.append((start + chunk - 1, logits[0]))
        start += chunk
    assert start == len(ids)
    for position, logits in got:
        torch.testing.assert_close(logits.double(), want[position], rtol=1e-5, atol=1e-5)


def test_batched_step_equals_each_sequence_alone(tmp_path: Path) -> None:
    folder = write_tiny_llama(tmp_path / "m")
    hf = load_hf(folder)
    ours = LlamaModel.load(folder, dtype=torch.float64)
    cache = _cache(ours)
    a = [4, 8, 15, 16, 23, 42, 7]
    b = [100, 101, 102]
    c = [200, 5, 6, 9, 11, 30, 31, 32, 33]
    # a: cached 5, decodes... here: prefill a[:5] alone, then a step with a's last 2 tokens,
    # b's whole prompt and c's first chunk together
    ours.step([StepSequence(a[:5], 0, [0, 1])], cache)
    logits = ours.step(
        [
            StepSequence(a[5:], 5, [0, 1]),
            StepSequence(b, 0, [2]),
            StepSequence(c[:6], 0, [3, 4]),
        ],
        cache,
    )
    torch.testing.assert_close(logits[0].double(), _hf_logits(hf, a)[-1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits[1].double(), _hf_logits(hf, b)[-1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits[2].double(), _hf_logits(hf, c[:6])[-1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_decode_batches_and_padded_prefill_equal_each_sequence_alone(
    tmp_path: Path, kv_heads: int
) -> None:
    """The step's three attention shapes against Hugging Face: a prefill batch that is the whole
    step but padded (prompts of different lengths), decode tokens of different context lengths
    over scattered blocks as the whole step, and the same decodes beside a prefill chunk."""
    folder = write_tiny_llama(tmp_path / "m", kv_heads=kv_heads)
    hf = load_hf(folder)
    ours = LlamaModel.load(folder, dtype=torch.float64)
    cache = _cache(ours)
    # similar lengths, shortest first: one padded attention batch, in the step's order (a much
    # longer prompt would get a batch of its own)
    prompts = [
        [90, 91, 92, 93],
        [7, 8, 9, 10, 11],
        [200 + i for i in range(5)],
        [30 + i for i in range(6)],
    ]
    tables = [[5, 60], [17, 3], [44, 1], [40, 2, 33]]
    logits = ours.step([StepSequence(p, 0, t) for p, t in zip(prompts, tables, strict=True)], cache)
    for row, prompt in enumerate(prompts):
        want = _hf_logits(hf, prompt)[-1]
        torch.testing.assert_close(logits[row].double(), want, rtol=1e-5, atol=1e-5)
    for new_tokens, extra in (([11, 12, 13, 14], None), ([15, 16, 17, 18], [250, 251, 252])):
        step = [
            StepSequence([token], len(p), t)
            for p, t, token in zip(prompts, tables, new_tokens, strict=True)
        ]
        if extra is not None:  # a prompt's chunk first, as the engine orders a step
            step.insert(0, StepSequence(extra, 0, [50, 51]))
        logits = ours.step(step, cache)
        if extra is not None:
            want = _hf_logits(hf, extra)[-1]
            torch.testing.assert_close(logits[0].double(), want, rtol=1e-5, atol=1e-5)
            logits = logits[1:]
        for row, token in enumerate(new_tokens):
            prompts[row] = [*prompts[row], token]
            want = _hf_logits(hf, prompts[row])[-1]
            torch.testing.assert_close(logits[row].double(), want, rtol=1e-5, atol=1e-5)


def test_float32_close_to_hugging_face(tmp_path: Path) -> None:
    folder = write_tiny_llama(tmp_path / "m")
    hf = load_hf(folder, "float32")
    ours = LlamaModel.load(folder, dtype=torch.float32)
    ids = [1, 2, 3, 50, 60, 70, 80]
    got = ours.step([StepSequence(ids, 0, [0, 1])], _cache(ours))
    torch.testing.assert_close(got[0], _hf_logits(hf, ids)[-1], rtol=1e-4, atol=1e-4)


def test_other_architectures_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["MistralForCausalLM"], "model_type": "mistral"})
    )
    with pytest.raises(ConfigError, match=r"MistralForCausalLM is not supported.*LlamaForCausalLM"):
        read_llama_config(folder)
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
            }
        )
    )
    with pytest.raises(ConfigError, match="rope scaling 'llama3' is not supported"):
        read_llama_config(folder)


def test_weights_only_from_safetensors_inside_the_folder(tmp_path: Path) -> None:
    folder = write_tiny_llama(tmp_path / "m")
    outside = tmp_path / "elsewhere.safetensors"
    (folder / "model.safetensors").rename(outside)
    with pytest.raises(ConfigError, match=r"no model\.safetensors"):
        LlamaModel.load(folder)
    (folder / "model.safetensors").symlink_to(outside)
    with pytest.raises(ConfigError, match="resolves outside the model folder"):
        LlamaModel.load(folder)


def test_decode_tokens_of_different_lengths_in_one_padded_batch(tmp_path: Path) -> None:
    folder = write_tiny_llama(tmp_path / "m")
    hf = load_hf(folder)
    ours = LlamaModel.load(folder, dtype=torch.float64)
    cache = _cache(ours)
    prompts = [[7, 8, 9, 10, 11, 12, 13, 14, 15], [20, 21], [30, 31, 32, 33, 34]]
    tables = [[5, 6, 7], [1], [2, 3]]
    for prompt, table in zip(prompts, tables, strict=True):
        ours.step([StepSequence(prompt[:-1], 0, table)], cache)
    # every sequence decodes its last token in one step, with a prefill chunk among them
    other = [40, 41, 42, 43]
    logits = ours.step(
        [
            StepSequence(prompts[0][-1:], len(prompts[0]) - 1, tables[0]),
            StepSequence(other, 0, [9]),
            StepSequence(prompts[1][-1:], len(prompts[1]) - 1, tables[1]),
            StepSequence(prompts[2][-1:], len(prompts[2]) - 1, tables[2]),
        ],
        cache,
    )
    for row, ids in zip(logits, [prompts[0], other, prompts[1], prompts[2]], strict=True):
        torch.testing.assert_close(row.double(), _hf_logits(hf, ids)[-1], rtol=1e-5, atol=1e-5)


def test_prefill_chunks_of_different_sizes_in_one_step(tmp_path: Path) -> None:
    """A long chunk over a cached context, short whole prompts and decode tokens in one step:
    the chunks attend in more than one padded batch, each row masked to its own sequence, and
    every sequence's logits (and the cache it leaves for its next token) equal it alone."""
    from inferd.backends.llm.model import _attention_batches

    folder = write_tiny_llama(tmp_path / "m")
    hf = load_hf(folder)
    ours = LlamaModel.load(folder, dtype=torch.float64)
    cache = _cache(ours)
    long = [(7 * i) % 250 + 3 for i in range(40)]
    shorts = [[11, 12], [21, 22, 23, 24, 25], [31, 32, 33]]
    decoder = [50, 51, 52, 53, 54, 55]
    table = list(range(11))  # the long sequence's 41 tokens
    ours.step([StepSequence(long[:16], 0, table)], cache)
    ours.step([StepSequence(decoder[:-1], 0, [20, 21])], cache)
    seqs = [
        StepSequence(shorts[0], 0, [12]),
        StepSequence(long[16:], 16, table),
        StepSequence(decoder[-1:], 5, [20, 21]),
        StepSequence(shorts[1], 0, [13, 14]),
        StepSequence(shorts[2], 0, [15]),
    ]
    batches = _attention_batches([len(s.tokens) for s in seqs], [s.start for s in seqs])
    assert sorted(i for b in batches for i in b) == list(range(len(seqs)))
    assert len(batches) >= 3  # the decode token, the short prompts, the long chunk
    logits = ours.step(seqs, cache)
    for row, ids in zip(logits, [shorts[0], long, decoder, shorts[1], shorts[2]], strict=True):
        torch.testing.assert_close(row.double(), _hf_logits(hf, ids)[-1], rtol=1e-5, atol=1e-5)
    # the next token of each reads the K/V every row of the step wrote
    nxt = ours.step(
        [
            StepSequence([9], 40, table),
            StepSequence([9], 5, [13, 14]),
        ],
        cache,
    )
    torch.testing.assert_close(
        nxt[0].double(), _hf_logits(hf, [*long, 9])[-1], rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(
        nxt[1].double(), _hf_logits(hf, [*shorts[1], 9])[-1], rtol=1e-5, atol=1e-5
    )
