"""Child processes that a test interrupts as Ctrl-C does.

A shell without job control starts background commands with SIGINT ignored, and a child
inherits that; Python then installs no KeyboardInterrupt handler at all, so a SIGINT sent by the
test would be lost. ``ctrl_c_reachable`` (a ``preexec_fn``) gives the child the default
disposition a terminal's foreground process has.
"""

from __future__ import annotations

import signal


def ctrl_c_reachable() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
