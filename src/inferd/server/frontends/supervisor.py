"""The engine process's keeper of the front-end processes (``inferd serve --frontends K``).

It reserves the HTTP and gRPC ports (a bound socket with ``SO_REUSEPORT`` that never listens,
so the port stays this server's while front ends come and go, and port 0 names one port for
all of them), starts K front-end processes that listen on those ports with ``SO_REUSEPORT``
(the kernel spreads new connections over them), gives each a channel served by the
:class:`~inferd.server.frontends.bridge.EngineBridge`, restarts one that dies (its in-flight
calls are cancelled, its channel closed, its share of the connection count forgotten; a new one
gets a new channel) and stops them all on shutdown. If the engine stops reading a front end's
channel while that front end still runs (a message it cannot decode, a block outside the
arena), the front end is killed and restarted the same way, so its clients are not left
waiting on calls nobody reads.

A channel's segments are unlinked from ``/dev/shm`` as soon as its front end has attached them
(it says ``ready``), so a server killed outright leaves no file behind. The front ends share one
HTTP connection count (:mod:`.connections`, a memfd: it has no name to leave behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import socket
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from inferd.backends.threads import CGROUP_ROOT, available_cores
from inferd.errors import InferdError
from inferd.server.config import ServerConfig
from inferd.server.frontends.bridge import EngineBridge
from inferd.server.frontends.channel import Channel, create_channel
from inferd.server.frontends.connections import ConnectionTable
from inferd.server.frontends.link import MessageLink
from inferd.server.frontends.settings import Settings, frontend_config, local_infer

__all__ = ["FrontendError", "Supervisor", "auto_frontends", "frontends_for"]

RING_SLOTS = 256
SLOT_BYTES = 16 * 1024
READY_TIMEOUT_S = 120.0
_RESTART_DELAYS_S = (0.0, 0.5, 1.0, 2.0, 5.0)


class FrontendError(InferdError):
    """A front-end process could not be started."""


def auto_frontends(cgroup_root: Path = CGROUP_ROOT) -> int:
    """``--frontends auto``: :func:`frontends_for` the cores this process may use (its CPU
    affinity and its cgroup's CPU quota)."""
    return frontends_for(available_cores(cgroup_root))


def frontends_for(cores: int) -> int:
    """One front end per core less one for the engine; one process (no front ends) below 3
    cores, where a second loop has no core of its own (docs/scaling.md)."""
    return cores - 1 if cores >= 3 else 1


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with SO_REUSEPORT that never listens: it holds the port
    (and names the one port 0 picked) without taking connections."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        if port != 0:
            _refuse_if_served(sock)
    except BaseException:
        sock.close()
        raise
    return sock


def _refuse_if_served(sock: socket.socket) -> None:
    """SO_REUSEPORT would let this server join another process's listener on the port (of the
    same user) and split its connections: refuse to start when something answers there."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    try:
        probe = socket.create_connection((host, port), timeout=1.0)
    except OSError:
        return  # nobody listens: the port is this server's
    probe.close()
    raise OSError(errno.EADDRINUSE, "Address already in use")


@dataclass(slots=True)
class _Frontend:
    index: int
    process: asyncio.subprocess.Process | None = None
    channel: Channel | None = None
    serving: asyncio.Task[None] | None = None
    restarts: int = 0
    pids: list[int] = field(default_factory=list)


class Supervisor:
    """``await start()`` (the ports in ``ports``), then ``await stop(grace_s)``."""

    def __init__(
        self, config: ServerConfig, bridge: EngineBridge, count: int, *, log: logging.Logger
    ) -> None:
        if count < 2:
            raise ValueError("a supervisor runs two or more front ends")
        self._config = config
        self._bridge = bridge
        self._count = count
        self._log = log
        self._reserved: list[socket.socket] = []
        self.ports: dict[str, int] = {}
        self._frontends = [_Frontend(i) for i in range(count)]
        self._connections: ConnectionTable | None = None
        self._keepers: list[asyncio.Task[None]] = []
        self._stopping = False

    @property
    def pids(self) -> list[int]:
        """The running front ends' process ids."""
        return [f.process.pid for f in self._frontends if f.process is not None]

    async def start(self) -> None:
        cfg = self._config
        if cfg.allow_http:
            self._reserved.append(reserve_port(cfg.http_address, cfg.http_port))
            self.ports["http"] = self._reserved[-1].getsockname()[1]
        if cfg.openai_port is not None:
            self._reserved.append(reserve_port(cfg.http_address, cfg.openai_port))
            self.ports["openai"] = self._reserved[-1].getsockname()[1]
        if cfg.allow_grpc:
            self._reserved.append(reserve_port(cfg.grpc_address, cfg.grpc_port))
            self.ports["grpc"] = self._reserved[-1].getsockname()[1]
        self._connections = ConnectionTable.create(self._count)
        try:
            await asyncio.gather(*(self._launch(f) for f in self._frontends))
        except BaseException:
            await self.stop(1.0)
            raise
        loop = asyncio.get_running_loop()
        self._keepers = [
            loop.create_task(self._keep(f), name=f"inferd-frontend-{f.index}")
            for f in self._frontends
        ]

    async def _launch(self, frontend: _Frontend) -> None:
        """Start one front end with a new channel; return once it serves."""
        assert self._connections is not None
        connection_fds = self._connections.fds()
        engine_end, spec = create_channel(RING_SLOTS, SLOT_BYTES)
        frontend.channel = engine_end
        frontend.serving = asyncio.get_running_loop().create_task(
            self._bridge.serve(MessageLink(engine_end, SLOT_BYTES), f"#{frontend.index}")
        )
        frontend.serving.add_done_callback(partial(self._serving_ended, frontend))
        settings = Settings(
            index=frontend.index,
            config=frontend_config(self._config),
            channel=spec.as_dict(),
            slot_bytes=SLOT_BYTES,
            http_port=self.ports.get("http"),
            grpc_port=self.ports.get("grpc"),
            openai_port=self.ports.get("openai"),
            local_infer=local_infer(self._config),
            connection_fds=connection_fds,
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "inferd.server.frontends.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            pass_fds=(*spec.fds(), *connection_fds),
        )
        frontend.process = process
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(settings.encode())
        await process.stdin.drain()  # the pipe stays open: its end tells the front end to go
        try:
            line = await asyncio.wait_for(process.stdout.readline(), READY_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if line.strip() != b"ready":
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            code = await process.wait()
            raise FrontendError(
                f"front end {frontend.index} did not start (exit status {code}; its log above "
                "says why)"
            )
        engine_end.unlink()  # attached: a killed server leaves nothing in /dev/shm
        frontend.pids.append(process.pid)
        self._log.info("front end %d serving (pid %d)", frontend.index, process.pid)

    def _serving_ended(self, frontend: _Frontend, task: asyncio.Task[None]) -> None:
        """The engine stopped reading ``frontend``'s channel: unless the front end has gone
        already (its keeper restarts it) or the server stops, kill it so that its keeper
        restarts it with a new channel."""
        if self._stopping or task.cancelled() or frontend.serving is not task:
            return
        process = frontend.process
        if process is None or process.returncode is not None:
            return
        self._log.error(
            "the engine stopped reading front end %d's channel (%s); restarting that front end",
            frontend.index,
            task.exception() or "the channel closed",
        )
        with contextlib.suppress(ProcessLookupError):
            process.kill()

    async def _retire(self, frontend: _Frontend) -> None:
        """Cancel the calls of a front end that has gone and close its channel."""
        if frontend.serving is not None:
            frontend.serving.cancel()
            await asyncio.gather(frontend.serving, return_exceptions=True)
            frontend.serving = None
        if frontend.channel is not None:
            frontend.channel.close()
            frontend.channel = None
        if self._connections is not None:
            self._connections.reset(frontend.index)

    async def _keep(self, frontend: _Frontend) -> None:
        """Restart the front end whenever it exits, until the server stops."""
        while not self._stopping:
            assert frontend.process is not None
            code = await frontend.process.wait()
            if self._stopping:
                return
            self._log.warning(
                "front end %d (pid %d) exited with status %s; restarting it",
                frontend.index,
                frontend.process.pid,
                code,
            )
            await self._retire(frontend)
            delay = _RESTART_DELAYS_S[min(frontend.restarts, len(_RESTART_DELAYS_S) - 1)]
            frontend.restarts += 1
            await asyncio.sleep(delay)
            try:
                await self._launch(frontend)
            except FrontendError as exc:
                self._log.error("%s", exc)

    async def stop(self, grace_s: float | None = None) -> None:
        """Ask every front end to finish its requests (up to ``grace_s`` s) and exit."""
        self._stopping = True
        for keeper in self._keepers:
            keeper.cancel()
        await asyncio.gather(*self._keepers, return_exceptions=True)
        grace = self._config.exit_timeout_secs if grace_s is None else grace_s
        running = [f for f in self._frontends if f.process is not None]
        for frontend in running:
            assert frontend.process is not None
            if frontend.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    frontend.process.terminate()
        for frontend in running:
            assert frontend.process is not None
            try:
                await asyncio.wait_for(frontend.process.wait(), math.ceil(grace) + 5.0)
            except TimeoutError:
                self._log.warning("front end %d did not stop; killing it", frontend.index)
                with contextlib.suppress(ProcessLookupError):
                    frontend.process.kill()
                await frontend.process.wait()
            if frontend.process.stdin is not None:
                frontend.process.stdin.close()
            self._log.info("front end %d stopped", frontend.index)
        for frontend in self._frontends:
            await self._retire(frontend)
        for sock in self._reserved:
            sock.close()
        self._reserved.clear()
        if self._connections is not None:
            self._connections.close()
            self._connections = None
