"""The ASGI 3 types the HTTP front end and the apps it mounts share, and reading a header."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
HeaderLookup = Callable[[str], "str | None"]

JSON = b"application/json"


def header_lookup(scope: Scope) -> HeaderLookup:
    """The first value of a request header by lower-case name (for the access policy)."""
    headers = scope.get("headers", ())

    def lookup(name: str) -> str | None:
        wanted = name.encode("latin-1")
        for key, value in headers:
            if key == wanted:
                return str(value.decode("latin-1"))
        return None

    return lookup


async def serve_lifespan(receive: Receive, send: Send) -> None:
    """Answer an ASGI ``lifespan`` scope: nothing to start or stop, each step acknowledged."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


__all__ = [
    "JSON",
    "HeaderLookup",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "header_lookup",
    "serve_lifespan",
]
