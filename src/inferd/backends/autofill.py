"""Auto-complete rules shared by runtimes that can read a model's inputs and outputs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from inferd.errors import ConfigError


def apply_batching(
    config: Any, *, can_batch: bool, default_max_batch_size: int, where: str, hint: str = ""
) -> bool:
    """Triton's batching rule; return whether the completed config batches.

    A model whose every input and output has a dynamic first dimension can batch: it gets
    ``default_max_batch_size`` when the config gave none, and ``dynamic_batching {}`` when it
    batches more than one row and names no scheduler. A model that cannot batch must not be
    given a non-zero ``max_batch_size``.
    """
    if can_batch:
        if config.max_batch_size == 0:
            config.max_batch_size = default_max_batch_size
        if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        raise ConfigError(
            f"autofill failed for {where}: model does not support batching while non-zero "
            f"max_batch_size is specified{hint}"
        )
    return bool(config.max_batch_size > 0)


def add_tensors(
    target: Any, tensors: Iterable[tuple[str, str, Sequence[int]]], batching: bool
) -> None:
    """Append ``(name, config data type, model dims)`` to a config's input or output list.

    ``dims`` are the model's (-1 for a dynamic dimension); with ``batching`` the first is the
    batch dimension and is left out. A tensor left with no dimension gets dims ``[1]``, and,
    when batching, an empty ``reshape`` (the model sees ``[batch]``).
    """
    from tritonclient.grpc import model_config_pb2 as mc

    for name, config_type, model_dims in tensors:
        tensor = target.add()
        tensor.name = name
        tensor.data_type = mc.DataType.Value(config_type)
        dims = list(model_dims[1:] if batching else model_dims)
        if dims:
            tensor.dims.extend(dims)
        else:
            tensor.dims.append(1)
            if batching:
                tensor.reshape.SetInParent()
