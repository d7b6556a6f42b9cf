"""The HTTP/1.1 connection protocol: uvicorn's httptools protocol plus the edge's own limits.

uvicorn bounds neither the time a client may take to send its request head nor the number of
open connections (its ``limit_concurrency`` counts connections *and* running tasks, and answers
in plain text). This subclass adds, per connection:

* a **header timeout**: armed when a connection opens and whenever a read leaves a request
  head incomplete, cancelled once the head is complete. When it fires, a client that had started a
  request gets ``408`` with a JSON error; the connection is then closed.
* a **body timeout**: once a request head is complete, its body must keep arriving; a body
  that makes no progress for the timeout gets ``408`` and the connection is closed. Like the
  header timer, it is armed only when a read leaves a body incomplete, and it never fires while
  the server itself has paused reading (flow control).
* the **idle timeout** between keep-alive requests, exact to the fraction of a second
  (uvicorn's own keep-alive timer, fed the configured value).
* a **connection limit**, which never starves health probes: at the limit a new connection
  takes the slot of the longest-idle connection, or else a *probe slot* that answers only a
  health probe (the policy and its reasons are in :mod:`inferd.frontends.http.slots`; nothing
  of it runs below the limit). A connection refused — every probe slot answering, or a request
  other than a probe on a probe slot — is answered ``503`` with a JSON error naming the limit
  (then, except over TLS, the server half-closes). Its input is drained, so that closing does
  not reset the connection before the client has read the reply, and it is closed when the
  client closes its side or the header timeout ends, whichever comes first. Refused
  connections and probe slots are not counted as open.
* **one write per response**: uvicorn writes a response's head and its body separately; each
  request's cycle writes through :class:`_OneWrite`, which sends the head with the first body
  bytes.
* ``TCP_NODELAY``, set explicitly, so that nothing waits for the client's delayed ACK.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
from asyncio import TimerHandle
from dataclasses import dataclass
from typing import Any, cast

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from inferd.frontends.http.slots import (
    PROBE_HEAD_TIMEOUT_S,
    PROBE_SLOTS,
    Admission,
    EvictionQueue,
    IdleKey,
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


def _error_response(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _set_nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _ServerSlots:
    """One server's connections at its limit: its probe slots, its longest-idle connections."""

    __slots__ = ("admitted", "idle", "probes")

    def __init__(self) -> None:
        self.admitted = itertools.count(1)
        self.probes: set[EdgeHttpProtocol] = set()
        self.idle: EvictionQueue[EdgeHttpProtocol] = EvictionQueue(EdgeHttpProtocol.idle_since)


class EdgeHttpProtocol(HttpToolsProtocol):
    """Set :attr:`limits` through :func:`protocol_class`; uvicorn builds one per connection."""

    limits = ConnectionLimits(header_timeout_s=10.0, idle_timeout_s=75.0)
    slots: _ServerSlots  # per server, set by protocol_class

    _header_timer: TimerHandle | None = None
    _refused = False
    _probe_slot = False  # admitted over the limit: answers one health probe, nothing else
    _opened = 0.0  # loop time the connection was admitted
    _serial = 0  # the order connections were admitted in, per server
    _begun = False  # a request head has started arriving and is not complete yet
    _in_body = False  # a request head is complete and its body is not
    _body_timer: TimerHandle | None = None
    _body_progress = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        limits = self.limits
        self.timeout_keep_alive = limits.idle_timeout_s  # type: ignore[assignment]
        limit = limits.max_connections
        if (
            limit is not None
            and len(self.connections) - len(self.slots.probes) >= limit
            and not self._admit_at_limit(transport, limit)
        ):
            return
        super().connection_made(transport)
        _set_nodelay(transport)
        self._opened = self.loop.time()
        self._serial = next(self.slots.admitted)
        if self._probe_slot:
            self.slots.probes.add(self)
        self._arm_header_timer()

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
        keep_alive = self.timeout_keep_alive_task
        if keep_alive is not None:
            return keep_alive.when() - self.timeout_keep_alive, self._serial
        if self.cycle is None and not self._begun:
            return self._opened, self._serial
        return None

    def _waiting_probe(self) -> bool:
        return self.cycle is None and not self._refused and not self.transport.is_closing()

    def _admit_at_limit(self, transport: asyncio.Transport, limit: int) -> bool:
        """Make room for a connection arriving at the limit (:mod:`.slots`); False: refused."""
        slots = self.slots
        open_connections = cast("set[EdgeHttpProtocol]", self.connections)
        victim = slots.idle.pop_longest_idle(open_connections, self.loop.time())
        waiting = [] if victim is not None else [p for p in slots.probes if p._waiting_probe()]
        decision = admit(
            len(self.connections) - len(slots.probes),
            limit,
            idle=victim is not None,
            probes=len(slots.probes),
            probes_waiting=len(waiting),
            probe_slots=self.limits.probe_slots,
        )
        if decision is Admission.EVICT_IDLE and victim is not None:
            victim.transport.close()
        elif decision is Admission.EVICT_PROBE:
            oldest = min(waiting, key=lambda p: p._serial)
            slots.probes.discard(oldest)
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
        transport.write(_error_response(503, "Service Unavailable", message))
        if transport.can_write_eof():  # not over TLS
            transport.write_eof()  # the reply is complete; the client's input is still drained
        self._header_timer = self.loop.call_later(self.limits.header_timeout_s, transport.close)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # drained: the reply is already on its way
        super().data_received(data)
        # armed only when a head is left incomplete: a head that arrives whole (the common
        # case on a keep-alive connection) costs no timer
        if self._begun and self._header_timer is None:
            self._arm_header_timer()
        elif self._in_body and self._body_timer is None:
            self._arm_body_timer()

    def eof_received(self) -> bool | None:  # type: ignore[override]
        if self._refused:
            self.transport.close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self._cancel_body_timer()
        if self._probe_slot:
            self.slots.probes.discard(self)
        if self._refused:
            return
        super().connection_lost(exc)

    def shutdown(self) -> None:
        if self._refused:
            self.transport.close()
            return
        super().shutdown()

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
            transport.write(_error_response(408, "Request Timeout", message))
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
            transport.write(_error_response(408, "Request Timeout", message))
        transport.close()

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return  # a probe slot's refused request: drained
        self._body_progress = True
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        self._cancel_body_timer()
        if self._refused:
            return
        super().on_message_complete()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun = True

    def on_headers_complete(self) -> None:
        self._begun = False
        self._in_body = True
        self._cancel_header_timer()
        if self._probe_slot and not self._probe_request():
            return
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None:
            if self._probe_slot:
                cycle.keep_alive = False  # one probe per probe slot
            cycle.transport = _OneWrite(self.transport, cycle)  # type: ignore[assignment]

    def _probe_request(self) -> bool:
        """On a probe slot: is this request a health probe? If not, it is refused."""
        if self._refused:
            return False  # a request pipelined after the refused one: already answered
        try:
            path = httptools.parse_url(self.url).path or b""
            probe = is_health_probe(self.parser.get_method().decode("ascii"), path.decode("ascii"))
        except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
            probe = False
        if not probe:
            self.slots.probes.discard(self)
            self.connections.discard(self)
            self._in_body = False
            self._refuse(self.transport, self.limits.max_connections or 0)
        return probe


class _OneWrite:
    """The transport as one request's response cycle sees it: the response head, which uvicorn
    writes as soon as the app starts the response, is held back and leaves in the same write as
    the first body bytes — one system call and one TCP segment for a small response instead of
    two. Everything else (interim ``100 Continue`` answers, closing) passes straight through, a
    held head first."""

    __slots__ = ("_cycle", "_head", "_held", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._held = False  # the head has been seen (held or written)

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if len(data) <= _JOIN_LIMIT:
                self._transport.write(head + data)
            else:  # a large body is not copied to save one call
                self._transport.write(head)
                self._transport.write(data)
        elif not self._held and self._cycle.response_started:
            self._held = True  # the first write once the response has started is its head
            self._head = bytes(data)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        self._flush()  # anything else sees the transport as if the head had been written
        return getattr(self._transport, name)


_JOIN_LIMIT = 256 * 1024  # bodies up to this size are joined to their head

EdgeHttpProtocol.slots = (
    _ServerSlots()
)  # the base class's own; protocol_class gives each server one


def protocol_class(limits: ConnectionLimits) -> type[EdgeHttpProtocol]:
    """A protocol class for one server, carrying that server's limits."""
    return type(
        "EdgeHttpProtocol", (EdgeHttpProtocol,), {"limits": limits, "slots": _ServerSlots()}
    )


__all__ = ["ConnectionLimits", "EdgeHttpProtocol", "protocol_class"]
