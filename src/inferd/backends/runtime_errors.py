"""Who is to blame when a runtime fails while running a request, and the error that follows.

Each runtime family decides the blame from what its library exposes (ONNX Runtime: exception
class = status code; OpenVINO: the frame that failed) in one function next to its backend;
this module turns the decision into inferd's error tree the same way for every runtime:

* ``Blame.REQUEST``: the request's *content* made the runtime fail (a string that does not
  parse as a number, an index out of range, a value-dependent shape that cannot hold). The
  client gets ``InvalidInputError`` (400 / INVALID_ARGUMENT) with the runtime's message.
* ``Blame.MODEL``: the model or the runtime itself failed. The client gets ``InternalError``
  (500 / INTERNAL) and the failure is logged here, once, with its cause.
"""

from __future__ import annotations

import enum
import logging

from inferd.errors import InferdError, InternalError, InvalidInputError

log = logging.getLogger(__name__)


class Blame(enum.Enum):
    REQUEST = "request"
    MODEL = "model"


def runtime_failure(
    blame: Blame, *, runtime: str, model: str, message: str, cause: BaseException
) -> InferdError:
    """The error to answer a failed run with; failures of the model are logged once, here."""
    if blame is Blame.REQUEST:
        return InvalidInputError(
            f"inference request to model '{model}' failed in {runtime}: {message}"
        )
    log.error("%s failed to run model '%s': %s", runtime, model, message, exc_info=cause)
    return InternalError(f"{runtime} failed to run model '{model}': {message}")


__all__ = ["Blame", "runtime_failure"]
