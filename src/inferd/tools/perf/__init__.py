"""``inferd perf``: a load generator that speaks to any v2 server like perf_analyzer does.

:func:`run_perf` measures the load points of a :class:`PerfOptions` through a
:class:`~inferd.tools.perf.transport.Transport` (HTTP, gRPC, or an engine in this process) and
returns one :class:`LoadPoint` per point; :mod:`inferd.tools.perf.report` renders them.
"""

from inferd.tools.perf.options import Distribution, LoadMode, PerfOptions, Range
from inferd.tools.perf.run import PerfResult, run_perf
from inferd.tools.perf.summary import LoadPoint

__all__ = [
    "Distribution",
    "LoadMode",
    "LoadPoint",
    "PerfOptions",
    "PerfResult",
    "Range",
    "run_perf",
]
