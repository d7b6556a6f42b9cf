"""Rolling a model back to an earlier version: which version, and the pin that keeps it.

A rollback makes another version the model's default (what a request without a version gets)
and pins it there: polling leaves the model alone and the version policy is not applied again
until the pin is lifted (``unpin``) or the model is loaded explicitly. The choice of version is
a pure function of the versions the repository holds; :func:`roll_back` is the swap, run by the
repository manager under the model's lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection

from inferd.core.lifecycle import ModelState
from inferd.errors import InvalidArgumentError, NotFoundError, UnavailableError
from inferd.repository.layout import list_versions
from inferd.repository.loader import LoadedVersion
from inferd.repository.records import LoadSource, ModelRecord, Pin

__all__ = ["MODE_NONE_REFUSAL", "Pin", "refuse_in_mode_none", "roll_back", "rollback_target"]

_log = logging.getLogger("inferd.repository")

MODE_NONE_REFUSAL = (
    "with --model-control-mode none the versions served are fixed when the server starts: "
    "start it with --model-control-mode poll or explicit to {action}"
)


def refuse_in_mode_none(action: str) -> UnavailableError:
    return UnavailableError(MODE_NONE_REFUSAL.format(action=action))


def _listed(versions: Collection[int]) -> str:
    return ", ".join(str(v) for v in sorted(versions)) or "none"


def rollback_target(
    name: str, current: int, available: Collection[int], wanted: int | None = None
) -> int:
    """The version to roll ``name`` back to from its default version ``current``: ``wanted``
    when given, else the highest version below ``current`` among ``available`` (the version
    folders of the model in the repository)."""
    if wanted is not None:
        if wanted == current:
            raise InvalidArgumentError(
                f"version {wanted} is already the default version of '{name}'"
            )
        if wanted not in available:
            raise NotFoundError(
                f"cannot roll '{name}' back to version {wanted}: the repository has no such "
                f"version (it has {_listed(available)})"
            )
        return wanted
    older = [v for v in available if v < current]
    if not older:
        raise InvalidArgumentError(
            f"cannot roll '{name}' back: the repository has no version below its default "
            f"version {current} (it has {_listed(available)}); name a version to roll to"
        )
    return max(older)


async def roll_back(
    record: ModelRecord,
    version: int | None,
    *,
    load: Callable[[ModelRecord, LoadSource, int], Awaitable[LoadedVersion]],
    publish: Callable[[ModelRecord], None],
    retire: Callable[[ModelRecord, list[LoadedVersion]], Awaitable[None]],
) -> Pin:
    """Pin ``version`` (None: the highest below the default one) as the model's default: load
    it (``load``, which warms it up) unless it is loaded, publish it in one step, then drain and
    unload the version it replaces. Call with the model's lock held."""
    name = record.name
    current = record.default_version()
    source = record.source
    if current is None or source is None:
        raise NotFoundError(f"cannot roll '{name}' back: it has no loaded version")
    available = await asyncio.to_thread(list_versions, source.model_dir)
    target = rollback_target(name, current, available, version)
    if target not in record.loaded:
        record.loaded[target] = await load(record, source, target)
    pin = Pin(target, current)
    record.move(target, ModelState.READY, pin.reason(name))
    record.pin = pin
    leaving = record.loaded.pop(current)
    record.move(current, ModelState.UNLOADING)
    publish(record)
    _log.info("model '%s' rolled back from version %d to %d", name, current, target)
    await retire(record, [leaving])
    record.move(current, ModelState.UNAVAILABLE, f"unloaded: rolled back to {target}")
    return pin
