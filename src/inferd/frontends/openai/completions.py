"""``POST /v1/completions`` and ``POST /v1/chat/completions``: their answers, whole or streamed.

Both run ``n`` choices of each prompt on a text model (:mod:`.generation`) — for chat, the
messages rendered with the model's chat template (:mod:`.tokenizer`); a completion's prompts
given as token ids are decoded with the model's tokenizer. Choices are numbered as OpenAI
numbers them: prompt by prompt, ``n`` each (``index`` = prompt * n + j). Whole answers wait for
every choice; streamed ones are server-sent events, one chunk per delta as the model produces
it, ``data: [DONE]`` last, with a usage chunk before it when ``stream_options.include_usage``
asks. ``usage`` is the model's own count when it reports one (Triton's vLLM backend's
``num_input_tokens`` and ``num_output_tokens``), else counted with the model's tokenizer (and left
out when the model has none): each prompt once, as the model reads it (the chat template applied,
with the special tokens its tokenizer adds), and every choice's text. ``logprobs`` are the
model's (its ``logprobs`` output).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from inferd.core.model_spec import ModelSpec
from inferd.engine import Engine
from inferd.frontends.openai.generation import Delta, check_honoured, deltas
from inferd.frontends.openai.logprobs import Token, shaped, within
from inferd.frontends.openai.models import ModelCatalog
from inferd.frontends.openai.schemas import ChatRequest, CompletionRequest, TextRequest
from inferd.frontends.openai.tokenizer import TextTokenizer, TokenizerStore


@dataclass(slots=True)
class Prepared:
    """A checked request, ready to run: its prompt and what it is answered with."""

    engine: Engine
    spec: ModelSpec
    request: TextRequest
    prompts: list[str]  # one per prompt; choice i runs prompts[i // n]
    tokenizer: TextTokenizer
    chat: bool
    id: str
    created: int

    @property
    def choices(self) -> int:
        return len(self.prompts) * self.request.n

    def prompt_of(self, index: int) -> str:
        return self.prompts[index // self.request.n]

    def deltas(self, index: int) -> AsyncGenerator[Delta, None]:
        return deltas(self.engine, self.spec, self.request, self.prompt_of(index), self.tokenizer)

    @property
    def object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    @property
    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"


async def prepare(
    engine: Engine,
    catalog: ModelCatalog,
    tokenizers: TokenizerStore,
    request: CompletionRequest | ChatRequest,
) -> Prepared:
    """Everything that may refuse the request, before the model runs."""
    spec = catalog.text_spec(request.model)
    tokenizer = await tokenizers.get(spec.name, catalog.version(spec.name))
    if isinstance(request, ChatRequest):
        prompts = [tokenizer.render(request.messages)]
    else:
        prompts = [
            p if isinstance(p, str) else tokenizer.decode(p, f"prompt[{i}]")
            for i, p in enumerate(request.prompts)
        ]
    chat = isinstance(request, ChatRequest)
    check_honoured(spec, request, tokenizer)
    prefix = "chatcmpl-" if chat else "cmpl-"
    return Prepared(
        engine, spec, request, prompts, tokenizer, chat, prefix + uuid.uuid4().hex, int(time.time())
    )


Counted = tuple[int, int] | None  # a choice's (prompt, generated) tokens, as the model counted


def _usage(
    prepared: Prepared, completions: list[str], counted: list[Counted]
) -> dict[str, int] | None:
    model_counts = [c for c in counted if c is not None]
    if len(model_counts) == len(counted):  # the model's own counts (each prompt once)
        n = prepared.request.n
        prompt = sum(c[0] for c in model_counts[::n])
        completion = sum(c[1] for c in model_counts)
    elif prepared.tokenizer.counts:
        prompt = sum(prepared.tokenizer.count_prompt(p) for p in prepared.prompts)
        completion = sum(prepared.tokenizer.count(text) for text in completions)
    else:
        return None
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def _choice(prepared: Prepared, index: int) -> tuple[str, str, list[Token] | None, Counted]:
    texts: list[str] = []
    tokens: list[Token] | None = [] if prepared.request.logprobs else None
    reason = "stop"
    counted: Counted = None
    async with contextlib.aclosing(prepared.deltas(index)) as stream:
        async for delta in stream:
            texts.append(delta.text)
            if tokens is not None:
                tokens.extend(delta.tokens)
            reason = delta.finish_reason or reason
            counted = delta.counted or counted
    text = "".join(texts)
    return text, reason, None if tokens is None else within(tokens, len(text)), counted


async def answer(prepared: Prepared) -> dict[str, Any]:
    """The whole answer: every choice run to its end (concurrently when there are several)."""
    count = prepared.choices
    if count == 1:
        results = [await _choice(prepared, 0)]
    else:
        tasks = [asyncio.ensure_future(_choice(prepared, i)) for i in range(count)]
        try:
            results = list(await asyncio.gather(*tasks))
        finally:  # one choice failed, or the client left: the others' requests are cancelled
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    choices = []
    for index, (text, reason, tokens, _) in enumerate(results):
        logprobs = shaped(tokens, prepared.chat)
        if prepared.chat:
            choices.append(
                {
                    "index": index,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": logprobs,
                    "finish_reason": reason,
                }
            )
        else:
            choices.append(
                {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}
            )
    body: dict[str, Any] = {
        "id": prepared.id,
        "object": prepared.object,
        "created": prepared.created,
        "model": prepared.request.model,
        "choices": choices,
    }
    usage = _usage(prepared, [r[0] for r in results], [r[3] for r in results])
    if usage is not None:
        body["usage"] = usage
    return body


async def _merged(prepared: Prepared) -> AsyncGenerator[tuple[int, Delta], None]:
    """The deltas of every choice, as they come, with the choice's index."""
    count = prepared.choices
    if count == 1:
        async with contextlib.aclosing(prepared.deltas(0)) as stream:
            async for delta in stream:
                yield 0, delta
        return
    queue: asyncio.Queue[tuple[int, Delta] | BaseException | None] = asyncio.Queue()

    async def run(index: int) -> None:
        try:
            async with contextlib.aclosing(prepared.deltas(index)) as stream:
                async for delta in stream:
                    await queue.put((index, delta))
        except Exception as exc:
            await queue.put(exc)
        else:
            await queue.put(None)

    tasks = [asyncio.ensure_future(run(i)) for i in range(count)]
    try:
        running = count
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _chunk(prepared: Prepared, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": prepared.id,
        "object": prepared.chunk_object,
        "created": prepared.created,
        "model": prepared.request.model,
        "choices": choices,
    }


async def chunks(prepared: Prepared) -> AsyncIterator[dict[str, Any]]:
    """The chunks of a streamed answer, in order (``[DONE]`` is the writer's)."""
    texts = [""] * prepared.choices
    roles = [False] * prepared.choices
    offsets = [0] * prepared.choices
    counted: list[Counted] = [None] * prepared.choices
    async with contextlib.aclosing(_merged(prepared)) as merged:
        async for index, delta in merged:
            logprobs = None
            if prepared.request.logprobs:
                logprobs = shaped(delta.tokens, prepared.chat, offsets[index])
                offsets[index] += len(delta.text)
            texts[index] += delta.text
            counted[index] = delta.counted or counted[index]
            if prepared.chat and not roles[index]:
                # the role first, as OpenAI sends it: once the model answers, so that a request
                # the model refuses at once is answered with an error status
                roles[index] = True
                role = {"role": "assistant", "content": ""}
                yield _chunk(
                    prepared,
                    [{"index": index, "delta": role, "logprobs": None, "finish_reason": None}],
                )
            if not delta.text and delta.finish_reason is None:
                continue
            if prepared.chat:
                choice: dict[str, Any] = {
                    "index": index,
                    "delta": {"content": delta.text} if delta.text else {},
                    "logprobs": logprobs,
                    "finish_reason": delta.finish_reason,
                }
            else:
                choice = {
                    "index": index,
                    "text": delta.text,
                    "logprobs": logprobs,
                    "finish_reason": delta.finish_reason,
                }
            yield _chunk(prepared, [choice])
    if prepared.request.include_usage:
        last = _chunk(prepared, [])
        last["usage"] = _usage(prepared, texts, counted)
        yield last


__all__ = ["Prepared", "answer", "chunks", "prepare"]
