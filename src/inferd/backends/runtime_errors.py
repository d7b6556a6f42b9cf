"""Who is to blame when a runtime fails while running a request, and the error that follows.

Each runtime family decides the blame from what its library exposes (ONNX Runtime: exception
class = status code; OpenVINO: the frame that failed; PyTorch and the tabular libraries: the
exception class) in one ``blame`` function next to its backend, and names it in a
:class:`RuntimeFamily`. The family turns a failure into inferd's error tree the same way for
every runtime:

* ``Blame.REQUEST``: the request's *content* made the runtime fail (a string that does not
  parse as a number, an index out of range, a value-dependent shape that cannot hold). The
  client gets ``InvalidInputError`` (400 / INVALID_ARGUMENT) with the runtime's message, and a
  batch that failed so is split to find the request (:mod:`inferd.backends.execution`).
* ``Blame.MODEL``: the model or the runtime itself failed. The client gets ``InternalError``
  (500 / INTERNAL); the batch fails, logged once, with its request ids and this cause, by
  :func:`inferd.backends.execution.run_batch`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from inferd.errors import InferdError, InternalError, InvalidInputError


class Blame(enum.Enum):
    REQUEST = "request"
    MODEL = "model"


def last_line(exc: BaseException) -> str:
    """The last non-blank line of a message (runtimes often prefix their own traceback)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


@dataclass(frozen=True, slots=True)
class RuntimeFamily:
    """A runtime library as its failures are judged: its name, its blame rule, its summary."""

    name: str
    blame: Callable[[BaseException], Blame]
    summary: Callable[[BaseException], str] = last_line

    def translate(self, exc: BaseException, model: str) -> InferdError:
        """The error to answer a failed run with (inferd's own errors pass unchanged).

        Raise it ``from exc`` so that the log of a model fault shows the library's failure."""
        if isinstance(exc, InferdError):
            return exc
        message = self.summary(exc)
        if self.blame(exc) is Blame.REQUEST:
            return InvalidInputError(
                f"inference request to model '{model}' failed in {self.name}: {message}"
            )
        return InternalError(f"{self.name} failed to run model '{model}': {message}")


__all__ = ["Blame", "RuntimeFamily", "last_line"]
