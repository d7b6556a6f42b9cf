"""The gRPC front end writes its address with the shared ``HOST:PORT`` formatter: an IPv6
host, bracketed or not, binds and is logged as ``[::1]:PORT``, and tritonclient reaches it."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from inferd.frontends.grpc import start_grpc_server
from tests.integration.conftest import LoopThread, Stack, start_stack


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this host")


@pytest.fixture(scope="module")
def stack(serving_roots: list[Path], loop_thread: LoopThread) -> Iterator[Stack]:
    started = loop_thread.call(start_stack(serving_roots, server_version="0.0.0-test"))
    try:
        yield started
    finally:
        loop_thread.call(started.manager.close())


@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_an_ipv6_host_binds_and_is_logged_in_brackets(
    host: str, stack: Stack, loop_thread: LoopThread, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger("inferd.test.grpc.address")
    with caplog.at_level(logging.INFO, logger=log.name):
        server, port = loop_thread.call(start_grpc_server(stack.engine, host, 0, log=log))
    try:
        assert port > 0
        assert f"gRPC server listening on [::1]:{port}" in caplog.text
        with grpcclient.InferenceServerClient(f"[::1]:{port}") as client:
            assert client.is_server_live()
    finally:
        loop_thread.call(server.stop(1.0))
