"""Auto-complete rules shared by runtimes that can read a model's inputs and outputs."""

from __future__ import annotations

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
