"""Starting worker processes without ever importing the user's ``__main__``.

multiprocessing's ``spawn`` and ``forkserver`` re-import the parent's main script in the child,
so a script that embeds inferd without an ``if __name__ == "__main__":`` guard would run itself
again inside every worker. We start our own processes instead, with ``python -m``:

``zygote`` (default)
    One :mod:`~inferd.backends.python.worker.zygote` process per backend (per server), started on
    first use and stopped when the last Python model is unloaded. It preloads numpy and the
    worker module, then ``os.fork()``\\ s a worker whenever asked, so the workers share those
    pages copy-on-write. Forking there is safe: the zygote is single-threaded. The server sends
    each worker's end of its socketpair over a Unix control socket (``SCM_RIGHTS``) and gets a
    pidfd back, which it uses to wait for and kill the worker without pid-reuse races; the exit
    code is collected by the zygote (the workers' parent) on request.
``spawn``
    A plain ``python -m inferd.backends.python.worker <fd>`` subprocess per worker.

Lifetimes: the zygote exits on EOF of its control socket and has ``PR_SET_PDEATHSIG`` set, so it
dies with the server; workers exit on EOF of their socket and die with the zygote. The zygote is
started from a thread that lives exactly as long as it does (the death signal is tied to the
thread that forked, not to the process).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import Protocol

import orjson

log = logging.getLogger(__name__)

START_METHODS = ("zygote", "spawn")
#: Accepted for configurations written for earlier releases: the zygote is our fork server.
ALIASES = {"forkserver": "zygote"}
#: How long a new zygote may take to import numpy and the worker module.
ZYGOTE_START_TIMEOUT_S = 60.0

_MAX_MESSAGE = 4096


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit code unknown"
    if exitcode < 0:
        try:
            return f"exit code {exitcode}, killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"exit code {exitcode}"
    return f"exit code {exitcode}"


def child_environment() -> dict[str, str]:
    """Our environment, with this interpreter's ``sys.path`` so the child imports what we do
    (inferd itself, and whatever the user's script made importable)."""
    env = dict(os.environ)
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _readable(fd: int, timeout_s: float | None) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout_s is None else max(0, int(timeout_s * 1000))))


# -- process handles -----------------------------------------------------------------------------


class WorkerProcess(Protocol):
    """What the server needs of a worker process, however it was started."""

    @property
    def pid(self) -> int: ...

    @property
    def death_fd(self) -> int | None:
        """A descriptor that becomes readable when the process exits (None: unsupported)."""

    def wait(self, timeout_s: float | None) -> int | None:
        """Its exit code once it has exited (reaped), None if still running after the wait."""

    def kill(self) -> None: ...

    def close(self) -> None: ...


class SpawnedProcess:
    """A worker that is our own child (``spawn``)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self._pidfd = _pidfd(popen.pid)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def death_fd(self) -> int | None:
        return self._pidfd

    def wait(self, timeout_s: float | None) -> int | None:
        try:
            return self._popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self._popen.kill()

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class ForkedProcess:
    """A worker forked by the zygote: waited for and killed through its pidfd, reaped by the
    zygote (its parent)."""

    def __init__(self, zygote: Zygote, pid: int, pidfd: int) -> None:
        self._zygote = zygote
        self._pid = pid
        self._pidfd: int | None = pidfd
        self._exitcode: int | None = None
        self._reaped = False

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def death_fd(self) -> int | None:
        return self._pidfd

    def wait(self, timeout_s: float | None) -> int | None:
        if self._reaped:
            return self._exitcode
        if self._pidfd is not None and not _readable(self._pidfd, timeout_s):
            return None
        self._reaped = True
        self._exitcode = self._zygote.reap(self._pid)
        return self._exitcode

    def kill(self) -> None:
        if self._pidfd is not None and not self._reaped:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


# -- launchers -----------------------------------------------------------------------------------


def spawn_worker(channel: socket.socket, name: str) -> SpawnedProcess:
    """``python -m inferd.backends.python.worker <fd>``; ``channel`` is the child's end."""
    popen = subprocess.Popen(
        [sys.executable, "-m", "inferd.backends.python.worker", str(channel.fileno()), name],
        pass_fds=(channel.fileno(),),
        env=child_environment(),
        stdin=subprocess.DEVNULL,
    )
    return SpawnedProcess(popen)


class Zygote:
    """The server's side of one zygote process: a control socket and the thread keeping it."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        self._lock = threading.Lock()
        self._popen: subprocess.Popen[bytes] | None = None
        started = threading.Event()
        failure: list[BaseException] = []

        def keep() -> None:
            try:
                self._popen = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "inferd.backends.python.worker.zygote",
                        str(theirs.fileno()),
                        str(os.getpid()),
                    ],
                    pass_fds=(theirs.fileno(),),
                    env=child_environment(),
                    stdin=subprocess.DEVNULL,
                )
            except BaseException as exc:
                failure.append(exc)
                return
            finally:
                started.set()
            self._popen.wait()  # this thread must outlive the zygote: see PR_SET_PDEATHSIG

        self._keeper = threading.Thread(target=keep, name="inferd-python-zygote", daemon=True)
        self._keeper.start()
        started.wait()
        theirs.close()
        if failure:
            ours.close()
            raise failure[0]
        ours.settimeout(ZYGOTE_START_TIMEOUT_S)
        try:
            hello, _ = self._receive()
        finally:
            ours.settimeout(None)
        if hello.get("op") != "ready":
            self.close()
            raise OSError(f"the Python model zygote did not start: {hello}")

    @property
    def pid(self) -> int | None:
        return None if self._popen is None else self._popen.pid

    @property
    def alive(self) -> bool:
        # Not Popen.poll(): the keeper thread holds the wait lock; it ends when the zygote does.
        return self._keeper.is_alive() and self._sock.fileno() >= 0

    def _receive(self) -> tuple[dict[str, object], list[int]]:
        data, fds, _, _ = socket.recv_fds(self._sock, _MAX_MESSAGE, 1)
        if not data:
            for fd in fds:
                os.close(fd)
            raise EOFError("the Python model zygote exited")
        message = orjson.loads(data)
        assert isinstance(message, dict)
        return message, fds

    def fork(self, channel: socket.socket, name: str) -> ForkedProcess:
        """A new worker serving ``channel`` (the child's end, still to be closed by the caller)."""
        with self._lock:
            request = orjson.dumps({"op": "fork", "name": name})
            socket.send_fds(self._sock, [request], [channel.fileno()])
            reply, fds = self._receive()
        if reply.get("op") != "forked" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError(f"the Python model zygote could not fork a worker: {reply}")
        pid = reply["pid"]
        assert isinstance(pid, int)
        return ForkedProcess(self, pid, fds[0])

    def reap(self, pid: int) -> int | None:
        """The exit code of an exited worker (None if the zygote cannot tell any more)."""
        try:
            with self._lock:
                self._sock.send(orjson.dumps({"op": "reap", "pid": pid}))
                reply, _ = self._receive()
        except (OSError, EOFError):
            return None
        code = reply.get("exitcode")
        return code if isinstance(code, int) else None

    def close(self, timeout_s: float = 5.0) -> None:
        """Close the control socket: the zygote exits (its workers get SIGKILL)."""
        with self._lock:
            self._sock.close()
        self._keeper.join(timeout_s)
        if self._keeper.is_alive() and self._popen is not None:
            self._popen.kill()
            self._keeper.join(timeout_s)


class ZygoteHost:
    """The zygote shared by every Python model of one backend: started on first use, stopped
    when the last user lets go, restarted if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zygote: Zygote | None = None
        self._users = 0

    def acquire(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            zygote = self._zygote if self._users == 0 else None
            if zygote is not None:
                self._zygote = None
        if zygote is not None:
            zygote.close()

    def get(self) -> Zygote:
        with self._lock:
            if self._zygote is not None and not self._zygote.alive:
                log.error("the Python model zygote died; starting a new one")
                self._zygote.close()
                self._zygote = None
            if self._zygote is None:
                self._zygote = Zygote()
            return self._zygote


class Launcher:
    """Starts one worker process for a channel, by the configured method."""

    def __init__(self, method: str, host: ZygoteHost) -> None:
        self.method = method
        self._host = host

    def start(self, channel: socket.socket, name: str) -> WorkerProcess:
        if self.method == "spawn":
            return spawn_worker(channel, name)
        return self._host.get().fork(channel, name)
