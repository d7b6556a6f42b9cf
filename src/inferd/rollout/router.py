"""One model's policy at run time: which variant answers each request, and what is counted.

:class:`LivePolicy` implements :class:`~inferd.core.routing.ModelRoute`. Choosing a variant is
cheap and synchronous (a weighted pick from a stable hash of the sticky key or one random
draw; one Thompson draw per arm for a bandit); everything else happens after the answer:
counters, the feedback map, a shadow's mirror, a canary's comparison and judgement. All of it
runs on the event loop; nothing here blocks.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.core.clock import Clock
from inferd.core.inference import InferRequest
from inferd.errors import InvalidArgumentError, RequestCancelledError
from inferd.rollout import sticky
from inferd.rollout.bandit import ThompsonSampler
from inferd.rollout.bayes import RewardStats
from inferd.rollout.compare import Agreement, compare_many, compare_outputs
from inferd.rollout.feedback import RoutedIds
from inferd.rollout.latency import LatencyWindow
from inferd.rollout.policy import Policy
from inferd.rollout.shadow import Mirror, Mirrors, mirror_request
from inferd.rollout.staging import CanaryDriver

__all__ = ["LivePolicy", "VariantState"]

_log = logging.getLogger("inferd.rollout")

Outputs = Mapping[str, np.ndarray[Any, Any]]
LATENCY_WINDOW = 1024  # recent latencies kept per variant for its percentiles
COMPARE_BATCH = 64  # a shadow's answers compared together (and whenever figures are read)


@dataclass(slots=True)
class MirrorFigures:
    """What the mirrored requests to (or compared for) one variant showed."""

    requests: int = 0  # mirrors that finished, answered or not
    errors: int = 0
    skipped: int = 0  # not started: too many already running
    compared: int = 0  # answered and compared
    agreed: int = 0  # compared and every row agreed
    rows: int = 0
    agreed_rows: int = 0
    max_abs_error: float | None = None
    cosine_sum: float = 0.0
    cosine_count: int = 0

    def add(self, agreement: Agreement) -> None:
        self.compared += 1
        self.agreed += agreement.agreed
        self.rows += agreement.rows
        self.agreed_rows += agreement.agreed_rows
        if agreement.max_abs_error is not None:
            self.max_abs_error = max(self.max_abs_error or 0.0, agreement.max_abs_error)
        if agreement.cosine is not None:
            self.cosine_sum += agreement.cosine
            self.cosine_count += 1


@dataclass(slots=True)
class VariantState:
    name: str
    model: str
    version: int | None
    requests: int = 0  # answered or failed
    errors: int = 0
    latency: LatencyWindow = field(default_factory=lambda: LatencyWindow(LATENCY_WINDOW))
    rewards: RewardStats = field(default_factory=RewardStats)
    mirror: MirrorFigures = field(default_factory=MirrorFigures)


class _Call:
    """One routed request (:class:`~inferd.core.routing.RoutedCall`)."""

    __slots__ = ("_live", "_request", "_started", "index", "model", "variant", "version")

    def __init__(self, live: LivePolicy, index: int, request: InferRequest, started: int) -> None:
        state = live.variants[index]
        self._live = live
        self._request = request
        self._started = started
        self.index = index
        self.variant = state.name
        self.model = state.model
        self.version = state.version

    def answered(self, outputs: Outputs) -> None:
        self._live.answered(self.index, self._request, self._started, outputs)

    def failed(self, error: BaseException) -> None:
        self._live.failed(self.index, self._started, error)


class LivePolicy:
    def __init__(
        self,
        model: str,
        policy: Policy,
        *,
        clock: Clock,
        mirrors: Mirrors,
        labelled: frozenset[str] = frozenset(),
        batched: bool = True,
    ) -> None:
        self.model = model
        self.policy = policy
        self.clock = clock
        self._mirrors = mirrors
        self._labelled = labelled  # outputs with a label file: classifier outputs
        self._batched = batched
        self.variants = [VariantState(v.name, *v.target.resolve(model)) for v in policy.variants]
        self._index = {v.name: i for i, v in enumerate(self.variants)}
        self._random = random.Random(policy.seed)
        self._salt = f"{model}:{policy.seed or 0}"
        total = sum(v.weight for v in policy.variants)
        self.weights = [(v.name, v.weight / total) for v in policy.variants]
        self.in_flight = 0  # mirrors gathered or running
        self._gathered: list[Mirror] = []  # mirrors waiting for their batch to start
        self._flush_timer: asyncio.TimerHandle | None = None
        self._uncompared: list[tuple[Outputs, Outputs]] = []  # a shadow's (primary, shadow)
        fb = policy.feedback
        self.ids = (
            RoutedIds(max_ids=fb.max_ids, ttl_s=fb.ttl_s, clock=clock) if fb is not None else None
        )
        self.feedback = 0
        self.sampler: ThompsonSampler | None = None
        if policy.kind == "bandit":
            assert fb is not None
            self.sampler = ThompsonSampler(
                policy.names,
                kind="binary" if fb.reward == "binary" else "continuous",
                seed=policy.seed,
                min_share=policy.min_share,
            )
        self.canary = CanaryDriver(self, policy.canary) if policy.canary is not None else None

    # -- the request path ----------------------------------------------------------------------

    def route(self, request: InferRequest) -> _Call:
        index = self._choose(request)
        if self.ids is not None and not request.id:
            request.id = uuid.uuid4().hex
        return _Call(self, index, request, self.clock.monotonic_ns())

    def _choose(self, request: InferRequest) -> int:
        kind = self.policy.kind
        if kind == "shadow":
            return 0
        if self.sampler is not None:
            return self._index[self.sampler.choose()]
        if self.canary is not None:
            share = self.canary.share
            if share <= 0.0:
                return 0
            if share >= 1.0:
                return 1
            weights = [(self.variants[0].name, 1.0 - share), (self.variants[1].name, share)]
        else:
            weights = self.weights
        return self._index[sticky.pick(weights, self._draw(request))]

    def _draw(self, request: InferRequest) -> float:
        key = self.policy.sticky_key
        if key is not None:
            value = request.parameters.get(key)
            if value is not None:
                return sticky.bucket(str(value), self._salt)
        return self._random.random()

    def answered(self, index: int, request: InferRequest, started: int, outputs: Outputs) -> None:
        latency_s = (self.clock.monotonic_ns() - started) / 1e9
        state = self.variants[index]
        state.requests += 1
        state.latency.add(latency_s)
        if self.ids is not None:
            self.ids.remember(request.id, state.name)
        if self.policy.kind == "shadow":
            if (
                self.policy.shadow.sample >= 1.0
                or self._random.random() < self.policy.shadow.sample
            ):
                self._mirror(request, outputs, 1)
        elif self.canary is not None:
            self.canary.outcome(index, latency_s, error=False)
            if index == 1 and self.canary.compares:
                self._mirror(request, outputs, 0)

    def failed(self, index: int, started: int, error: BaseException) -> None:
        if isinstance(error, RequestCancelledError) or not isinstance(error, Exception):
            return  # the caller left: nothing to hold against the variant
        state = self.variants[index]
        state.requests += 1
        state.errors += 1
        if self.canary is not None:
            latency_s = (self.clock.monotonic_ns() - started) / 1e9
            self.canary.outcome(index, latency_s, error=True)

    # -- mirrors --------------------------------------------------------------------------------

    def _mirror(self, request: InferRequest, served: Outputs, target: int) -> None:
        """Run ``request`` on variant ``target`` in the background and compare its answer with
        ``served``; the figures go to the shadow (shadow policies) or to the candidate (canary
        comparisons run the primary)."""
        counted = self.variants[1]
        if self.in_flight >= self.policy.shadow.max_in_flight:
            counted.mirror.skipped += 1
            return
        state = self.variants[target]
        copy = mirror_request(request, state.model, state.version, state.name)
        observe = self.policy.shadow.log_payloads and self.policy.kind == "shadow"

        def done(outputs: Outputs | None, error: BaseException | None, latency_ns: int) -> None:
            self.in_flight -= 1
            if outputs is None:
                if isinstance(error, Exception) and not isinstance(error, RequestCancelledError):
                    counted.mirror.requests += 1
                    counted.mirror.errors += 1
                    if self.policy.kind == "shadow":
                        counted.errors += 1
                        counted.requests += 1
                return
            counted.mirror.requests += 1
            if self.canary is None:  # a shadow: compared in batches, cheaper per answer
                counted.requests += 1
                counted.latency.add(latency_ns / 1e9)
                self._uncompared.append((served, outputs))
                if len(self._uncompared) >= COMPARE_BATCH:
                    self.compare_pending()
                return
            agreement = compare_outputs(  # a canary judges each comparison as it comes
                outputs,
                served,
                self.policy.compare,
                batched=self._batched,
                labelled=self._labelled,
            )
            counted.mirror.add(agreement)
            self.canary.compared(agreement.agreed)

        self.in_flight += 1
        self._gathered.append((copy, observe, done))
        spec = self.policy.shadow
        if len(self._gathered) >= spec.batch:
            self.flush_mirrors()
        elif self._flush_timer is None:
            self._flush_timer = asyncio.get_running_loop().call_later(
                spec.batch_delay_ms / 1000.0, self.flush_mirrors
            )

    def flush_mirrors(self) -> None:
        """Start the mirrors gathered so far, as one batch."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        batch, self._gathered = self._gathered, []
        if batch and not self._mirrors.start(batch):
            self.in_flight -= len(batch)  # the server is closing: they are not run

    def retire(self) -> None:
        """The policy is replaced or removed: copies gathered and not started are dropped
        (their figures would go to counters no one reads)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        self.in_flight -= len(self._gathered)
        self._gathered = []

    def compare_pending(self) -> None:
        """Compare the shadow's answers not compared yet (before any figure is read)."""
        pairs, self._uncompared = self._uncompared, []
        if not pairs:
            return
        found = compare_many(
            pairs, self.policy.compare, batched=self._batched, labelled=self._labelled
        )
        mirror = self.variants[1].mirror
        for agreement in found:
            mirror.add(agreement)

    # -- feedback and manual actions ------------------------------------------------------------

    def reward(self, request_id: str, value: float) -> str | None:
        """Credit ``value`` to the variant that answered ``request_id``; None when the id is
        unknown (or expired, or already rewarded)."""
        assert self.ids is not None
        assert self.policy.feedback is not None
        if self.policy.feedback.reward == "binary" and not 0.0 <= value <= 1.0:
            raise InvalidArgumentError(
                f"'reward' must lie in [0, 1] for the binary rewards of '{self.model}'s policy, "
                f"not {value:g}"
            )
        variant = self.ids.take(request_id)
        if variant is None:
            return None
        self.variants[self._index[variant]].rewards.add(value)
        self.feedback += 1
        if self.sampler is not None:
            self.sampler.reward(variant, value)
        return variant

    def shares(self) -> dict[str, float]:
        """The share of new requests each variant gets now (a shadow: the share mirrored)."""
        names = [v.name for v in self.variants]
        if self.policy.kind == "shadow":
            return {names[0]: 1.0, names[1]: self.policy.shadow.sample}
        if self.sampler is not None:
            return dict(self.sampler.shares())
        if self.canary is not None:
            share = self.canary.share
            return {names[0]: 1.0 - share, names[1]: share}
        return dict(self.weights)
