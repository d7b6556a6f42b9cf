"""When a policy is applied: every variant names a READY model version whose signature matches
the baseline's, so any request the model accepts can go to any variant."""

from __future__ import annotations

from collections.abc import Callable

from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.errors import InferdError, InvalidArgumentError, NotFoundError
from inferd.repository.manager_types import ServingModel
from inferd.rollout.policy import Policy, Variant

__all__ = ["MissingModelError", "check_targets", "signature_problem"]

GetModel = Callable[[str, "int | None"], ServingModel]


class MissingModelError(NotFoundError):
    """A variant names another model that is not ready (yet)."""

    def __init__(self, message: str, model: str) -> None:
        super().__init__(message)
        self.model = model


def _where(policy: Policy, index: int) -> str:
    if policy.kind in ("shadow", "canary"):
        return ("primary", "shadow" if policy.kind == "shadow" else "candidate")[index]
    return f"variants[{index}]"


def check_targets(policy: Policy, model: str, get: GetModel) -> None:
    """Raise :class:`InvalidArgumentError` naming the variant that cannot serve, or
    :class:`MissingModelError` when a variant's other model is not ready."""
    specs: list[tuple[Variant, ServingModel]] = []
    for index, variant in enumerate(policy.variants):
        where = _where(policy, index)
        name, version = variant.target.resolve(model)
        try:
            serving = get(name, version)
        except InferdError as exc:
            message = f"rollout policy: {where}: {exc}"
            if name != model:
                raise MissingModelError(message, name) from None
            raise InvalidArgumentError(message) from None
        if serving.spec.decoupled:
            raise InvalidArgumentError(
                f"rollout policy: {where}: model '{name}' is decoupled; traffic policies route "
                "requests that get exactly one response"
            )
        specs.append((variant, serving))
    base = specs[0][1]
    seen: dict[tuple[str, int], str] = {}
    for index, (_, serving) in enumerate(specs):
        key = (serving.spec.name, serving.version)
        if key in seen:
            raise InvalidArgumentError(
                f"rollout policy: {_where(policy, index)}: is '{key[0]}' version {key[1]}, "
                f"as {seen[key]} is"
            )
        seen[key] = _where(policy, index)
        if index == 0:
            continue
        problem = signature_problem(base.spec, serving.spec, outputs=policy.kind != "shadow")
        if problem is not None:
            raise InvalidArgumentError(
                f"rollout policy: {_where(policy, index)}: '{serving.spec.name}' version "
                f"{serving.version} does not match '{base.spec.name}' version {base.version}: "
                f"{problem}"
            )


def _shape(t: TensorSpec) -> tuple[str, tuple[int, ...]]:
    return (t.datatype.name, t.dims)


def signature_problem(base: ModelSpec, other: ModelSpec, *, outputs: bool) -> str | None:
    """What keeps ``other`` from taking every request ``base`` takes (None: nothing). With
    ``outputs``, ``other`` must also produce each of ``base``'s outputs alike."""
    if (base.max_batch_size > 0) != (other.max_batch_size > 0):
        return "one batches (max_batch_size > 0) and the other does not"
    mine = {t.name: t for t in base.inputs}
    theirs = {t.name: t for t in other.inputs}
    if set(mine) != set(theirs):
        return f"inputs {sorted(mine)} vs {sorted(theirs)}"
    for name, tensor in mine.items():
        if _shape(tensor) != _shape(theirs[name]):
            a, b = _shape(tensor), _shape(theirs[name])
            return f"input '{name}' is {a[0]} {list(a[1])} vs {b[0]} {list(b[1])}"
    if outputs:
        produced = {t.name: t for t in other.outputs}
        for tensor in base.outputs:
            found = produced.get(tensor.name)
            if found is None:
                return f"output '{tensor.name}' is missing"
            if _shape(found) != _shape(tensor):
                a, b = _shape(tensor), _shape(found)
                return f"output '{tensor.name}' is {a[0]} {list(a[1])} vs {b[0]} {list(b[1])}"
    return None
