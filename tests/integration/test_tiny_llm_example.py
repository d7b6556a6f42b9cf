"""The example language model ``tiny_llm``: built by the project, loaded by Hugging Face
transformers offline, its chat template and tokenizer, its text, the determinism of its build and
its place in ``build_examples``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from inferd.codecs.model_config import parse_pbtxt
from inferd.examples.build import build_examples
from inferd.examples.tiny_llm import (
    LLM_MODEL_NAMES,
    SPECIAL_TOKENS,
    TinyLlmRecipe,
    build_tiny_llm,
    tiny_llm_corpus,
    tiny_llm_is_built,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MODEL = LLM_MODEL_NAMES[0]
_WORD = re.compile(r"[A-Za-z]+")
_HF_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


@pytest.fixture(scope="module")
def weights(tiny_llm_repo: Path) -> Path:
    return tiny_llm_repo / MODEL / "1"


@pytest.fixture(scope="module")
def tokenizer(weights: Path) -> Any:
    return AutoTokenizer.from_pretrained(str(weights), local_files_only=True)


@pytest.fixture(scope="module")
def model(weights: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(str(weights), local_files_only=True).eval()


def test_the_folder_is_a_decoupled_llm_model_with_vllm_io(tiny_llm_repo: Path) -> None:
    folder = tiny_llm_repo / MODEL
    assert {"1", "config.pbtxt"} <= {p.name for p in folder.iterdir()}
    for name in _HF_FILES:  # /v1 reads the tokenizer and chat template from 1/ too
        assert (folder / "1" / name).is_file(), name
    config = parse_pbtxt((folder / "config.pbtxt").read_text(), "config.pbtxt")
    assert (config.name, config.backend, config.max_batch_size) == (MODEL, "llm", 0)
    assert config.model_transaction_policy.decoupled
    inputs = {i.name: (i.data_type, list(i.dims), i.optional) for i in config.input}
    bytes_type, bool_type = 13, 1  # TYPE_STRING, TYPE_BOOL
    assert inputs == {
        "text_input": (bytes_type, [1], False),
        "stream": (bool_type, [1], True),
        "sampling_parameters": (bytes_type, [1], True),
        "exclude_input_in_output": (bool_type, [1], True),
        "return_logprobs": (bool_type, [1], True),
    }
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        ("text_output", bytes_type, [-1]),
        ("logprobs", bytes_type, [-1]),
    ]
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    assert set(parameters) == {"max_model_len", "max_running", "kv_cache_bytes", "dtype"}
    hf = json.loads((folder / "1" / "config.json").read_text())
    assert int(parameters["max_model_len"]) == hf["max_position_embeddings"]
    head_dim = hf["hidden_size"] // hf["num_attention_heads"]
    per_token = hf["num_hidden_layers"] * 2 * hf["num_key_value_heads"] * head_dim * 4
    assert int(parameters["kv_cache_bytes"]) >= per_token * hf["max_position_embeddings"]
    assert parameters["dtype"] == "float32"


def test_transformers_loads_a_llama_with_untied_head(model: Any, weights: Path) -> None:
    config = model.config
    assert config.model_type == "llama"
    assert (config.num_hidden_layers, config.hidden_size) == (4, 128)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    assert not config.tie_word_embeddings
    from safetensors import safe_open

    with safe_open(str(weights / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert {"lm_head.weight", "model.embed_tokens.weight"} <= names
    generation = json.loads((weights / "generation_config.json").read_text())
    assert set(generation["eos_token_id"]) == {
        json.loads((weights / "tokenizer.json").read_text())["model"]["vocab"][t]
        for t in ("</s>", "<|end|>")
    }


def test_the_chat_template_renders_turns_with_the_special_tokens(tokenizer: Any) -> None:
    messages = [
        {"role": "system", "content": "You describe servers."},
        {"role": "user", "content": "What does the batcher do?"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|system|>\nYou describe servers.<|end|>\n"
        "<|user|>\nWhat does the batcher do?<|end|>\n<|assistant|>\n"
    )
    without = tokenizer.apply_chat_template(messages, tokenize=False)
    assert without == text.removesuffix("<|assistant|>\n")
    # encoded as the runtime encodes a prompt: the tokenizer adds the one <s>
    ids = tokenizer(text).input_ids
    specials = {tokenizer.convert_tokens_to_ids(t): t for t in SPECIAL_TOKENS}
    assert [specials[i] for i in ids if i in specials] == [
        "<s>",
        "<|system|>",
        "<|end|>",
        "<|user|>",
        "<|end|>",
        "<|assistant|>",
    ]
    with pytest.raises(Exception, match="roles are system, user and assistant"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


@pytest.mark.parametrize(
    "text",
    [
        "The dynamic batcher groups requests that arrive together.",
        "  leading spaces, tabs\tand\nnew lines  ",
        "naïve café — 東京 🚀 données",
        'def f(x: int) -> dict[str, "y"]: return {"a": x ** 2}',
        "",
    ],
)
def test_the_tokenizer_round_trips_text(tokenizer: Any, text: str) -> None:
    ids = tokenizer(text, add_special_tokens=True).input_ids
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids) == text


def _greedy(model: Any, tokenizer: Any, prompt: str, new_tokens: int) -> str:
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
    text: str = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    return text


def test_greedy_generation_from_a_corpus_prefix_writes_corpus_words(
    model: Any, tokenizer: Any
) -> None:
    corpus = tiny_llm_corpus()
    vocabulary = {w.lower() for s in corpus for w in _WORD.findall(s)}
    prompts = [" ".join(s.split()[:3]) for s in corpus[::97][:6]]
    generated = [_greedy(model, tokenizer, p, 32) for p in prompts]
    words = [w.lower() for text in generated for w in _WORD.findall(text)]
    assert len(words) >= 6 * len(prompts), generated
    known = sum(w in vocabulary for w in words) / len(words)
    assert known >= 0.9, (known, generated)


def test_a_chat_prompt_is_answered_with_corpus_text_that_ends(model: Any, tokenizer: Any) -> None:
    corpus = tiny_llm_corpus()
    vocabulary = {w.lower() for s in corpus for w in _WORD.findall(s)}
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": corpus[0]}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt").input_ids  # as the runtime encodes it
    assert ids[0].tolist().count(tokenizer.bos_token_id) == 1
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=96, do_sample=False)
    new = out[0, ids.shape[1] :].tolist()
    assert new[-1] in model.generation_config.eos_token_id, tokenizer.decode(new)
    words = [w.lower() for w in _WORD.findall(tokenizer.decode(new, skip_special_tokens=True))]
    assert words, tokenizer.decode(new)
    assert sum(w in vocabulary for w in words) / len(words) >= 0.9, words


_QUICK = TinyLlmRecipe(steps=3, batch=2, seq_len=32)


def _bytes(folder: Path) -> dict[str, bytes]:
    return {name: (folder / "1" / name).read_bytes() for name in _HF_FILES}


def test_the_build_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    corpus = tiny_llm_corpus()  # read once: the project's docstrings may change meanwhile
    first = build_tiny_llm(MODEL, tmp_path / "a" / MODEL, _QUICK, corpus=corpus)
    build_tiny_llm(MODEL, tmp_path / "b" / MODEL, _QUICK, corpus=corpus)
    other = TinyLlmRecipe(seed=1, steps=_QUICK.steps, batch=_QUICK.batch, seq_len=_QUICK.seq_len)
    build_tiny_llm(MODEL, tmp_path / "c" / MODEL, other, corpus=corpus)
    a, b, c = (_bytes(tmp_path / x / MODEL) for x in "abc")
    assert a == b, [name for name in a if a[name] != b[name]]
    assert a["model.safetensors"] != c["model.safetensors"]
    assert a["tokenizer.json"] == c["tokenizer.json"]  # the tokenizer depends on the corpus only
    assert "loss" in first.note
    # nothing beside config.pbtxt: /v1 reads the tokenizer files from the version folder
    assert sorted(p.name for p in (tmp_path / "a" / MODEL).iterdir()) == ["1", "config.pbtxt"]
    assert tiny_llm_is_built(tmp_path / "a" / MODEL, _QUICK)
    assert not tiny_llm_is_built(tmp_path / "a" / MODEL)  # not the example's recipe
    assert not tiny_llm_is_built(tmp_path / "c" / MODEL, _QUICK)  # another seed


def test_build_examples_keeps_a_tiny_llm_already_built(
    tiny_llm_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(tiny_llm_repo / MODEL, tmp_path / MODEL)
    before = (tmp_path / MODEL / "1" / "model.safetensors").stat().st_mtime_ns
    assert build_examples(tmp_path, names=LLM_MODEL_NAMES) == []
    assert "tiny_llm: already built" in capsys.readouterr().out
    assert (tmp_path / MODEL / "1" / "model.safetensors").stat().st_mtime_ns == before
    marker = tmp_path / MODEL / "1" / "inferd_build.json"
    stale = json.loads(marker.read_text())
    stale["recipe"]["seed"] += 1
    marker.write_text(json.dumps(stale))
    with pytest.raises(Exception, match="already exist"):
        build_examples(tmp_path, names=LLM_MODEL_NAMES)


def test_the_module_command_keeps_a_current_build_and_refuses_a_stale_one(
    tiny_llm_repo: Path, tmp_path: Path
) -> None:
    shutil.copytree(tiny_llm_repo / MODEL, tmp_path / MODEL)
    command = [sys.executable, "-m", "inferd.examples.tiny_llm", "--output", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "tiny_llm: already built (same seed and recipe), kept" in done.stdout
    marker = tmp_path / MODEL / "1" / "inferd_build.json"
    stale = json.loads(marker.read_text())
    stale["recipe_version"] = 0
    marker.write_text(json.dumps(stale))
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "tiny_llm already exist" in done.stderr
    assert "--force" in done.stderr
