"""What the ``openai`` transport sends: its options, its prompts and how tokens are counted.

Prompts come from a JSONL file in AIPerf's and genai-perf's shape (one object per line:
``{"text": "..."}`` or ``{"messages": [{"role": ..., "content": ...}, ...]}``), or are made up
here: ``num_prompts`` prompts whose lengths in tokens are drawn from a normal distribution
(mean and standard deviation, at least 1), made of common English words chosen with the run's
seed.

Tokens are counted with a Hugging Face ``tokenizer.json`` when one is given (the server model's
own, for exact counts), else approximated by whitespace-separated words; the run's notes say
which. A synthetic prompt built with a tokenizer is the decoded first N tokens of random words
(N its drawn length), so it has N tokens wherever decoding and encoding again round-trip (as
byte-level BPE does); without a tokenizer, N words. Each prompt's recorded length is counted
again from its text.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from inferd.errors import InvalidArgumentError


class EndpointType(enum.Enum):
    CHAT = "chat"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"

    @property
    def path(self) -> str:
        return {
            EndpointType.CHAT: "/v1/chat/completions",
            EndpointType.COMPLETIONS: "/v1/completions",
            EndpointType.EMBEDDINGS: "/v1/embeddings",
        }[self]


@dataclass(frozen=True)
class LlmOptions:
    """How the ``openai`` transport loads the model (``PerfOptions.llm``)."""

    endpoint: EndpointType = EndpointType.CHAT
    streaming: bool = False
    input_file: Path | None = None  # JSONL prompts; None: synthetic prompts
    input_tokens_mean: int = 550
    input_tokens_stddev: float = 0.0
    output_tokens_mean: int | None = None  # sent as max_tokens; None: not sent
    output_tokens_stddev: float = 0.0
    num_prompts: int = 100
    tokenizer: Path | None = None  # a tokenizer.json, or a folder holding one
    server_token_count: bool = False  # output tokens from the server's usage


@dataclass(frozen=True)
class Prompt:
    """One request's input: a text, or chat messages; its length in tokens; its max_tokens."""

    text: str | None
    messages: tuple[dict[str, Any], ...] | None
    input_tokens: int
    max_tokens: int | None


class TokenCounter(Protocol):
    description: str

    def count(self, text: str) -> int: ...


class WordCounter:
    """Whitespace-separated words: an approximation of tokens."""

    description = "approximated by whitespace-separated words (give --tokenizer for exact counts)"

    def count(self, text: str) -> int:
        return len(text.split())


class HfTokenizerCounter:
    """A Hugging Face ``tokenizer.json`` (the ``tokenizers`` package), special tokens left out."""

    def __init__(self, path: Path) -> None:
        file = path / "tokenizer.json" if path.is_dir() else path
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise InvalidArgumentError(
                "--tokenizer needs the tokenizers package: pip install 'inferd[embeddings]'"
            ) from None
        try:
            self._tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # tokenizers raises its own exceptions for a bad file
            raise InvalidArgumentError(
                f"--tokenizer: cannot read '{file}' as a Hugging Face tokenizer.json ({exc})"
            ) from None
        self.description = f"counted with the tokenizer {file}"

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def truncate(self, text: str, tokens: int) -> str:
        """``text`` cut to its first ``tokens`` tokens."""
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids[:tokens]
        return str(self._tokenizer.decode(ids))


def token_counter(path: Path | None) -> TokenCounter:
    return WordCounter() if path is None else HfTokenizerCounter(path)


# common English words, for synthetic prompts
_WORD_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have from "
    "or one had by word but not what all were we when your can said there use an each which "
    "she do how their if will up other about out many then them these so some her would make "
    "like him into time has look two more write go see number no way could people my than "
    "first water been call who oil its now find long down day did get come made may part over "
    "new sound take only little work know place year live me back give most very after thing "
    "our just name good sentence man think say great where help through much before line right "
    "too mean old any same tell boy follow came want show also around form three small set put "
    "end does another well large must big even such because turn here why ask went men read "
    "need land different home us move try kind hand picture again change off play spell air "
    "away animal house point page letter mother answer found study still learn should world"
)
WORDS = tuple(_WORD_TEXT.split())


def _lengths(rng: np.random.Generator, mean: float, stddev: float, n: int) -> list[int]:
    if stddev <= 0:
        return [max(1, round(mean))] * n
    return [max(1, round(v)) for v in rng.normal(mean, stddev, n)]


def synthetic_prompts(options: LlmOptions, counter: TokenCounter, seed: int) -> list[Prompt]:
    """``num_prompts`` prompts of drawn lengths (module docstring)."""
    rng = np.random.default_rng(seed)
    n = options.num_prompts
    lengths = _lengths(rng, options.input_tokens_mean, options.input_tokens_stddev, n)
    outputs = _max_tokens(rng, options, n)
    prompts = []
    for length, max_tokens in zip(lengths, outputs, strict=True):
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), length)]
        text = " ".join(words)
        if isinstance(counter, HfTokenizerCounter):
            # words may take several tokens each: the first `length` tokens of them
            text = counter.truncate(text, length)
        prompts.append(_prompt(options, text, None, counter, max_tokens))
    return prompts


def _max_tokens(rng: np.random.Generator, options: LlmOptions, n: int) -> list[int | None]:
    if options.output_tokens_mean is None:
        return [None] * n
    return list(_lengths(rng, options.output_tokens_mean, options.output_tokens_stddev, n))


def _prompt(
    options: LlmOptions,
    text: str | None,
    messages: tuple[dict[str, Any], ...] | None,
    counter: TokenCounter,
    max_tokens: int | None,
) -> Prompt:
    if options.endpoint is EndpointType.CHAT and messages is None:
        messages = ({"role": "user", "content": text},)
    counted = text if text is not None else _message_text(messages or ())
    return Prompt(
        text=text,
        messages=messages if options.endpoint is EndpointType.CHAT else None,
        input_tokens=counter.count(counted),
        max_tokens=max_tokens,
    )


def _message_text(messages: Sequence[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict)]
    return "\n".join(parts)


def parse_jsonl(text: str, options: LlmOptions, counter: TokenCounter, seed: int) -> list[Prompt]:
    """The prompts of a JSONL text; InvalidArgumentError naming the line at fault."""
    source = f"'{options.input_file}'" if options.input_file else "the input file"
    rng = np.random.default_rng(seed)
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(f"{source}, line {number}: not JSON ({exc})") from None
        if not isinstance(entry, dict):
            raise InvalidArgumentError(f"{source}, line {number}: not a JSON object")
        text_value, messages = entry.get("text"), entry.get("messages")
        if (text_value is None) == (messages is None):
            raise InvalidArgumentError(
                f"{source}, line {number}: give exactly one of 'text' and 'messages'"
            )
        if text_value is not None and not isinstance(text_value, str):
            raise InvalidArgumentError(f"{source}, line {number}: 'text' must be a string")
        chat: tuple[dict[str, Any], ...] | None = None
        if messages is not None:
            if not isinstance(messages, list) or not all(
                isinstance(m, dict) and "role" in m and "content" in m for m in messages
            ):
                raise InvalidArgumentError(
                    f"{source}, line {number}: 'messages' must be a list of objects with "
                    "'role' and 'content'"
                )
            if options.endpoint is not EndpointType.CHAT:
                raise InvalidArgumentError(
                    f"{source}, line {number}: 'messages' needs --endpoint-type chat"
                )
            chat = tuple(messages)
        (max_tokens,) = _max_tokens(rng, options, 1)
        prompts.append(_prompt(options, text_value, chat, counter, max_tokens))
    if not prompts:
        raise InvalidArgumentError(f"{source} holds no prompts")
    return prompts


def load_prompts(options: LlmOptions, counter: TokenCounter, seed: int) -> list[Prompt]:
    """The run's prompts: the input file's, or synthetic ones."""
    if options.input_file is None:
        return synthetic_prompts(options, counter, seed)
    try:
        text = options.input_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot read the input file '{options.input_file}': {exc.strerror}"
        ) from None
    return parse_jsonl(text, options, counter, seed)


__all__ = [
    "EndpointType",
    "HfTokenizerCounter",
    "LlmOptions",
    "Prompt",
    "TokenCounter",
    "WordCounter",
    "load_prompts",
    "parse_jsonl",
    "synthetic_prompts",
    "token_counter",
]
