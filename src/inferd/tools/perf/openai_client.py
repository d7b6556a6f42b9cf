"""The ``openai`` transport: load on a server's OpenAI-compatible API (``/v1``).

``/v1/chat/completions``, ``/v1/completions`` or ``/v1/embeddings``, streamed (server-sent
events) or not. Each :class:`OpenAIChannel` owns one keep-alive HTTP/1.1 connection (the
connection machinery of :mod:`connect`, httptools' parser); every request's bytes are built once
in :meth:`OpenAITransport.prepare`. While an answer arrives the connection only stamps each
piece of body with the time and keeps it; once the answer has ended, the events are split
(:mod:`sse`) and read for their text (and the ``usage`` of the last chunk when the server
counts tokens), so no JSON is parsed while the clock of that request runs.

Each answered request gives an :class:`~inferd.tools.perf.llm_metrics.LlmSample`; an error
status, or an error event within a stream, raises :class:`PerfRequestError` with the server's
message (the driver counts it).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

import httptools
import orjson

from inferd.client.endpoint import format_host
from inferd.client.headers import Headers, http_lines
from inferd.client.tls import HttpsSettings
from inferd.errors import InvalidArgumentError, PerfAccessError, PerfRequestError
from inferd.tools.perf import metadata
from inferd.tools.perf.connect import open_connection
from inferd.tools.perf.http_connection import HttpAnswerConnection
from inferd.tools.perf.llm_inputs import EndpointType, LlmOptions, Prompt, TokenCounter
from inferd.tools.perf.llm_metrics import LlmSample
from inferd.tools.perf.sse import events
from inferd.tools.perf.transport import ModelInfo, RequestData, SequenceFlags

DEFAULT_HTTP_PORT = 8000
_Pieces = list[tuple[int, bytes]]


class _Connection(HttpAnswerConnection):
    """One keep-alive connection carrying one request at a time; the answer's body pieces are
    kept with their arrival times."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Callable[[], int]) -> None:
        self._loop = loop
        self._clock = clock
        self._parser = httptools.HttpResponseParser(self)
        super().__init__()
        self._waiter: asyncio.Future[tuple[int, _Pieces]] | None = None
        self._pieces: _Pieces = []
        self._status = 0

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._pieces.append((self._clock(), body))

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        pieces, self._pieces = self._pieces, []
        if not self._parser.should_keep_alive():
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, pieces))

    def send(self, data: bytes) -> asyncio.Future[tuple[int, _Pieces]]:
        """Write one request; the future gives the status and the timestamped body pieces."""
        waiter = self._loop.create_future()
        if not self.open or self._transport is None:
            waiter.set_exception(PerfRequestError("the connection to the server is closed"))
            return waiter
        self._waiter = waiter
        self._transport.write(data)
        return waiter


def _body(options: LlmOptions, model: str, prompt: Prompt) -> dict[str, Any]:
    if options.endpoint is EndpointType.EMBEDDINGS:
        return {"model": model, "input": prompt.text}
    body: dict[str, Any] = {"model": model}
    if options.endpoint is EndpointType.CHAT:
        body["messages"] = list(prompt.messages or ())
    else:
        body["prompt"] = prompt.text
    if prompt.max_tokens is not None:
        body["max_tokens"] = prompt.max_tokens
    if options.streaming:
        body["stream"] = True
        if options.server_token_count:
            body["stream_options"] = {"include_usage": True}
    return body


def _error_message(status: int, pieces: _Pieces) -> str:
    body = b"".join(p for _, p in pieces)
    try:
        answer = orjson.loads(body)
        error = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return f"HTTP {status}: {error['message']}"
    except orjson.JSONDecodeError:
        pass
    return metadata.error_text(status, body)


def _text_of(options: LlmOptions, answer: dict[str, Any]) -> str:
    """The text of a chunk or a whole answer (the first choice's)."""
    choices = answer.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    if options.endpoint is EndpointType.COMPLETIONS:
        return str(choice.get("text") or "")
    part = choice.get("delta") if options.streaming else choice.get("message")
    return str((part or {}).get("content") or "")


class OpenAITransport:
    """One model on a server's ``/v1`` API."""

    name = "openai"

    def __init__(
        self,
        url: str,
        model: str,
        options: LlmOptions,
        prompts: Sequence[Prompt],
        counter: TokenCounter,
        *,
        headers: Headers = (),
        tls: HttpsSettings | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if not prompts:
            raise InvalidArgumentError("the openai transport needs at least one prompt")
        self._host, self._port = metadata.split_url(url, DEFAULT_HTTP_PORT)
        if tls is None and metadata.is_https(url):
            tls = HttpsSettings()
        self._tls = tls
        self._ssl: ssl.SSLContext | None = None if tls is None else tls.context()
        self._extra = http_lines(headers)
        self._host_header = format_host(self._host, self._port).encode()
        self._model = model
        self.options = options
        self.prompts = list(prompts)
        self.counter = counter
        self.clock = clock
        self.notes: list[str] = []
        self._wires: list[bytes] = []
        self._channels: set[OpenAIChannel] = set()

    async def connect(self) -> _Connection:
        _, protocol = await open_connection(
            lambda loop: _Connection(loop, self.clock),
            self._host,
            self._port,
            context=self._ssl,
            tls=self._tls,
            over="HTTP",
        )
        return protocol

    def _request(self, method: bytes, path: str, body: bytes | None) -> bytes:
        lines = [b"%s %s HTTP/1.1" % (method, path.encode()), b"Host: " + self._host_header]
        if body is not None:
            lines.append(b"Content-Type: application/json")
            lines.append(b"Content-Length: %d" % len(body))
        return b"\r\n".join(lines) + b"\r\n" + self._extra + b"\r\n" + (body or b"")

    async def model_info(self) -> ModelInfo:
        """The model as ``/v1/models/{model}`` lists it. A model the server does not list is
        noted, not refused: its requests are counted as errors with the server's message."""
        conn = await self.connect()
        try:
            path = f"/v1/models/{quote(self._model, safe='')}"
            status, pieces = await conn.send(self._request(b"GET", path, None))
        finally:
            conn.close()
        if status in (401, 403):
            raise PerfAccessError(f"GET {path}: {_error_message(status, pieces)}")
        if status == 404:
            self.notes.append(
                f"the server does not list the model '{self._model}' under /v1/models: its "
                "requests are counted as errors"
            )
        elif status != 200:
            raise PerfRequestError(f"GET {path}: {_error_message(status, pieces)}")
        return ModelInfo(self._model, "", (), (), 0, False, False)

    async def prepare(
        self, requests: Sequence[RequestData], batch_size: int, outputs: Sequence[str] | None
    ) -> None:
        """Build every prompt's request (``requests`` is not used: prompts are the inputs)."""
        path = self.options.endpoint.path
        self._wires = [
            self._request(b"POST", path, orjson.dumps(_body(self.options, self._model, p)))
            for p in self.prompts
        ]

    @property
    def request_count(self) -> int:
        return len(self.prompts)

    async def open_channel(self) -> OpenAIChannel:
        if not self._wires:
            raise InvalidArgumentError("prepare() the requests before opening a channel")
        channel = OpenAIChannel(self, await self.connect(), self._wires)
        self._channels.add(channel)
        return channel

    def forget(self, channel: OpenAIChannel) -> None:
        self._channels.discard(channel)

    async def statistics(self) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        for channel in list(self._channels):
            await channel.close()

    # -- reading answers (after the request's clock stopped)

    def sample(self, index: int, sent_ns: int, status: int, pieces: _Pieces) -> LlmSample:
        """The request's figures from its timestamped answer; PerfRequestError on an error."""
        end_ns = pieces[-1][0] if pieces else self.clock()
        if status != 200:
            raise PerfRequestError(_error_message(status, pieces))
        prompt = self.prompts[index]
        options = self.options
        if not options.streaming:
            return self._whole(prompt, sent_ns, end_ns, pieces)
        first = last = None
        texts: list[str] = []
        usage: Any = None
        for event in events(pieces):
            if event.data == b"[DONE]":
                continue
            try:
                chunk = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                raise PerfRequestError("the server sent an event that is not JSON") from None
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                message = _error_message(200, [(0, event.data)])
                raise PerfRequestError(f"error event in the stream: {message}")
            if chunk.get("usage"):
                usage = chunk["usage"]
            text = _text_of(options, chunk)
            if text:
                texts.append(text)
                first = event.at_ns if first is None else first
                last = event.at_ns
        output = self._output_tokens("".join(texts), usage)
        return LlmSample(
            first_token_ns=(first if first is not None else end_ns) - sent_ns,
            last_token_ns=(last if last is not None else end_ns) - sent_ns,
            latency_ns=end_ns - sent_ns,
            input_tokens=prompt.input_tokens,
            output_tokens=output,
            streamed=True,
        )

    def _whole(self, prompt: Prompt, sent_ns: int, end_ns: int, pieces: _Pieces) -> LlmSample:
        latency = end_ns - sent_ns
        output = 0
        if self.options.endpoint is not EndpointType.EMBEDDINGS:
            try:
                answer = orjson.loads(b"".join(p for _, p in pieces))
            except orjson.JSONDecodeError:
                raise PerfRequestError("the server's answer is not JSON") from None
            if not isinstance(answer, dict):
                raise PerfRequestError("the server's answer is not a JSON object")
            output = self._output_tokens(_text_of(self.options, answer), answer.get("usage"))
        return LlmSample(latency, latency, latency, prompt.input_tokens, output, False)

    def _output_tokens(self, text: str, usage: Any) -> int:
        if not self.options.server_token_count:
            return self.counter.count(text)
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if not isinstance(tokens, int):
            raise PerfRequestError(
                "the answer carries no usage.completion_tokens (--use-server-token-count): "
                "the server needs the model's tokenizer"
            )
        return tokens


class OpenAIChannel:
    """One connection sending prepared requests one at a time (reconnects after a close)."""

    def __init__(
        self, transport: OpenAITransport, connection: _Connection, wires: list[bytes]
    ) -> None:
        self._transport = transport
        self._conn: _Connection | None = connection
        self._wires = wires

    async def infer(self, index: int, sequence: SequenceFlags | None = None) -> LlmSample:
        conn = self._conn
        if conn is None or not conn.open:
            conn = self._conn = await self._transport.connect()
        sent = self._transport.clock()
        try:
            status, pieces = await conn.send(self._wires[index])
        except asyncio.CancelledError:
            conn.close()  # its answer would be taken for the next request's
            self._conn = None
            raise
        return self._transport.sample(index, sent, status, pieces)

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._transport.forget(self)


__all__ = ["OpenAIChannel", "OpenAITransport"]
