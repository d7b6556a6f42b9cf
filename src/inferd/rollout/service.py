"""The server's traffic policies: one per model at most, from the model's ``rollout.yaml`` or
the admin API, and what the engine, the admin API and the metrics ask of them.

:class:`Rollout` implements :class:`~inferd.core.routing.Router` (the engine reads
:attr:`Rollout.routes`) and :class:`~inferd.core.routing.RolloutAdmin`. The repository manager
calls :meth:`Rollout.model_changed` after every load, reload and unload: the policy file beside
the model's ``config.pbtxt`` is read again then (off the event loop). A policy set over the API
lives in memory only (the server never writes the file); a reload without a file keeps it while
its variants still serve.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inferd.core.clock import Clock, SystemClock
from inferd.core.routing import RolloutStatistics, TargetRunner
from inferd.errors import InferdError, InvalidArgumentError, NotFoundError
from inferd.repository.manager_types import ModelManager
from inferd.rollout.policy import Policy, parse_policy, parse_policy_text
from inferd.rollout.report import policy_figures, policy_report
from inferd.rollout.router import LivePolicy
from inferd.rollout.shadow import Mirrors
from inferd.rollout.targets import MissingModelError, check_targets

__all__ = ["POLICY_FILE", "Rollout"]

_log = logging.getLogger("inferd.rollout")

POLICY_FILE = "rollout.yaml"


def _read_policy_file(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc.strerror or exc}") from None


class Rollout:
    def __init__(self, manager: ModelManager, *, clock: Clock | None = None) -> None:
        self._manager = manager
        self._clock = clock if clock is not None else SystemClock()
        self._mirrors = Mirrors(self._clock)
        self._routes: dict[str, LivePolicy] = {}
        self._waiting: dict[str, tuple[Policy, str]] = {}  # model -> (policy, missing model)
        self._rollbacks: dict[str, int] = {}  # canary rollbacks per model, across policies

    # -- Router ---------------------------------------------------------------------------------

    @property
    def routes(self) -> Mapping[str, LivePolicy]:
        return self._routes

    def attach(self, runner: TargetRunner) -> None:
        self._mirrors.attach(runner)

    async def close(self) -> None:
        await self._mirrors.close()

    # -- the repository's changes ---------------------------------------------------------------

    async def model_changed(self, name: str, model_dir: Path | None) -> None:
        """``name`` was loaded from ``model_dir`` (None: unloaded). A policy file that is wrong
        raises :class:`InvalidArgumentError` (the model then serves without a policy)."""
        try:
            if model_dir is None:
                self._drop(name, "the model was unloaded")
                self._waiting.pop(name, None)
            else:
                await self._reload(name, model_dir)
        finally:
            for waiting, (policy, missing) in list(self._waiting.items()):
                if missing == name and model_dir is not None:
                    self._try_waiting(waiting, policy)

    async def _reload(self, name: str, model_dir: Path) -> None:
        path = model_dir / POLICY_FILE
        text = await asyncio.to_thread(_read_policy_file, path)
        if text is None:
            self._waiting.pop(name, None)
            current = self._routes.get(name)
            if current is not None:
                try:
                    self._check(name, current.policy)
                except InferdError as exc:
                    self._drop(name, f"it no longer applies after the reload: {exc}")
            return
        try:
            policy = parse_policy_text(text)
        except InvalidArgumentError as exc:
            self._drop(name, "its policy file is wrong")
            raise InvalidArgumentError(
                f"model '{name}' serves without a traffic policy: {path}: {exc}"
            ) from None
        self._waiting.pop(name, None)
        try:
            self._check(name, policy)
        except MissingModelError as exc:
            self._drop(name, "its policy waits for another model")
            self._waiting[name] = (policy, exc.model)
            _log.info("the traffic policy of '%s' waits for model '%s' to load", name, exc.model)
            return
        except InferdError as exc:
            self._drop(name, "its policy file is wrong")
            raise InvalidArgumentError(
                f"model '{name}' serves without a traffic policy: {path}: {exc}"
            ) from None
        self._install(name, policy, keep_state=True, source=str(path))

    def _try_waiting(self, name: str, policy: Policy) -> None:
        try:
            self._check(name, policy)
        except MissingModelError as exc:
            self._waiting[name] = (policy, exc.model)
            return
        except InferdError as exc:
            self._waiting.pop(name, None)
            _log.error("model '%s' serves without a traffic policy: %s", name, exc)
            return
        self._waiting.pop(name, None)
        self._install(name, policy, keep_state=True, source=POLICY_FILE)

    def _check(self, name: str, policy: Policy) -> None:
        check_targets(policy, name, self._manager.get)

    def _install(self, name: str, policy: Policy, *, keep_state: bool, source: str) -> LivePolicy:
        current = self._routes.get(name)
        if keep_state and current is not None and current.policy == policy:
            return current
        base = self._manager.get(*policy.variants[0].target.resolve(name)).spec
        live = LivePolicy(
            name,
            policy,
            clock=self._clock,
            mirrors=self._mirrors,
            labelled=frozenset(t.name for t in base.outputs if t.label_filename),
            batched=base.max_batch_size > 0,
        )
        self._count_rollbacks(name)
        self._routes[name] = live  # one assignment: the engine sees the old or the new policy
        if current is not None:
            current.retire()
        _log.info(
            "traffic policy of '%s' (%s, from %s): %s",
            name,
            policy.kind,
            source,
            ", ".join(v.name for v in policy.variants),
        )
        return live

    def _drop(self, name: str, why: str) -> None:
        self._count_rollbacks(name)
        removed = self._routes.pop(name, None)
        if removed is not None:
            removed.retire()
            _log.info("traffic policy of '%s' removed: %s", name, why)

    # -- RolloutAdmin ---------------------------------------------------------------------------

    def _live(self, model: str) -> LivePolicy:
        live = self._routes.get(model)
        if live is None:
            waiting = self._waiting.get(model)
            if waiting is not None:
                raise NotFoundError(
                    f"the traffic policy of '{model}' waits for model '{waiting[1]}' to load"
                )
            self._manager.get(model, None)  # an unknown model is named as such
            raise NotFoundError(
                f"model '{model}' has no traffic policy: put one in {POLICY_FILE} beside its "
                f"config.pbtxt or PUT it to /v2/models/{model}/rollout"
            )
        return live

    def show(self, model: str) -> dict[str, Any]:
        return policy_report(self._live(model), self._rollbacks.get(model, 0))

    def set(self, model: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self._manager.get(model, None)
        policy = parse_policy(body)
        try:
            self._check(model, policy)
        except MissingModelError as exc:
            raise InvalidArgumentError(str(exc)) from None
        self._waiting.pop(model, None)
        self._install(model, policy, keep_state=False, source="the admin API")
        return self.show(model)

    def clear(self, model: str) -> None:
        self._live(model)
        self._drop(model, "cleared over the admin API")

    def _count_rollbacks(self, model: str) -> None:
        """Keep the rollbacks of a policy about to be replaced (the counter is the model's)."""
        live = self._routes.get(model)
        if live is not None and live.canary is not None:
            self._rollbacks[model] = self._rollbacks.get(model, 0) + live.canary.rollbacks

    def _canary(self, model: str, action: str) -> LivePolicy:
        live = self._live(model)
        if live.canary is None:
            raise InvalidArgumentError(
                f"{action} applies to canary policies; '{model}' has a {live.policy.kind} policy"
            )
        return live

    def promote(self, model: str) -> dict[str, Any]:
        live = self._canary(model, "promote")
        assert live.canary is not None
        live.canary.promote()
        return self.show(model)

    def rollback(self, model: str, reason: str) -> dict[str, Any]:
        live = self._canary(model, "rollback")
        assert live.canary is not None
        live.canary.rollback(reason or "rolled back over the admin API")
        return self.show(model)

    def feedback(self, model: str, request_id: str, reward: float) -> dict[str, Any]:
        live = self._live(model)
        if live.ids is None:
            raise InvalidArgumentError(
                f"the {live.policy.kind} policy of '{model}' takes no feedback: give it a "
                "'feedback' section"
            )
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise InvalidArgumentError("'reward' must be a number")
        if not math.isfinite(reward):
            raise InvalidArgumentError("'reward' must be a finite number")
        assert live.policy.feedback is not None
        variant = live.reward(request_id, float(reward))
        if variant is None:
            raise NotFoundError(
                f"no request with id '{request_id}' to reward for '{model}': it is unknown, "
                f"already rewarded, or older than the policy's feedback.ttl_s "
                f"({live.policy.feedback.ttl_s:g} s)"
            )
        return {"model": model, "id": request_id, "variant": variant, "reward": float(reward)}

    # -- metrics --------------------------------------------------------------------------------

    def statistics(self) -> RolloutStatistics:
        return RolloutStatistics(
            tuple(
                policy_figures(live, self._rollbacks.get(name, 0))
                for name, live in list(self._routes.items())
            )
        )
