"""How every runtime runs a batch, and what a failed batch answers.

A batch whose requests stack runs once. If that run fails, the error decides what follows
(:class:`RetryPolicy`):

* an error that blames one request's *content* (``InvalidArgumentError``: a value that does not
  parse, a shape the model refuses) cannot say which request it came from, so each request runs
  again alone and only the bad ones fail. The split is logged at DEBUG;
* any other error is a fault of the model, the runtime or the server (``InternalError``, a
  worker that died, an arena that may not grow): running the requests again would repeat the
  fault (and the model's side effects) for nothing, so every request of the batch fails with its
  own error object. A model or runtime fault is logged once, at ERROR, with the request ids.

A batch that does not stack runs request by request; each request is answered by its own run.
Errors are never shared between requests: each request gets its own exception object, because
an exception carries its traceback and context, which belong to one request's failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from inferd.errors import ErrorCode, InferdError, InvalidArgumentError

log = logging.getLogger(__name__)

T = TypeVar("T")  # one request, as the runtime sees it
O = TypeVar("O")  # noqa: E741 - one request's outputs
E = TypeVar("E")  # one request's error, in the form the caller answers with
X = TypeVar("X", bound=BaseException)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which failures of a batch are one request's, and which are the whole batch's.

    ``per_request``: errors that blame a request's content; the batch is split and each request
    runs alone. ``caught``: what a run may raise and be answered with (any other exception
    propagates: it is a bug in inferd, for the instance pool to report). Every caught error that
    is not ``per_request`` fails the batch.
    """

    per_request: tuple[type[BaseException], ...] = (InvalidArgumentError,)
    caught: tuple[type[BaseException], ...] = (InferdError,)

    def blames_request(self, exc: BaseException) -> bool:
        return isinstance(exc, self.per_request)


#: The policy of the server-side runtimes: they translate their library's failures into
#: inferd's errors at their boundary, so an ``InvalidArgumentError`` is the request's content.
CONTENT_ERRORS_SPLIT = RetryPolicy()


def each_request(exc: X, count: int) -> list[X]:
    """One error object per request of a failed batch: ``exc`` for the first, copies (same
    type and message, the same cause) for the others."""
    return [exc, *(_twin(exc) for _ in range(count - 1))] if count > 0 else []


def _twin(exc: X) -> X:
    """A copy of ``exc`` without its traceback or context, built without calling ``__init__``
    (an exception class may take other arguments than the ``args`` it keeps)."""
    cls = type(exc)
    twin = cls.__new__(cls, *exc.args)
    twin.args = exc.args
    if hasattr(exc, "__dict__"):
        twin.__dict__.update(exc.__dict__)
    twin.__cause__ = exc.__cause__
    return twin


def is_fault(exc: BaseException) -> bool:
    """True for a failure of the model, the runtime or inferd (answered as INTERNAL)."""
    return not isinstance(exc, InferdError) or exc.code is ErrorCode.INTERNAL


def describe(ids: Sequence[str]) -> str:
    """``request 'a'`` / ``3 requests ('a', 'b', <no id>)`` for log lines."""
    names = ", ".join(repr(i) if i else "<no id>" for i in ids)
    return f"request {names}" if len(ids) == 1 else f"{len(ids)} requests ({names})"


def run_batch(
    items: Sequence[T],
    *,
    stacked: Callable[[Sequence[T]], Sequence[O]] | None,
    alone: Callable[[T], O],
    answer: Callable[[BaseException], E],
    ids: Callable[[], Sequence[str]],
    model: str,
    policy: RetryPolicy = CONTENT_ERRORS_SPLIT,
) -> list[O | E]:
    """Run ``items`` (one per request, in order) and return one result per request.

    ``stacked`` runs the whole batch at once and returns one output per request (None: the
    batch does not stack); ``alone`` runs one request; ``answer`` turns a caught error into a
    request's result; ``ids`` gives the request ids (asked for only when a line is logged).
    """
    if stacked is not None and len(items) > 1:
        try:
            return list(stacked(items))
        except policy.caught as exc:
            if not policy.blames_request(exc):
                _log_batch_failure(exc, ids(), model)
                return [answer(e) for e in each_request(exc, len(items))]
            log.debug(
                "model '%s': a batch of %d requests failed on a request's content (%s); "
                "running each request alone",
                model,
                len(items),
                exc,
            )
    results: list[O | E] = []
    for index, item in enumerate(items):
        try:
            results.append(alone(item))
        except policy.caught as exc:
            if not policy.blames_request(exc):
                _log_batch_failure(exc, [ids()[index]], model)
            results.append(answer(exc))
    return results


def _log_batch_failure(exc: BaseException, ids: Sequence[str], model: str) -> None:
    if is_fault(exc):
        log.error("model '%s' failed %s: %s", model, describe(ids), exc, exc_info=exc)
    else:
        log.debug("model '%s' could not run %s: %s", model, describe(ids), exc)


__all__ = [
    "CONTENT_ERRORS_SPLIT",
    "RetryPolicy",
    "describe",
    "each_request",
    "is_fault",
    "run_batch",
]
