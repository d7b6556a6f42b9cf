"""The shared-memory endpoints of the REST API (``/v2/{system,cuda}sharedmemory/...``) over the
server's :class:`~inferd.frontends.shared_memory.SharedMemoryRegistry`."""

from __future__ import annotations

from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.frontends.http.routes import Endpoint
from inferd.frontends.shared_memory import SharedMemoryRegistry

__all__ = ["SHARED_MEMORY_ENDPOINTS", "shared_memory_answer"]

SHARED_MEMORY_ENDPOINTS = (
    Endpoint.SYSTEM_SHM_STATUS,
    Endpoint.SYSTEM_SHM_REGISTER,
    Endpoint.SYSTEM_SHM_UNREGISTER,
    Endpoint.CUDA_SHM_STATUS,
    Endpoint.CUDA_SHM_REGISTER,
    Endpoint.CUDA_SHM_UNREGISTER,
)


def shared_memory_answer(
    registry: SharedMemoryRegistry, endpoint: Endpoint, region: str, body: dict[str, Any]
) -> Any:
    """Carry out one shared-memory request; return the JSON answer (``None``: an empty 200).
    ``region`` is the region named in the URL ("" for none); ``body`` the POSTed JSON object.
    While the extension is off, the status endpoints answer as for a server with no region
    (``[]``, as Triton does) and the others UNSUPPORTED naming the flag, whatever the body
    holds."""
    if endpoint not in (Endpoint.SYSTEM_SHM_STATUS, Endpoint.CUDA_SHM_STATUS):
        registry.check_enabled()
    if endpoint is Endpoint.SYSTEM_SHM_STATUS:
        return [
            {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for r in registry.status(region)
        ]
    if endpoint is Endpoint.SYSTEM_SHM_REGISTER:
        key, offset, byte_size = _register_fields(body)
        if not region:  # the route always names one; kept for callers that build routes
            raise InvalidArgumentError(
                "'region name' is necessary to register system shared memory region"
            )
        registry.register(region, key, offset, byte_size)
    elif endpoint is Endpoint.SYSTEM_SHM_UNREGISTER:
        registry.unregister(region)
    elif endpoint is Endpoint.CUDA_SHM_STATUS:
        return registry.cuda_status(region)  # always empty: no GPUs
    elif endpoint is Endpoint.CUDA_SHM_REGISTER:
        registry.cuda_register(region)
    elif endpoint is Endpoint.CUDA_SHM_UNREGISTER:
        registry.cuda_unregister(region)
    else:
        raise ValueError(f"{endpoint} is not a shared-memory endpoint")
    return None


def _register_fields(body: dict[str, Any]) -> tuple[str, int, int]:
    key = body.get("key")
    if key is None:
        raise InvalidArgumentError("Shared memory register request has no 'key' field")
    if not isinstance(key, str):
        raise InvalidArgumentError("'key' of the shared memory register request must be a string")
    byte_size = body.get("byte_size")
    if byte_size is None:
        raise InvalidArgumentError("Shared memory register request has no 'byte_size' field")
    offset = body.get("offset", 0)
    for name, value in (("offset", offset), ("byte_size", byte_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(
                f"'{name}' of the shared memory register request must be a non-negative integer"
            )
    return key, offset, byte_size
