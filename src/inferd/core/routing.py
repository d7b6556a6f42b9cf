"""Traffic policies as the engine, the front ends and the metrics see them.

A traffic policy (shadow, split, bandit, canary; implemented in :mod:`inferd.rollout`) decides
which version answers a request that names no version. The engine reads one mapping,
``Router.routes`` (model name -> the model's active policy), and consults a policy only when the
model has one: a request for a model without a policy, or for an explicit version, costs one
dictionary lookup at most.

For a routed request the engine asks :meth:`ModelRoute.route` for a :class:`RoutedCall` (the
variant's name and the model version to run), runs that version as it runs any request, then
reports the outcome with :meth:`RoutedCall.answered` or :meth:`RoutedCall.failed`. Whatever the
policy does next (a shadow request, a comparison) happens in background tasks the policy owns,
through the :data:`TargetRunner` the engine hands to :meth:`Router.attach`.

The snapshots at the end are what the metrics collector reads at scrape time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from inferd.core.inference import InferRequest

__all__ = [
    "ModelRoute",
    "PolicyFigures",
    "RolloutAdmin",
    "RolloutStatistics",
    "RoutedCall",
    "Router",
    "TargetRunner",
    "VariantFigures",
]

Outputs = Mapping[str, "np.ndarray[Any, Any]"]

# run ``request`` on ``model`` ``version`` (None: its latest ready version) without routing,
# bypassing the response cache; ``observe``: hand the answer to the engine's observers (the
# payload log) too. Returns the model's outputs.
TargetRunner = Callable[[InferRequest, str, "int | None", bool], Awaitable[Outputs]]


class RoutedCall(Protocol):
    """One routed request: where it goes, and where its outcome is reported."""

    @property
    def variant(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def version(self) -> int | None: ...

    def answered(self, outputs: Outputs) -> None:
        """The variant answered with ``outputs`` (before classification); return at once."""
        ...

    def failed(self, error: BaseException) -> None:
        """The variant failed (or the request was refused on its way there)."""
        ...


class ModelRoute(Protocol):
    """A model's active policy."""

    def route(self, request: InferRequest) -> RoutedCall:
        """Choose the variant for ``request``; may give the request an ``id`` (feedback)."""
        ...


class Router(Protocol):
    @property
    def routes(self) -> Mapping[str, ModelRoute]:
        """Model name -> active policy; the same mapping object for the router's lifetime."""
        ...

    def attach(self, runner: TargetRunner) -> None:
        """How the policies run shadow and comparison requests (called once by the engine)."""
        ...


class RolloutAdmin(Protocol):
    """The admin API of the policies (``/v2/models/{m}/rollout``, ``/feedback``), as the HTTP
    front end calls it. Every method raises :class:`~inferd.errors.InferdError` on bad input."""

    def show(self, model: str) -> dict[str, Any]: ...

    def set(self, model: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    def clear(self, model: str) -> None: ...

    def promote(self, model: str) -> dict[str, Any]: ...

    def rollback(self, model: str, reason: str) -> dict[str, Any]: ...

    def feedback(self, model: str, request_id: str, reward: float) -> dict[str, Any]: ...


# -- snapshots for the metrics -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VariantFigures:
    name: str
    requests: int
    errors: int
    latency_p99_s: float | None
    share: float  # the share of new requests the policy sends it now
    feedback: int
    reward_mean: float | None
    p_better: float | None  # against the policy's baseline; None for the baseline itself
    shadow_requests: int  # requests mirrored to it (shadow), or compared on it (canary)
    shadow_agreement: float | None  # share of mirrored requests whose answers agreed


@dataclass(frozen=True, slots=True)
class PolicyFigures:
    model: str
    kind: str
    variants: tuple[VariantFigures, ...]
    canary_stage: int | None = None
    canary_rollbacks: int = 0


@dataclass(frozen=True, slots=True)
class RolloutStatistics:
    policies: tuple[PolicyFigures, ...]
