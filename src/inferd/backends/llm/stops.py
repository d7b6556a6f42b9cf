"""When a sequence ends, and what text it emits token by token (one checker per sequence).

Incremental detokenization: the text of each new token is the decoding of the sequence's ids
from a prefix offset a few tokens back, minus the decoding of that prefix, so tokenizers whose
pieces depend on their neighbours (byte-level BPE, Metaspace) decode as a whole text would. A
token that ends inside a multi-byte UTF-8 character (its decoding ends in U+FFFD) is held until
the character is complete. When four or more tokens are held, the text is emitted up to the
last token boundary where it is whole, or, in a run of tokens that each end inside a character
(byte-level merges across characters), all but its last, incomplete character. U+FFFD is
emitted only for bytes that can never form a character (and, to bound the window, for 64 held
tokens that never become whole text).

Stop strings are matched in the emitted text, across token boundaries: the longest tail that
could still begin a stop string is held back; on a match the text before it is emitted (with
the stop string when ``include_stop_str_in_output``) and the sequence finishes with "stop". A
stop token id, or an EOS id unless ``ignore_eos``, finishes it with "stop" too, its own text
left out (vLLM's behaviour). No stop applies before ``min_tokens`` tokens. ``max_tokens`` tokens
finish it with "length", the held-back text emitted.
"""

from __future__ import annotations

from collections.abc import Sequence

import tokenizers

from inferd.backends.llm.params import SamplingParams

_REPLACEMENT = "\ufffd"
# tokens of the prompt decoded before the first generated one (vLLM's initial offset)
_PROMPT_CONTEXT = 5
# held tokens after which a complete-text split is searched for (an incomplete UTF-8
# character spans at most 4 bytes, hence at most 4 tokens)
_SPLIT_AFTER = 4
# held tokens after which they are emitted as they decode, U+FFFD and all
_FORCE_AFTER = 64


class StopChecker:
    """Turns one sequence's generated ids into text and decides when it finishes."""

    def __init__(
        self,
        tokenizer: tokenizers.Tokenizer,
        params: SamplingParams,
        eos_ids: frozenset[int],
        prompt_ids: Sequence[int],
    ) -> None:
        self._tokenizer = tokenizer
        self._params = params
        self._stop_ids = frozenset(params.stop_token_ids) | (
            frozenset() if params.ignore_eos else eos_ids
        )
        context = list(prompt_ids[max(len(prompt_ids) - _PROMPT_CONTEXT, 0) :])
        # ids from the prefix offset on: _ids[:_read] is decoded and emitted (or held)
        self._ids: list[int] = context
        self._read = len(context)
        self._prefix_text = self._decode(self._ids)
        self._sent = 0  # characters emitted past _prefix_text while tokens are held
        self._stops = params.stop
        self._starts = frozenset(s[0] for s in params.stop)
        self._max_stop = max((len(s) for s in params.stop), default=0)
        self._held = ""  # decoded text that may begin a stop string
        self.generated = 0
        self.finish_reason: str | None = None

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(
            list(ids), skip_special_tokens=self._params.skip_special_tokens
        )

    def suppressed(self) -> frozenset[int]:
        """Ids the sampler should not pick next: EOS and stop ids while under ``min_tokens``."""
        if self.generated < self._params.min_tokens:
            return self._stop_ids
        return frozenset()

    def _detokenize(self, token_id: int) -> str:
        """The new complete text once ``token_id`` is appended."""
        self._ids.append(token_id)
        text = self._decode(self._ids)
        if not text.endswith(_REPLACEMENT):
            return self._advance(text, len(self._ids))
        pending = len(self._ids) - self._read
        if pending < _SPLIT_AFTER:
            return ""
        if self._sent == 0:
            # emit up to the last token boundary where the text is whole
            for end in range(len(self._ids) - 1, self._read, -1):
                partial = self._decode(self._ids[:end])
                if not partial.endswith(_REPLACEMENT):
                    return self._advance(partial, end)
        if pending >= _FORCE_AFTER:
            # bytes that never form a character (a model emitting garbage): emit them as
            # U+FFFD and start afresh, so the window stays bounded
            new = text[len(self._prefix_text) + self._sent :]
            self._ids, self._read, self._prefix_text, self._sent = [], 0, "", 0
            return new
        # a run of tokens that each end inside a character (byte-level merges across
        # characters): all but the last, incomplete character is final
        body = text[len(self._prefix_text) : -1]
        new = body[self._sent :]
        self._sent = max(self._sent, len(body))
        return new

    def _advance(self, text: str, end: int) -> str:
        """Emit ``text`` (the decoding of ``_ids[:end]``) past the prefix and what was sent
        of it; move the offsets."""
        new = text[len(self._prefix_text) + self._sent :]
        self._sent = 0
        del self._ids[: self._read]
        end -= self._read
        self._read = end
        self._prefix_text = self._decode(self._ids[:end])
        return new

    def _flush_tokens(self) -> str:
        """Whatever the held tokens decode to, U+FFFD included (nothing more will come)."""
        if len(self._ids) == self._read:
            return ""
        return self._advance(self._decode(self._ids), len(self._ids))

    def _scan(self, text: str, final: bool) -> tuple[str, bool]:
        """(text to emit, whether a stop string matched) with ``text`` appended to the held."""
        buffer = self._held + text
        self._held = ""
        if not self._stops:
            return buffer, False
        matches = [(i, s) for s in self._stops if (i := buffer.find(s)) >= 0]
        if matches:
            at, stop = min(matches, key=lambda m: (m[0], -len(m[1])))
            end = at + len(stop) if self._params.include_stop_str_in_output else at
            return buffer[:end], True
        if final:
            return buffer, False
        # hold the longest tail that is the start of some stop string
        first = max(len(buffer) - self._max_stop + 1, 0)
        for start in range(first, len(buffer)):
            if buffer[start] in self._starts:
                tail = buffer[start:]
                if any(s.startswith(tail) for s in self._stops):
                    self._held = tail
                    return buffer[:start], False
        return buffer, False

    def push(self, token_id: int) -> tuple[str, str | None]:
        """Take the next generated token: (text to emit now, finish reason or None)."""
        if self.finish_reason is not None:
            return "", self.finish_reason
        self.generated += 1
        active = self.generated > self._params.min_tokens
        stop_token = active and token_id in self._stop_ids
        if stop_token and not self._params.include_stop_str_in_output:
            text = self._flush_tokens()
        else:
            text = self._detokenize(token_id)
        at_length = self.generated >= self._params.max_tokens
        if stop_token or at_length:
            text += self._flush_tokens()
        final = stop_token or at_length
        if active:
            out, matched = self._scan(text, final)
            if matched:
                self.finish_reason = "stop"
                return out, "stop"
        else:
            out = self._held + text
            self._held = ""
        if stop_token:
            self.finish_reason = "stop"
        elif at_length:
            self.finish_reason = "length"
        return out, self.finish_reason

    def flush(self) -> str:
        """The text still held, for a sequence ended from outside (model length, cancel); its
        finish reason becomes "length" ("stop" if the held text completes a stop string).
        Nothing once the sequence has finished."""
        if self.finish_reason is not None:
            return ""
        self.finish_reason = "length"
        text = self._flush_tokens()
        if self.generated <= self._params.min_tokens:
            out, self._held = self._held + text, ""
            return out
        out, matched = self._scan(text, final=True)
        if matched:
            self.finish_reason = "stop"
        return out


__all__ = ["StopChecker"]
