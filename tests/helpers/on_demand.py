"""The on-demand loader over a test's fake host: its loads, unloads, sizes and resident set."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from inferd.repository.on_demand import OnDemandLoader, OnDemandSettings
from inferd.testing import FakeClock


class Host(Protocol):
    loaded: dict[str, int]  # each loaded model's requests in flight
    rss: int  # the resident set the loader measures
    clock: FakeClock

    def load(self, name: str) -> Awaitable[str]: ...

    def unload(self, name: str, reason: str) -> Awaitable[None]: ...

    def estimate(self, name: str) -> Awaitable[int]: ...


def loader_over(host: Host, settings: OnDemandSettings, **kw: Any) -> OnDemandLoader:
    """An :class:`OnDemandLoader` that loads, unloads and measures through ``host``
    (``kw``: the loader's other arguments, e.g. ``peak`` or ``release``)."""
    return OnDemandLoader(
        settings,
        load=host.load,
        unload=host.unload,
        loaded=lambda: dict(host.loaded),
        estimate=host.estimate,
        measure=lambda: host.rss,
        clock=host.clock,
        **kw,
    )
