"""A random tiny Llama (Hugging Face format) and a byte-level BPE tokenizer trained here, for the
generation runtime's tests: built in a second or two, deterministic from its seed."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "inference servers batch requests and stream tokens to their clients",
    "a key value cache keeps the attention state of every running sequence",
    "continuous batching admits new sequences while others are decoding",
    "hello world, hello server, hello model",
] * 20

VOCAB = 320


def write_tiny_llama(
    folder: Path,
    *,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    tie: bool = False,
    rope_theta: float = 10000.0,
    max_positions: int = 512,
) -> Path:
    """Write config.json, model.safetensors, tokenizer.json and generation_config.json into
    ``folder``; return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie,
        rope_theta=rope_theta,
        bos_token_id=1,
        eos_token_id=2,
    )
    config.rope_parameters = {"rope_theta": rope_theta, "rope_type": "default"}
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger weights than the default init: logits far from uniform
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.15)
    model.save_pretrained(folder)
    warm_paged_attention()
    return folder


def warm_paged_attention() -> None:
    """Build (or load) the llm backend's CPU decode-attention kernel once in this process, so
    that the servers a test starts next find it in torch's extension cache instead of compiling
    it within their start-up timeout (a no-op after the first call, or without a compiler)."""
    from inferd.backends.llm import paged_attention

    paged_attention.load()


def load_hf(folder: Path, dtype: str = "float64"):  # type: ignore[no-untyped-def]
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    model.eval()
    return model
