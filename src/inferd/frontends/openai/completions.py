"""``POST /v1/completions`` and ``POST /v1/chat/completions``: their answers, whole or streamed.

Both run ``n`` choices of one prompt on a text model (:mod:`.generation`) — for chat, the
messages rendered with the model's chat template (:mod:`.tokenizer`). Whole answers wait for
every choice; streamed ones are server-sent events, one chunk per delta as the model produces
it, ``data: [DONE]`` last, with a usage chunk before it when ``stream_options.include_usage``
asks. ``usage`` is counted with the model's tokenizer (and left out when the model has none).
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
from inferd.frontends.openai.models import ModelCatalog
from inferd.frontends.openai.schemas import ChatRequest, CompletionRequest, TextRequest
from inferd.frontends.openai.tokenizer import TextTokenizer, TokenizerStore


@dataclass(slots=True)
class Prepared:
    """A checked request, ready to run: its prompt and what it is answered with."""

    engine: Engine
    spec: ModelSpec
    request: TextRequest
    prompt: str
    tokenizer: TextTokenizer
    chat: bool
    id: str
    created: int

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
    tokenizer = await tokenizers.get(spec.name)
    chat = isinstance(request, ChatRequest)
    prompt = tokenizer.render(request.messages) if chat else request.prompt  # type: ignore[union-attr]
    check_honoured(spec, request, tokenizer)
    prefix = "chatcmpl-" if chat else "cmpl-"
    return Prepared(
        engine, spec, request, prompt, tokenizer, chat, prefix + uuid.uuid4().hex, int(time.time())
    )


def _usage(prepared: Prepared, completions: list[str]) -> dict[str, int] | None:
    if not prepared.tokenizer.counts:
        return None
    prompt = prepared.tokenizer.count(prepared.prompt)
    completion = sum(prepared.tokenizer.count(text) for text in completions)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def _choice(prepared: Prepared) -> tuple[str, str]:
    texts: list[str] = []
    reason = "stop"
    events = deltas(
        prepared.engine, prepared.spec, prepared.request, prepared.prompt, prepared.tokenizer
    )
    async with contextlib.aclosing(events) as stream:
        async for delta in stream:
            texts.append(delta.text)
            reason = delta.finish_reason or reason
    return "".join(texts), reason


async def answer(prepared: Prepared) -> dict[str, Any]:
    """The whole answer: every choice run to its end (concurrently when ``n`` > 1)."""
    n = prepared.request.n
    if n == 1:
        results = [await _choice(prepared)]
    else:
        tasks = [asyncio.ensure_future(_choice(prepared)) for _ in range(n)]
        try:
            results = list(await asyncio.gather(*tasks))
        finally:  # one choice failed, or the client left: the others' requests are cancelled
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    choices = []
    for index, (text, reason) in enumerate(results):
        if prepared.chat:
            choices.append(
                {
                    "index": index,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": reason,
                }
            )
        else:
            choices.append(
                {"index": index, "text": text, "logprobs": None, "finish_reason": reason}
            )
    body: dict[str, Any] = {
        "id": prepared.id,
        "object": prepared.object,
        "created": prepared.created,
        "model": prepared.request.model,
        "choices": choices,
    }
    usage = _usage(prepared, [text for text, _ in results])
    if usage is not None:
        body["usage"] = usage
    return body


async def _merged(prepared: Prepared) -> AsyncGenerator[tuple[int, Delta], None]:
    """The deltas of every choice, as they come, with the choice's index."""
    spec = prepared.spec
    n = prepared.request.n
    if n == 1:
        events = deltas(
            prepared.engine, spec, prepared.request, prepared.prompt, prepared.tokenizer
        )
        async with contextlib.aclosing(events) as stream:
            async for delta in stream:
                yield 0, delta
        return
    queue: asyncio.Queue[tuple[int, Delta] | BaseException | None] = asyncio.Queue()

    async def run(index: int) -> None:
        events = deltas(
            prepared.engine, spec, prepared.request, prepared.prompt, prepared.tokenizer
        )
        try:
            async with contextlib.aclosing(events) as stream:
                async for delta in stream:
                    await queue.put((index, delta))
        except Exception as exc:
            await queue.put(exc)
        else:
            await queue.put(None)

    tasks = [asyncio.ensure_future(run(i)) for i in range(n)]
    try:
        running = n
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
    texts = [""] * prepared.request.n
    roles = [False] * prepared.request.n
    async with contextlib.aclosing(_merged(prepared)) as merged:
        async for index, delta in merged:
            texts[index] += delta.text
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
                    "logprobs": None,
                    "finish_reason": delta.finish_reason,
                }
            else:
                choice = {
                    "index": index,
                    "text": delta.text,
                    "logprobs": None,
                    "finish_reason": delta.finish_reason,
                }
            yield _chunk(prepared, [choice])
    if prepared.request.include_usage:
        last = _chunk(prepared, [])
        last["usage"] = _usage(prepared, texts)
        yield last


__all__ = ["Prepared", "answer", "chunks", "prepare"]
