"""The chosen tokens' log probabilities: read from a model's ``logprobs`` output (the JSON of
Triton's vLLM backend) and shaped as OpenAI answers them (pure).

Triton's vLLM backend answers ``return_logprobs`` = true with a ``logprobs`` output (BYTES): per
response, a JSON array with one object per token generated since the previous response,
``{"<token id>": {"logprob": float, "rank": int, "decoded_token": str}, ...}`` holding the chosen
token (and, in vLLM, up to ``logprobs`` alternatives; inferd asks for none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from inferd.errors import InternalError


@dataclass(frozen=True, slots=True)
class Token:
    """One generated token: its text and log probability."""

    text: str
    logprob: float


def parse_tokens(output: Any) -> list[Token]:
    """The tokens of one response's ``logprobs`` output (an array of JSON texts)."""
    tokens: list[Token] = []
    for item in output.reshape(-1):
        raw = item if isinstance(item, bytes | str) else str(item)
        try:
            entries = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InternalError(f"the model's 'logprobs' output is not JSON: {exc}") from None
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise InternalError("the model's 'logprobs' output must be a JSON array")
        for entry in entries:
            tokens.append(_chosen(entry))
    return tokens


def _chosen(entry: Any) -> Token:
    if not isinstance(entry, dict) or not entry:
        raise InternalError("each 'logprobs' entry must be an object of token ids")
    # the chosen token is listed first (rank is its rank among all tokens, not 1 when sampled)
    value = next(iter(entry.values()))
    if not isinstance(value, dict):
        raise InternalError("each 'logprobs' token must be an object")
    text = value.get("decoded_token")
    logprob = value.get("logprob")
    if not isinstance(text, str) or not isinstance(logprob, int | float):
        raise InternalError("each 'logprobs' token needs 'decoded_token' and 'logprob'")
    return Token(text, float(logprob))


def within(tokens: Sequence[Token], length: int) -> list[Token]:
    """The tokens that begin within the first ``length`` characters of their text (the text was
    cut by a stop sequence or ``max_tokens``)."""
    kept: list[Token] = []
    start = 0
    for token in tokens:
        if start >= length:
            break
        kept.append(clipped(token, length - start))
        start += len(token.text)
    return kept


def clipped(token: Token, length: int) -> Token:
    """``token`` with its text cut to ``length`` characters (the text sent ends inside it)."""
    return token if len(token.text) <= length else Token(token.text[:length], token.logprob)


def shaped(tokens: Sequence[Token] | None, chat: bool, offset: int = 0) -> dict[str, Any] | None:
    """OpenAI's ``logprobs`` of a choice (or a streamed delta starting at ``offset``)."""
    if tokens is None:
        return None
    if chat:
        return {
            "content": [
                {
                    "token": t.text,
                    "logprob": t.logprob,
                    "bytes": list(t.text.encode("utf-8")),
                    "top_logprobs": [],
                }
                for t in tokens
            ],
            "refusal": None,
        }
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.text)
    return {
        "tokens": [t.text for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": None,
        "text_offset": offsets,
    }


__all__ = ["Token", "clipped", "parse_tokens", "shaped", "within"]
