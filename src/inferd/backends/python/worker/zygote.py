"""The zygote: a small, single-threaded process that forks Python model workers on request.

Run by :class:`inferd.backends.python.server.launcher.Zygote` as
``python -m inferd.backends.python.worker.zygote <control fd> <server pid>``. It imports numpy
and the worker module once, so every worker forked from it shares those pages copy-on-write, and it
never imports the server's ``__main__``.

Control socket (``SOCK_SEQPACKET``, JSON messages, descriptors passed with ``SCM_RIGHTS``):

``{"op": "ready", "pid"}``
    sent once, after the preloads.
``{"op": "fork", "name"}`` + the worker's socket -> ``{"op": "forked", "pid"}`` + a pidfd
    fork a worker that serves that socket (``worker.serve_channel``).
``{"op": "reap", "pid"}`` -> ``{"op": "reaped", "pid", "exitcode"}``
    collect an exited worker's exit code (``null`` if it is still running or unknown).

EOF on the control socket (the server closed it, or died) ends the zygote.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import traceback

import orjson

from inferd.backends.python.lifetime import set_parent_death_signal
from inferd.backends.python.worker import (
    worker,  # the preload: numpy and everything a worker imports
)

_MAX_MESSAGE = 4096


def _fork_worker(control: socket.socket, channel_fd: int, name: str) -> int:
    zygote_pid = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        control.close()
        set_parent_death_signal()  # die with the zygote (and so with the server)
        if os.getppid() != zygote_pid:
            os._exit(1)
        code = worker.serve_channel(channel_fd, name)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _reap(pid: int) -> int | None:
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


def serve(control: socket.socket) -> None:
    control.send(orjson.dumps({"op": "ready", "pid": os.getpid()}))
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, _MAX_MESSAGE, 1)
        except OSError:
            return
        if not data:
            return  # the server closed its end, or died
        message = orjson.loads(data)
        op = message.get("op")
        if op == "fork" and len(fds) == 1:
            try:
                pid = _fork_worker(control, fds[0], str(message.get("name", "")))
                pidfd = os.pidfd_open(pid)
            except OSError as exc:
                control.send(orjson.dumps({"op": "error", "message": str(exc)}))
            else:
                socket.send_fds(control, [orjson.dumps({"op": "forked", "pid": pid})], [pidfd])
                os.close(pidfd)
            finally:
                os.close(fds[0])
        elif op == "reap":
            pid = int(message["pid"])
            reply = {"op": "reaped", "pid": pid, "exitcode": _reap(pid)}
            control.send(orjson.dumps(reply))
        else:
            for fd in fds:
                os.close(fd)
            control.send(orjson.dumps({"op": "error", "message": f"unknown request {op!r}"}))


def main(argv: list[str]) -> int:
    control_fd, server_pid = int(argv[0]), int(argv[1])
    set_parent_death_signal()  # second line of defence after EOF on the control socket
    if os.getppid() != server_pid:
        return 0  # the server died before we could ask to die with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: server decides
    control = socket.socket(fileno=control_fd)
    serve(control)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
