"""Tying a process's life to its parent's: used by the zygote and the workers it forks."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent thread exits (best effort)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
