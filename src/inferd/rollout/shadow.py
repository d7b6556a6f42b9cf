"""Requests mirrored in the background: a shadow's copy of each answered request, a canary's
comparison run of its primary.

A mirrored request runs on its target (through the engine's
:data:`~inferd.core.routing.TargetRunner`, without routing or the response cache) in a task
this module owns, after the caller's own request was answered; its outcome goes to a callback
on the event loop. It can neither fail nor delay the request it copies: it starts only after
that request has its answer, its failure is only counted, and each policy bounds how many of
its mirrors run at once (a request over the bound is skipped and counted, never queued).

A policy gathers its mirrors and starts them a batch at a time (``batch`` of them, or what has
gathered after ``batch_delay_ms``): a target with dynamic batching then runs them as one batch,
so a copy costs the server a share of one execution and one thread hand-off instead of a whole
one each, and the requests between two batches pay nothing. A mirror's latency counts from its
batch's start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from inferd.core.clock import Clock
from inferd.core.inference import InferRequest
from inferd.core.routing import TargetRunner

__all__ = ["Mirror", "MirrorDone", "Mirrors", "mirror_request"]

_log = logging.getLogger("inferd.rollout")

Outputs = Mapping[str, np.ndarray[Any, Any]]
# (outputs or None, the error or None, latency in ns)
MirrorDone = Callable[["Outputs | None", "BaseException | None", int], None]
# a mirrored request, whether the observers see it, and where its outcome goes
Mirror = tuple[InferRequest, bool, MirrorDone]


def _stable(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``array``, or a copy when it is a view of memory that may change once the request is
    answered (a client's shared-memory region); views of immutable bytes are kept."""
    base: object = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return array if isinstance(base, np.ndarray | bytes) else array.copy()


def mirror_request(
    request: InferRequest, model: str, version: int | None, variant: str
) -> InferRequest:
    """A copy of ``request`` for ``model`` ``version``: every output, the same id and
    parameters plus ``variant`` (so a payload log tells the copies apart)."""
    return InferRequest(
        model_name=model,
        inputs={name: _stable(array) for name, array in request.inputs.items()},
        model_version="" if version is None else str(version),
        id=request.id,
        parameters={**request.parameters, "variant": variant},
    )


class Mirrors:
    """The background tasks of every policy; closed with the server."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._runner: TargetRunner | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def attach(self, runner: TargetRunner) -> None:
        self._runner = runner

    @property
    def running(self) -> int:
        return len(self._tasks)

    def start(self, batch: Sequence[Mirror]) -> bool:
        """Run a batch of mirrored requests in the background, all submitted at once (so a
        target with dynamic batching runs them as one batch); False when they cannot start (no
        runner yet, or the server is closing)."""
        runner = self._runner
        if runner is None or self._closed:
            return False
        task = asyncio.get_running_loop().create_task(
            self._run_batch(runner, batch), name="inferd-rollout-mirror"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _run_batch(self, runner: TargetRunner, batch: Sequence[Mirror]) -> None:
        if len(batch) == 1:
            await self._run(runner, *batch[0])
        else:
            await asyncio.gather(*(self._run(runner, *mirror) for mirror in batch))

    async def _run(
        self, runner: TargetRunner, request: InferRequest, observe: bool, done: MirrorDone
    ) -> None:
        version = int(request.model_version) if request.model_version else None
        started = self._clock.monotonic_ns()
        outputs: Outputs | None = None
        error: BaseException | None = None
        try:
            outputs = await runner(request, request.model_name, version, observe)
        except asyncio.CancelledError as exc:
            error = exc
            raise
        except Exception as exc:
            error = exc
        finally:
            try:
                done(outputs, error, self._clock.monotonic_ns() - started)
            except Exception:
                _log.exception("recording a mirrored request to '%s' failed", request.model_name)

    async def close(self) -> None:
        """Cancel what still runs (the server is stopping) and wait for it."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
