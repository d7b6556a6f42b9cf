"""Business-logic scripting in a Python model: ``pb_utils.InferenceRequest(...).exec()``.

A call leaves the worker through its channel (``streaming.Calls``); its responses come back as
they are sent. :class:`ResponseIterator` is what ``exec(decoupled=True)`` returns; ``exec()``
reads the call to its end and answers its first response. Both are re-exported by
``triton_python_backend_utils``.
"""

from __future__ import annotations

from typing import Any

from inferd.backends.python import triton_python_backend_utils as pb_utils

__all__ = ["ResponseIterator", "run_call"]

_CODE_OF_NAME = {"INVALID_ARGUMENT": 3, "NOT_FOUND": 2, "UNAVAILABLE": 4, "UNSUPPORTED": 5}
_CODE_OF_NAME.update({"ALREADY_EXISTS": 6, "CANCELLED": 7, "INTERNAL": 1})


class ResponseIterator:
    """The responses of a business-logic call, as the called model sends them."""

    def __init__(self, calls: Any, call: int) -> None:
        self._calls = calls
        self._call = call
        self._done = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> pb_utils.InferenceResponse:
        while not self._done:
            outputs, error, final = self._calls.next(self._call)
            self._done = final
            if error is not None:
                code = _CODE_OF_NAME.get(error.code.value, pb_utils.TritonError.INTERNAL)
                return pb_utils.InferenceResponse(error=pb_utils.TritonError(error.message, code))
            if outputs is not None:
                return pb_utils.InferenceResponse(
                    [pb_utils.Tensor(n, a) for n, a in outputs.items()]
                )
        raise StopIteration

    def cancel(self) -> None:
        """Stop the call: the called model sees ``is_cancelled()``."""
        if not self._done:
            self._done = True
            self._calls.cancel(self._call)


def run_call(
    worker: Any,
    model: str,
    inputs: dict[str, Any],
    *,
    outputs: list[str],
    version: str,
    request_id: str,
    parameters: dict[str, Any],
    timeout_us: int,
    decoupled: bool,
) -> Any:
    """Send a call to ``model`` through ``worker`` (the worker serving this process): its
    first response, or with ``decoupled`` an iterator over all of them."""
    if worker is None:
        raise pb_utils.TritonModelException("InferenceRequest.exec() works only inside a model")
    if not model:
        raise pb_utils.TritonModelException("InferenceRequest.exec() needs a model_name")
    try:
        call = worker.calls.start(
            model,
            inputs,
            outputs=outputs or None,
            version=version,
            request_id=request_id,
            parameters=parameters,
            timeout_us=timeout_us,
        )
    except RuntimeError as exc:
        raise pb_utils.TritonModelException(str(exc)) from None
    iterator = ResponseIterator(worker.calls, call)
    if decoupled:
        return iterator
    first: pb_utils.InferenceResponse | None = None
    for response in iterator:  # read to the end, so the call is closed
        if first is None:
            first = response
    return first if first is not None else pb_utils.InferenceResponse()
