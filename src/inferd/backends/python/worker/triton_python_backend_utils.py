"""inferd's implementation of Triton's ``triton_python_backend_utils`` module.

Python model workers install this module as ``triton_python_backend_utils`` so that a
``model.py`` written for Triton's Python backend (``import triton_python_backend_utils as
pb_utils``) runs unchanged. It covers what such models use: :class:`Tensor`,
:class:`InferenceRequest`, :class:`InferenceResponse`, :class:`TritonError`,
:class:`TritonModelException`, the ``get_*_by_name`` helpers, the datatype conversions, the
BYTES (de)serialisers, :class:`Logger` and the :class:`ModelConfig` builder given to
``auto_complete_config``, ``using_decoupled_model_transaction_policy``, decoupled response
senders (``get_response_sender``, see ``decoupled.py``) and business-logic scripting
(``InferenceRequest.exec`` / ``async_exec``, which call other models through the server's
engine, see ``streaming.py``).
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.core import datatypes

Array = np.ndarray[Any, Any]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1

# Model-config data types as Triton's module offers them (numpy types, enum numbers), read from
# inferd's one datatype table; BF16 has no numpy type of its own in Triton's module, so it is
# left out as Triton leaves it out.
_CONFIG_TYPES = tuple(d for d in datatypes.ALL if d.name != "BF16")

TRITON_STRING_TO_NUMPY: dict[str, Any] = {d.config_name: d.dtype.type for d in _CONFIG_TYPES}
_CODE_TO_NUMPY: dict[int, Any] = {d.config_code: d.dtype.type for d in _CONFIG_TYPES}
_NUMPY_TO_CODE: dict[Any, int] = {d.dtype: d.config_code for d in _CONFIG_TYPES}

_log = logging.getLogger("inferd.python_model")

# the worker serving this process (set once by the worker; None outside a worker)
_RUNTIME: Any = None


def attach_runtime(worker: Any) -> None:
    """Called by the worker: business-logic calls go through its channel."""
    global _RUNTIME
    _RUNTIME = worker


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``numpy.float32`` (``TYPE_STRING`` -> ``numpy.object_``)."""
    try:
        return TRITON_STRING_TO_NUMPY[triton_type_string]
    except KeyError:
        raise TritonModelException(
            f"unknown model config data type '{triton_type_string}'"
        ) from None


def triton_to_numpy_type(data_type: int) -> Any:
    return _CODE_TO_NUMPY.get(int(data_type))


def numpy_to_triton_type(data_type: Any) -> int | None:
    dtype = np.dtype(data_type)
    if dtype.kind in ("S", "U"):
        return datatypes.BYTES.config_code
    return _NUMPY_TO_CODE.get(dtype)


def serialize_byte_tensor(input_tensor: Array) -> Array | None:
    """A BYTES tensor as a flat uint8 array of 4-byte-length-prefixed elements."""
    if input_tensor.size == 0:
        return None
    if input_tensor.dtype != np.object_ and input_tensor.dtype.kind != "S":
        return None
    parts: list[bytes] = []
    for item in input_tensor.ravel(order="C"):
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: Any) -> Array:
    """The inverse of :func:`serialize_byte_tensor`: a 1-D object array of ``bytes``."""
    buffer = memoryview(bytes(encoded_tensor))
    items: list[bytes] = []
    pos = 0
    while pos < len(buffer):
        (length,) = struct.unpack_from("<I", buffer, pos)
        pos += 4
        items.append(bytes(buffer[pos : pos + length]))
        pos += length
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


# -- errors --------------------------------------------------------------------------------------


class TritonError:
    """An error to put in an :class:`InferenceResponse` (``error=TritonError("...")``).

    ``code`` defaults to :attr:`INTERNAL`, as in Triton; the server answers with the status of
    the code (``INVALID_ARG`` -> HTTP 400, ``INTERNAL`` -> 500, ...).
    """

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


#: TritonError codes -> inferd error code names (the protocol-neutral ones).
ERROR_CODE_NAMES: dict[int, str] = {
    TritonError.UNKNOWN: "INTERNAL",
    TritonError.INTERNAL: "INTERNAL",
    TritonError.NOT_FOUND: "NOT_FOUND",
    TritonError.INVALID_ARG: "INVALID_ARGUMENT",
    TritonError.UNAVAILABLE: "UNAVAILABLE",
    TritonError.UNSUPPORTED: "UNSUPPORTED",
    TritonError.ALREADY_EXISTS: "ALREADY_EXISTS",
    TritonError.CANCELLED: "CANCELLED",
}


class TritonModelException(Exception):
    """Raised by this module when a model misuses it; a model may raise it too."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    def message(self) -> str:
        return self._message


# -- tensors, requests, responses ----------------------------------------------------------------


class Tensor:
    """A named numpy array: an input of a request or an output of a response."""

    def __init__(self, name: str, numpy_array: Any, triton_dtype: int | None = None) -> None:
        array = numpy_array if isinstance(numpy_array, np.ndarray) else np.asarray(numpy_array)
        if array.dtype.kind == "U":  # Triton refuses str arrays; we encode them as UTF-8
            encoded = np.empty(array.shape, dtype=object)
            encoded.ravel()[:] = [s.encode("utf-8") for s in array.ravel()]
            array = encoded
        elif array.dtype.kind == "V":
            raise TritonModelException(
                f"tensor '{name}': numpy dtype {array.dtype} is not supported; use np.object_ "
                "for BYTES"
            )
        if triton_dtype is not None:
            wanted = triton_to_numpy_type(triton_dtype)
            if wanted is not None and array.dtype != np.dtype(wanted):
                array = array.view(wanted)
        self._name = name
        self._array = array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> Array:
        return self._array

    def triton_dtype(self) -> int | None:
        return numpy_to_triton_type(self._array.dtype)

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, dlpack_tensor: Any) -> Tensor:
        return Tensor(name, np.from_dlpack(dlpack_tensor))

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._array.shape)}, dtype={self._array.dtype})"


class InferenceRequest:
    """One request of the batch given to ``execute``."""

    def __init__(
        self,
        inputs: Sequence[Tensor] | None = None,
        request_id: str = "",
        correlation_id: int | str = 0,
        requested_output_names: Sequence[str] | None = None,
        *,
        model_name: str = "",
        parameters: dict[str, Any] | str | None = None,
        flags: int = 0,
        model_version: int = -1,
        timeout: int = 0,
        **_ignored: Any,
    ) -> None:
        self._inputs = list(inputs or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._requested_output_names = list(requested_output_names or [])
        self._model_name = model_name
        if isinstance(parameters, str):
            self._parameters = parameters
        else:
            self._parameters = json.dumps(parameters or {})
        self._flags = flags
        self._model_version = int(model_version)
        self._timeout_us = int(timeout)
        self._sender: Any = None

    def attach_sender(self, sender: Any) -> None:
        """Called by the worker for requests of a decoupled model."""
        self._sender = sender

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def parameters(self) -> str:
        """The request's parameters as a JSON object string, as Triton gives them."""
        return self._parameters

    def flags(self) -> int:
        return self._flags

    def model_name(self) -> str:
        return self._model_name

    def is_cancelled(self) -> bool:
        """The client cancelled the request or went away (decoupled models)."""
        return self._sender is not None and bool(self._sender.is_cancelled())

    def timeout(self) -> int:
        return self._timeout_us

    def get_input_tensor_by_name(self, name: str) -> Tensor | None:
        return get_input_tensor_by_name(self, name)

    def get_response_sender(self) -> Any:
        if self._sender is None:
            raise TritonModelException(
                "only a decoupled model (model_transaction_policy { decoupled: true }) gets a "
                "response sender in inferd; return the responses from execute() instead"
            )
        return self._sender

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on model ``model_name`` (business-logic scripting): its response,
        or with ``decoupled=True`` an iterator over every response it sends."""
        return run_call(
            _RUNTIME,
            self._model_name,
            {t.name(): t.as_numpy() for t in self._inputs},
            outputs=self._requested_output_names,
            version="" if self._model_version < 0 else str(self._model_version),
            request_id=self._request_id,
            parameters=json.loads(self._parameters),
            timeout_us=self._timeout_us,
            decoupled=decoupled,
        )

    async def async_exec(self, decoupled: bool = False) -> Any:
        """:meth:`exec` as an awaitable: several calls may be in flight at once."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, self.exec, decoupled)


class InferenceResponse:
    """The answer to one request: output tensors, or an error."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if output_tensors is not None and not isinstance(output_tensors, list | tuple):
            raise TritonModelException('"output_tensors" must be a list')
        self._output_tensors = list(output_tensors or [])
        self._error = error
        self._parameters = parameters

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def get_output_tensor_by_name(self, name: str) -> Tensor | None:
        return get_output_tensor_by_name(self, name)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def _config_entry(model_config: dict[str, Any], key: str, name: str) -> dict[str, Any] | None:
    for entry in model_config.get(key, []):
        if entry.get("name") == name:
            found: dict[str, Any] = entry
            return found
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return _config_entry(model_config, "input", name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return _config_entry(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the model's configuration has ``model_transaction_policy { decoupled: true }``
    (``model_config`` is the dict of ``json.loads(args["model_config"])``), as in Triton."""
    policy = model_config.get("model_transaction_policy")
    return isinstance(policy, dict) and bool(policy.get("decoupled", False))


# -- logging -------------------------------------------------------------------------------------


class Logger:
    """``pb_utils.Logger.log_info("...")``: lines go to the server's log (the worker's stderr)."""

    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG

    @staticmethod
    def log(message: str, level: int = logging.INFO) -> None:
        _log.log(level, "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        _log.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        _log.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        _log.error("%s", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _log.debug("%s", message)


# -- auto-complete -------------------------------------------------------------------------------


class ModelConfig:
    """The configuration handed to ``auto_complete_config``: add to it, then return it."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def _add_tensor(self, key: str, tensor: dict[str, Any]) -> None:
        if not isinstance(tensor, dict) or "name" not in tensor:
            raise TritonModelException(f"{key} must be a dict with at least a 'name' key")
        allowed = {"name", "data_type", "dims", "optional", "reshape", "is_shape_tensor"}
        unknown = set(tensor) - allowed
        if unknown:
            raise TritonModelException(
                f"{key} '{tensor['name']}' has unsupported key(s) {sorted(unknown)}"
            )
        entries: list[dict[str, Any]] = self._config.setdefault(key, [])
        existing = next((e for e in entries if e.get("name") == tensor["name"]), None)
        if existing is None:
            entries.append(dict(tensor))
            return
        for field, value in tensor.items():
            current = existing.get(field)
            if current in (None, "", [], "TYPE_INVALID") or field == "name":
                existing[field] = value
            elif current != value and not (
                field == "dims" and [int(d) for d in current] == [int(d) for d in value]
            ):
                raise TritonModelException(
                    f"unable to add {key} '{tensor['name']}': the configuration already gives "
                    f"{field} {current!r}, auto-complete asks for {value!r}"
                )

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output)

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._config.get("max_batch_size", 0) or 0)
        if current not in (0, max_batch_size):
            raise TritonModelException(
                f"configuration specified max_batch_size {current}, but auto-complete-config "
                f"function for model '{self._config.get('name', '')}' tries to set "
                f"max_batch_size to {max_batch_size}"
            )
        self._config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        if "sequence_batching" in self._config:
            raise TritonModelException(
                "cannot set dynamic batching: the configuration uses sequence batching"
            )
        self._config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        self._config["model_transaction_policy"] = dict(transaction_policy_dict)

    def add_model_warmup(self, model_warmup: dict[str, Any]) -> None:
        self._config.setdefault("model_warmup", []).append(dict(model_warmup))


# Business-logic scripting: ``InferenceRequest(...).exec()``. A call leaves the worker through its
# channel (``streaming.Calls``); its responses come back as they are sent. ``ResponseIterator`` is
# what ``exec(decoupled=True)`` returns; ``exec()`` reads the call to its end and answers its first
# response.

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

    def __next__(self) -> InferenceResponse:
        while not self._done:
            outputs, error, final = self._calls.next(self._call)
            self._done = final
            if error is not None:
                code = _CODE_OF_NAME.get(error.code.value, TritonError.INTERNAL)
                return InferenceResponse(error=TritonError(error.message, code))
            if outputs is not None:
                return InferenceResponse([Tensor(n, a) for n, a in outputs.items()])
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
        raise TritonModelException("InferenceRequest.exec() works only inside a model")
    if not model:
        raise TritonModelException("InferenceRequest.exec() needs a model_name")
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
        raise TritonModelException(str(exc)) from None
    iterator = ResponseIterator(worker.calls, call)
    if decoupled:
        return iterator
    first: InferenceResponse | None = None
    for response in iterator:  # read to the end, so the call is closed
        if first is None:
            first = response
    return first if first is not None else InferenceResponse()
