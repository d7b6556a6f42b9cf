"""Decoupled Python models in the worker: response senders, and running a batch.

A Triton-style model gets one :class:`ResponseSender` per request
(``request.get_response_sender()``) and may send from ``execute`` or from threads it starts,
after ``execute`` has returned. A typed model (:class:`inferd.backends.python.api.Model`)
implements ``stream(inputs, request)`` as a generator: each value it yields is one response,
and the worker stops iterating once the request is cancelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inferd.backends.python import api, shm
from inferd.backends.python.worker import triton_python_backend_utils as pb_utils

if TYPE_CHECKING:
    from inferd.backends.python.worker.streaming import Streams
    from inferd.backends.python.worker.worker import Worker


class ResponseSender:
    """``request.get_response_sender()``: sends the responses of one request."""

    def __init__(self, streams: Streams, index: int) -> None:
        self._streams = streams
        self._index = index
        self._closed = False

    def send(self, response: pb_utils.InferenceResponse | None = None, flags: int = 0) -> None:
        if flags not in (0, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise pb_utils.TritonModelException(
                "Unable to send response. Unsupported flag provided."
            )
        final = flags == pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if self._closed:
            raise pb_utils.TritonModelException(
                "Unable to send response. Response sender has been closed."
            )
        if response is None and not final:
            raise pb_utils.TritonModelException(
                "Unable to send response. A response may be left out only with the "
                "TRITONSERVER_RESPONSE_COMPLETE_FINAL flag."
            )
        if response is not None and not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(
                f"Unable to send response. Expected an InferenceResponse, got "
                f"{type(response).__name__}."
            )
        if final:
            self._closed = True
        outputs, error = _unpack(response)
        self._streams.send(self._index, outputs, error, final)

    def is_cancelled(self) -> bool:
        return self._streams.is_cancelled(self._index)

    def is_closed(self) -> bool:
        return self._closed


def _unpack(
    response: pb_utils.InferenceResponse | None,
) -> tuple[dict[str, Any] | None, list[str] | None]:
    if response is None:
        return None, None
    error = response.error()
    if error is not None:
        code = error.code() if isinstance(error, pb_utils.TritonError) else 1
        return None, [pb_utils.ERROR_CODE_NAMES.get(code, "INTERNAL"), str(error)]
    outputs: dict[str, Any] = {}
    for tensor in response.output_tensors():
        if not isinstance(tensor, pb_utils.Tensor):
            raise pb_utils.TritonModelException("output_tensors must hold pb_utils.Tensor objects")
        outputs[tensor.name()] = tensor.as_numpy()
    return outputs, None


def run_decoupled(
    worker: Worker, requests: list[dict[str, Any]], refs: list[list[shm.TensorRef]]
) -> None:
    """Run one batch of a decoupled model (its responses leave through ``worker.streams``)."""
    arena = worker.arena
    assert arena is not None
    streams = worker.streams
    if worker.typed:
        for req, rs in zip(requests, refs, strict=True):
            key = int(req["stream"])
            inputs = {r.name: shm.read(arena, r, copy=False) for r in rs}
            context = api.StreamRequest(
                id=str(req.get("id", "")),
                parameters_json=str(req.get("parameters_json", "{}")),
                index=key,
                streams=streams,
            )
            _run_typed(worker, key, inputs, context)
        return
    batch = []
    for req, rs in zip(requests, refs, strict=True):
        request = pb_utils.InferenceRequest(
            inputs=[pb_utils.Tensor(r.name, shm.read(arena, r, copy=False)) for r in rs],
            request_id=req.get("id", ""),
            requested_output_names=req.get("outputs", []),
            model_name=worker.name,
            parameters=req.get("parameters_json", "{}"),
            correlation_id=req.get("correlation_id", 0),
            flags=int(req.get("flags", 0)),
        )
        request.attach_sender(ResponseSender(streams, int(req["stream"])))
        batch.append(request)
    returned = worker.run_maybe_async(worker.model.execute(batch))
    if returned is not None:
        raise TypeError(
            f"execute() of decoupled model '{worker.name}' must return None and send its "
            f"responses with the response sender, got {type(returned).__name__}"
        )


def _run_typed(worker: Worker, index: int, inputs: dict[str, Any], context: Any) -> None:
    streams = worker.streams
    try:
        produced = worker.model.stream(inputs, context)
        for outputs in produced:
            if streams.is_cancelled(index):
                close = getattr(produced, "close", None)
                if close is not None:
                    close()
                break
            if not isinstance(outputs, dict):
                raise TypeError(
                    f"stream() must yield dicts of arrays, got {type(outputs).__name__}"
                )
            streams.send(index, outputs, None, False)
    except Exception as exc:
        streams.send(index, None, exc, True)
        return
    streams.send(index, None, None, True)
