"""Running a command's asynchronous work, once for every command: on uvloop where it is
installed, and, for the commands that draw progress (``inferd analyze``, ``inferd optimize``),
one mapping of what went wrong to an error line and an exit status, with the progress display
closed first so the line is not drawn over."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from inferd.errors import InferdError, InvalidArgumentError

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "CommandExit", "run_async", "run_reported"]

T = TypeVar("T")
EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


class Closable(Protocol):
    def close(self) -> None: ...


class CommandExit(Exception):
    """The command ends with exit status ``code``; its error line is printed already."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a fresh event loop (uvloop's where it is installed)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is installed wherever inferd serves
        return asyncio.run(coro)
    return uvloop.run(coro)


def run_reported(
    coro: Coroutine[Any, Any, T],
    reporter: Closable,
    error: Callable[[str], None],
    *,
    interrupted: str,
    failed: int,
) -> T:
    """``coro``'s result, ``reporter`` closed. What went wrong closes ``reporter``, prints one
    line through ``error`` and raises :class:`CommandExit`: Ctrl-C with the ``interrupted``
    message and status 130, an :class:`InvalidArgumentError` with status 2, any other
    :class:`InferdError` with status ``failed``."""
    try:
        result = run_async(coro)
    except KeyboardInterrupt:
        code, message = EXIT_INTERRUPTED, interrupted
    except InvalidArgumentError as exc:
        code, message = EXIT_USAGE, exc.message
    except InferdError as exc:
        code, message = failed, exc.message
    else:
        reporter.close()
        return result
    reporter.close()
    error(message)
    raise CommandExit(code) from None
