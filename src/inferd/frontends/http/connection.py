"""The HTTP/1.1 connection protocol: httptools' request parser, an ASGI cycle per request
(:mod:`.cycle`) and the edge's limits, on asyncio's public ``Protocol`` interface.

Per connection:

* **keep-alive and pipelining**: requests on one connection are answered in order; a request
  that arrives while another is answered waits (reading pauses) until that one is complete.
  HTTP/1.0 and ``Connection: close`` end the connection after the response; ``Expect:
  100-continue`` is answered when the app first reads the body.
* a **header timeout**: armed when a connection opens and whenever a read leaves a request
  head incomplete, cancelled once the head is complete. When it fires, a client that had started a
  request gets ``408`` with a JSON error; the connection is then closed.
* a **body timeout**: once a request head is complete, its body must keep arriving; a body
  that makes no progress for the timeout gets ``408`` and the connection is closed. Like the
  header timer, it is armed only when a read leaves a body incomplete, and it never fires while
  the server itself has paused reading (flow control).
* the **idle timeout** between keep-alive requests, exact to the fraction of a second.
* a **connection limit**, which never starves health probes: at the limit a new connection
  takes the slot of the longest-idle connection, or else a *probe slot* that answers only a
  health probe (the policy and its reasons are in :mod:`inferd.frontends.http.slots`; nothing
  of it runs below the limit). A connection refused — every probe slot answering, or a request
  other than a probe on a probe slot — is answered ``503`` with a JSON error naming the limit
  (then, except over TLS, the server half-closes). Its input is drained, so that closing does
  not reset the connection before the client has read the reply, and it is closed when the
  client closes its side or the header timeout ends, whichever comes first. Refused
  connections and probe slots are not counted as open.
* a request the parser rejects gets ``400`` with a JSON error naming the parser's complaint,
  after the responses to the requests before it; the connection is then closed.
* **flow control** both ways: reading pauses while a request body is buffered past
  :data:`~.cycle.HIGH_WATER_BYTES`, and the app's ``send`` waits while the transport's write
  buffer is full (``pause_writing`` / ``resume_writing``).
* ``TCP_NODELAY``, set explicitly, so that nothing waits for the client's delayed ACK.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import itertools
import socket
import time
import urllib.parse
from asyncio import TimerHandle
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import httptools

from inferd.frontends.http.cycle import HIGH_WATER_BYTES, App, Cycle, Flow, Scope, error_response
from inferd.frontends.http.slots import (
    PROBE_HEAD_TIMEOUT_S,
    PROBE_SLOTS,
    Admission,
    EvictionQueue,
    IdleKey,
    IdleOrder,
    SharedCount,
    admit,
    is_health_probe,
)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float
    idle_timeout_s: float
    max_connections: int | None = None  # None: unbounded
    body_timeout_s: float = 30.0
    probe_slots: int = PROBE_SLOTS  # connections over the limit that may get a health answer
    probe_head_timeout_s: float = PROBE_HEAD_TIMEOUT_S  # a probe slot's request head, at most

    def __post_init__(self) -> None:
        if self.header_timeout_s <= 0 or self.idle_timeout_s <= 0 or self.body_timeout_s <= 0:
            raise ValueError("the HTTP header, body and idle timeouts must be positive")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError("the HTTP connection limit must be at least 1")
        if self.probe_slots < 0 or self.probe_head_timeout_s <= 0:
            raise ValueError(
                "the HTTP probe slots must not be negative and their head timeout must be positive"
            )


class ServerState:
    """What one server's connections share: the app, the limits, the open connections and their
    request tasks, the slots at the limit, and the ``Date`` header of the current second."""

    def __init__(
        self, app: App, limits: ConnectionLimits, shared: SharedCount | None = None
    ) -> None:
        self.app = app
        self.limits = limits
        #: the port's connection count when other processes serve it too (--frontends)
        self.shared = shared
        self.idle_order: IdleOrder[HttpConnection] | None = None
        if shared is not None:
            self.idle_order = IdleOrder(shared.publish_idle)
            shared.set_closer(self.close_longest_idle)
        self.connections: set[HttpConnection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.admitted = itertools.count(1)
        self.probes: set[HttpConnection] = set()
        self.idle: EvictionQueue[HttpConnection] = EvictionQueue(HttpConnection.idle_since)
        self._date_second = -1
        self._date = b""

    def close_longest_idle(self) -> None:
        """Another process serving the port asked for room: close the longest-idle
        connection of this one (if one is still idle)."""
        assert self.idle_order is not None
        oldest = self.idle_order.oldest()
        if oldest is not None:
            self.idle_order.busy(oldest[1])
            oldest[1].transport.close()

    def date_header(self) -> bytes:
        now = int(time.time())  # the Date header is wall-clock time by definition
        if now != self._date_second:
            self._date_second = now
            self._date = b"date: %s\r\n" % email.utils.formatdate(now, usegmt=True).encode()
        return self._date


def _set_nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _address(value: object) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return None


class HttpConnection(asyncio.Protocol):
    """One client connection; the server builds one per accepted socket."""

    transport: asyncio.Transport
    flow: Flow

    def __init__(self, state: ServerState, loop: asyncio.AbstractEventLoop) -> None:
        self.state = state
        self.loop = loop
        self.limits = state.limits
        self.parser = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # httptools < 0.6.3
            # a request's answer is sent even if the client pipelined more after "close"
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.cycle: Cycle | None = None
        self.pipeline: deque[Cycle] = deque()
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expect_100 = False
        self._server: tuple[str, int] | None = None
        self._client: tuple[str, int] | None = None
        self._scheme = "http"
        self._keep_alive_timer: TimerHandle | None = None
        self._idle_from = 0.0
        self._header_timer: TimerHandle | None = None
        self._body_timer: TimerHandle | None = None
        self._body_progress = False
        self._refused = False
        self._counted = False  # counted in the port's shared count (state.shared)
        self._probe_slot = False  # admitted over the limit: answers one health probe, nothing else
        self._opened = 0.0  # loop time the connection was admitted
        self._serial = 0  # the order connections were admitted in, per server
        self._begun = False  # a request head has started arriving and is not complete yet
        self._in_body = False  # a request head is complete and its body is not
        self._bad_request: bytes | None = None  # a 400 held until the responses before it

    # -- asyncio protocol ---------------------------------------------------------------------

    def connection_made(self, base: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", base)
        state = self.state
        limit = self.limits.max_connections
        if limit is not None:
            shared = state.shared
            if shared is None:
                at_limit = len(state.connections) - len(state.probes) >= limit
            else:
                at_limit = not shared.take(limit)
                self._counted = not at_limit
            if at_limit and not self._admit_at_limit(transport, limit):
                return
        state.connections.add(self)
        self.transport = transport
        self.flow = Flow(transport, self.loop)
        self._server = _address(transport.get_extra_info("sockname"))
        self._client = _address(transport.get_extra_info("peername"))
        if transport.get_extra_info("sslcontext") is not None:
            self._scheme = "https"
        _set_nodelay(transport)
        self._opened = self.loop.time()
        self._serial = next(state.admitted)
        if self._probe_slot:
            state.probes.add(self)
        elif state.idle_order is not None:
            state.idle_order.idle(self, self._opened)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._refused or self._bad_request is not None:
            return  # drained: the reply is already on its way, or the request was bad
        self._cancel_keep_alive()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no protocol upgrades: the request is answered as HTTP/1.1
        except httptools.HttpParserError as exc:
            self._reject(str(exc) or type(exc).__name__)
            return
        # armed only when a head is left incomplete: a head that arrives whole (the common
        # case on a keep-alive connection) costs no timer
        if self._begun and self._header_timer is None:
            self._arm_header_timer()
        elif self._in_body and self._body_timer is None:
            self._arm_body_timer()

    def eof_received(self) -> bool | None:
        if self._refused:
            self.transport.close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self._cancel_body_timer()
        state = self.state
        if self._probe_slot:
            state.probes.discard(self)
        if self._refused:
            return
        state.connections.discard(self)
        if self._counted:
            self._counted = False
            assert state.shared is not None
            state.shared.release()
        if state.idle_order is not None:
            state.idle_order.busy(self)
        self._cancel_keep_alive()
        self.pipeline.clear()
        cycle = self.cycle
        if cycle is not None:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.event.set()
        self.flow.resume_writing()

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def shutdown(self) -> None:
        """The server is stopping: close now if idle, else after the response in flight."""
        cycle = self.cycle
        if self._refused or cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False
            self.pipeline.clear()

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._expect_100 = False
        self._begun = True
        if self.state.idle_order is not None:
            self.state.idle_order.busy(self)

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_100 = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._begun = False
        self._in_body = True
        self._cancel_header_timer()
        if self._probe_slot and not self._probe_request():
            return
        parser = self.parser
        version = parser.get_http_version()
        url = httptools.parse_url(self._url)
        raw_path = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": version,
            "server": self._server,
            "client": self._client,
            "scheme": self._scheme,
            "method": parser.get_method().decode("ascii"),
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
            "headers": self._headers,
        }
        keep_alive = (
            version != "1.0"
            and parser.should_keep_alive()
            and not self._probe_slot  # one probe per probe slot
            and not self.state.stopping
        )
        previous = self.cycle
        self.cycle = cycle = Cycle(
            scope,
            self.transport,
            self.flow,
            keep_alive=keep_alive,
            expect_100_continue=self._expect_100,
            date=self.state.date_header,
            on_response=self._on_response_complete,
        )
        if previous is None or previous.response_complete:
            self._start(cycle)
        else:  # pipelined: answered once the responses before it are complete
            self.flow.pause_reading()
            self.pipeline.append(cycle)

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return  # a probe slot's refused request: drained
        self._body_progress = True
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        cycle.body += body
        if len(cycle.body) > HIGH_WATER_BYTES:
            self.flow.pause_reading()
        cycle.event.set()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._cancel_body_timer()
        cycle = self.cycle
        if self._refused or cycle is None or cycle.response_complete:
            return
        cycle.more_body = False
        cycle.event.set()

    # -- requests -----------------------------------------------------------------------------

    def _start(self, cycle: Cycle) -> None:
        task = self.loop.create_task(cycle.run(self.state.app))
        tasks = self.state.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def _on_response_complete(self) -> None:
        transport = self.transport
        if transport.is_closing():
            return
        self._cancel_keep_alive()
        self.flow.resume_reading()
        if self.pipeline:
            self._start(self.pipeline.popleft())
        elif self._bad_request is not None:
            transport.write(self._bad_request)
            transport.close()
        else:
            self._idle_from = self.loop.time()
            self._keep_alive_timer = self.loop.call_later(
                self.limits.idle_timeout_s, self._keep_alive_timeout
            )
            if self.state.idle_order is not None:
                self.state.idle_order.idle(self, self._idle_from)

    def _reject(self, reason: str) -> None:
        """The parser rejected the request: 400, after the responses to the requests before it."""
        self._cancel_header_timer()
        self._cancel_body_timer()
        self._begun = self._in_body = False
        reply = error_response(400, f"malformed HTTP request: {reason}")
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.more_body:  # its own body is malformed: it cannot be answered
                cycle.disconnected = True
                cycle.event.set()
                if not cycle.response_started:
                    self.transport.write(reply)
                self.transport.close()
                return
            self._bad_request = reply
            self.flow.pause_reading()
            return
        self.transport.write(reply)
        self.transport.close()

    def _cancel_keep_alive(self) -> None:
        timer = self._keep_alive_timer
        if timer is not None:
            timer.cancel()
            self._keep_alive_timer = None
            if self.state.idle_order is not None:
                self.state.idle_order.busy(self)

    def _keep_alive_timeout(self) -> None:
        self._keep_alive_timer = None
        if self.state.idle_order is not None:
            self.state.idle_order.busy(self)
        if not self.transport.is_closing():
            self.transport.close()

    # -- connection limit ---------------------------------------------------------------------

    def idle_since(self) -> IdleKey | None:
        """The loop time since which this admitted connection has been idle — between
        keep-alive requests, or silent since it opened — and the order it was admitted in (a
        tie-break), or ``None`` while it is not idle."""
        if self._probe_slot or self._refused:
            return None
        transport = self.transport
        if transport is None or transport.is_closing():
            return None
        if self._keep_alive_timer is not None:
            return self._idle_from, self._serial
        if self.cycle is None and not self._begun:
            return self._opened, self._serial
        return None

    def _waiting_probe(self) -> bool:
        return self.cycle is None and not self._refused and not self.transport.is_closing()

    def _longest_idle(self) -> Callable[[], None] | None:
        """What closes the longest-idle connection of the port, or None if none is idle: of
        this process, or, with a shared count, of any process serving the port."""
        state = self.state
        if state.shared is None or state.idle_order is None:
            victim = state.idle.pop_longest_idle(state.connections, self.loop.time())
            return None if victim is None else victim.transport.close
        shared, order = state.shared, state.idle_order
        local = order.oldest()
        remote = shared.oldest_elsewhere()
        if local is not None and (remote is None or local[0] <= remote[0]):
            victim = local[1]

            def close_here() -> None:
                order.busy(victim)
                victim.transport.close()
                shared.take_over()
                self._counted = True

            return close_here
        if remote is None:
            return None
        holder = remote[1]

        def close_there() -> None:
            shared.ask_to_close_idle(holder)
            shared.take_over()
            self._counted = True

        return close_there

    def _admit_at_limit(self, transport: asyncio.Transport, limit: int) -> bool:
        """Make room for a connection arriving at the limit (:mod:`.slots`); False: refused."""
        state = self.state
        victim = self._longest_idle()
        waiting = [] if victim is not None else [p for p in state.probes if p._waiting_probe()]
        decision = admit(
            limit,  # at it (the count of this process, or of all that serve the port)
            limit,
            idle=victim is not None,
            probes=len(state.probes),
            probes_waiting=len(waiting),
            probe_slots=self.limits.probe_slots,
        )
        if decision is Admission.EVICT_IDLE and victim is not None:
            victim()
        elif decision is Admission.EVICT_PROBE:
            oldest = min(waiting, key=lambda p: p._serial)
            state.probes.discard(oldest)
            oldest.transport.close()
            self._probe_slot = True
        elif decision is Admission.PROBE:
            self._probe_slot = True
        elif decision is Admission.REFUSE:
            self._refuse(transport, limit)
            return False
        return True

    def _refuse(self, transport: asyncio.Transport, limit: int) -> None:
        self._refused = True
        self.transport = transport
        message = (
            f"the server has reached its limit of {limit} open HTTP connections "
            "(--http-max-connections); retry later"
        )
        if self._probe_slot:
            message = (
                f"the server has reached its limit of {limit} open HTTP connections "
                "(--http-max-connections) and answers only health probes over it; retry later"
            )
        transport.write(error_response(503, message))
        if transport.can_write_eof():  # not over TLS
            transport.write_eof()  # the reply is complete; the client's input is still drained
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(self.limits.header_timeout_s, transport.close)

    def _probe_request(self) -> bool:
        """On a probe slot: is this request a health probe? If not, it is refused."""
        if self._refused:
            return False  # a request pipelined after the refused one: already answered
        try:
            path = httptools.parse_url(self._url).path or b""
            probe = is_health_probe(self.parser.get_method().decode("ascii"), path.decode("ascii"))
        except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
            probe = False
        if not probe:
            self.state.probes.discard(self)
            self.state.connections.discard(self)
            self._in_body = False
            self._refuse(self.transport, self.limits.max_connections or 0)
        return probe

    # -- header timeout -----------------------------------------------------------------------

    def _head_timeout_s(self) -> float:
        timeout = self.limits.header_timeout_s
        return min(timeout, self.limits.probe_head_timeout_s) if self._probe_slot else timeout

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self._head_timeout_s(), self._header_timeout)

    def _cancel_header_timer(self) -> None:
        timer = self._header_timer
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        transport = self.transport
        if transport.is_closing():
            return
        cycle = self.cycle
        if self._begun and (cycle is None or cycle.response_complete):
            message = (
                f"the request head was not received within {self._head_timeout_s():g} s "
                "(--http-header-timeout-secs)"
            )
            if self._probe_slot:
                message += "; the server is at --http-max-connections, and waits less"
            transport.write(error_response(408, message))
        transport.close()

    # -- body timeout -------------------------------------------------------------------------

    def _arm_body_timer(self) -> None:
        self._body_progress = False
        self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_timeout)

    def _cancel_body_timer(self) -> None:
        timer = self._body_timer
        if timer is not None:
            timer.cancel()
            self._body_timer = None

    def _body_timeout(self) -> None:
        self._body_timer = None
        transport = self.transport
        if transport.is_closing() or not self._in_body:
            return
        if self._body_progress or self.flow.read_paused:
            self._arm_body_timer()  # the client is sending, or the server is not reading
            return
        cycle = self.cycle
        if cycle is None or not cycle.response_started:
            message = (
                "the request body stopped arriving: no data for "
                f"{self.limits.body_timeout_s:g} s (--http-body-timeout-secs)"
            )
            transport.write(error_response(408, message))
        transport.close()


__all__ = ["ConnectionLimits", "HttpConnection", "ServerState"]
