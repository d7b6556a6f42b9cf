"""The operator's ceilings on ``/v1`` requests (``--openai-max-tokens``, ``--openai-max-n``,
``--openai-max-body-size``). A request past one is refused with a 400 naming it."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_TOKENS = 4096
DEFAULT_MAX_N = 8
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_STOP_SEQUENCES = 4  # as OpenAI's API allows


@dataclass(frozen=True, slots=True)
class OpenAILimits:
    max_tokens: int = DEFAULT_MAX_TOKENS  # the largest max_tokens / max_completion_tokens
    max_n: int = DEFAULT_MAX_N  # the most choices one request may ask for
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # the largest request body

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_n", "max_body_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"the OpenAI API's {name} limit must be positive")


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_N",
    "DEFAULT_MAX_TOKENS",
    "MAX_STOP_SEQUENCES",
    "OpenAILimits",
]
