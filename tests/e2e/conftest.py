"""Shared pieces of the end-to-end tests: the ``inferd serve`` process and raw HTTP helpers.

Each test module that needs a server starts one through a module-scoped fixture, so a module pays
the start-up cost once. ``running_server`` returns only after the process printed its "ready"
line with the ports it bound (port 0 everywhere: no port is chosen by the test).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferd.testing import ServerProcess, running_server


@pytest.fixture(scope="module")
def server(example_repo: Path) -> Iterator[ServerProcess]:
    """``inferd serve`` on the example repository, default flags (model control mode none)."""
    with running_server([example_repo]) as proc:
        yield proc


@dataclass
class RawReply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        return str(self.json()["error"])


def raw_request(
    url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> RawReply:
    """One request on a fresh connection, so a test controls every byte and header sent."""
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return RawReply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()
