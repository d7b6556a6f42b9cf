"""Rolling a model back to an earlier version: which version, and the pin that keeps it.

A rollback makes another version the model's default (what a request without a version gets)
and pins it there: polling leaves the model alone and the version policy is not applied again
until the pin is lifted (``unpin``) or the model is loaded explicitly. The choice of version is
a pure function of the versions the repository holds; the swap is
:meth:`inferd.repository.lifecycle.VersionLifecycle.roll_back`, run under the model's lock.
"""

from __future__ import annotations

from collections.abc import Collection

from inferd.errors import InvalidArgumentError, NotFoundError, UnavailableError
from inferd.repository.records import Pin

__all__ = ["MODE_NONE_REFUSAL", "Pin", "refuse_in_mode_none", "rollback_target"]

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
