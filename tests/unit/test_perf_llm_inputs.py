"""The prompts of ``inferd perf -i openai``: AIPerf's JSONL shape, synthetic prompts of set
token lengths, and token counting by a tokenizer or by words."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.llm_inputs import (
    WORDS,
    EndpointType,
    HfTokenizerCounter,
    LlmOptions,
    WordCounter,
    parse_jsonl,
    synthetic_prompts,
)


def test_jsonl_text_and_messages_lines() -> None:
    text = (
        '{"text": "one two three"}\n'
        "\n"
        '{"messages": [{"role": "system", "content": "be brief"}, '
        '{"role": "user", "content": "hello there"}]}\n'
    )
    options = LlmOptions(endpoint=EndpointType.CHAT, output_tokens_mean=7)
    prompts = parse_jsonl(text, options, WordCounter(), seed=0)
    assert len(prompts) == 2
    # chat: a text line becomes one user message
    assert prompts[0].messages == ({"role": "user", "content": "one two three"},)
    assert prompts[0].input_tokens == 3
    assert prompts[1].messages is not None
    assert len(prompts[1].messages) == 2
    assert prompts[1].input_tokens == 4  # "be brief" + "hello there"
    assert {p.max_tokens for p in prompts} == {7}


@pytest.mark.parametrize(
    ("line", "endpoint", "message"),
    [
        ("not json", EndpointType.CHAT, "line 1: not JSON"),
        ("[1, 2]", EndpointType.CHAT, "line 1: not a JSON object"),
        ('{"prompt": "x"}', EndpointType.CHAT, "exactly one of 'text' and 'messages'"),
        ('{"text": 5}', EndpointType.COMPLETIONS, "'text' must be a string"),
        ('{"messages": "hi"}', EndpointType.CHAT, "'messages' must be a list"),
        (
            '{"messages": [{"role": "user", "content": "x"}]}',
            EndpointType.COMPLETIONS,
            "'messages' needs --endpoint-type chat",
        ),
        ("", EndpointType.CHAT, "holds no prompts"),
    ],
)
def test_jsonl_refusals_name_the_line(line: str, endpoint: EndpointType, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_jsonl(line, LlmOptions(endpoint=endpoint), WordCounter(), seed=0)


def test_synthetic_prompts_have_the_asked_word_counts_without_a_tokenizer() -> None:
    options = LlmOptions(endpoint=EndpointType.COMPLETIONS, input_tokens_mean=12, num_prompts=5)
    prompts = synthetic_prompts(options, WordCounter(), seed=3)
    assert len(prompts) == 5
    assert all(p.text is not None and len(p.text.split()) == 12 for p in prompts)
    assert all(p.input_tokens == 12 and p.max_tokens is None for p in prompts)
    assert synthetic_prompts(options, WordCounter(), seed=3) == prompts  # the seed decides


def test_synthetic_lengths_vary_with_a_stddev_and_stay_positive() -> None:
    options = LlmOptions(
        endpoint=EndpointType.COMPLETIONS,
        input_tokens_mean=3,
        input_tokens_stddev=5,
        output_tokens_mean=20,
        output_tokens_stddev=4,
        num_prompts=200,
    )
    prompts = synthetic_prompts(options, WordCounter(), seed=1)
    lengths = [p.input_tokens for p in prompts]
    assert min(lengths) >= 1
    assert len(set(lengths)) > 3
    assert all(p.max_tokens is not None and p.max_tokens >= 1 for p in prompts)
    assert len({p.max_tokens for p in prompts}) > 3


def test_synthetic_prompts_have_exact_token_counts_with_a_tokenizer(tmp_path: Path) -> None:
    # byte-level BPE with a small vocabulary (as GPT-style models): words take several tokens
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator([" ".join(WORDS)] * 3, trainer)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    counter = HfTokenizerCounter(tmp_path)  # the folder holding tokenizer.json
    options = LlmOptions(endpoint=EndpointType.CHAT, input_tokens_mean=25, num_prompts=4)
    prompts = synthetic_prompts(options, counter, seed=0)
    assert all(p.input_tokens == 25 for p in prompts)
    assert all(p.messages is not None for p in prompts)
    assert all(len((p.text or "").split()) < 25 for p in prompts)  # fewer words than tokens


def test_an_unreadable_tokenizer_is_refused_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not a tokenizer")
    with pytest.raises(InvalidArgumentError, match=r"cannot read .*tokenizer\.json"):
        HfTokenizerCounter(bad)
