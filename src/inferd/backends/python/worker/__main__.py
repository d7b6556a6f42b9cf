"""``python -m inferd.backends.python.worker <fd> [name]``: a worker started with ``spawn``."""

from __future__ import annotations

import sys

from inferd.backends.python.worker.worker import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
