"""ONNX Runtime session options of one model, and the solo session its instances share.

:class:`SessionSettings` is parsed once from the config (``parse_settings`` in
:mod:`inferd.backends.onnxruntime`) and builds the ``SessionOptions`` of every session of the
model. Spinning: after a run, ONNX Runtime's intra-op threads busy-wait for the next one
(``session.intra_op.allow_spinning``, on by default in ONNX Runtime). In a server the next run
comes from another thread after the request crossed the event loop, so the spinning threads
only take the cores the event loop, the front ends and the other instances need; inferd turns
spinning off unless the config asks for it (``allow_spinning``), see
:data:`DEFAULT_ALLOW_SPINNING` and ``bench/ort_threads.py``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import onnxruntime as ort

# optimization.graph.level as Triton's ONNX Runtime backend reads it (0 / unset = all).
GRAPH_LEVELS = {
    0: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}

# The executor logs each failing kernel at ERROR; inferd reports and logs failures itself.
_RUN_LOG_SEVERITY_FATAL = 4
INTRA_SPINNING = "session.intra_op.allow_spinning"
INTER_SPINNING = "session.inter_op.allow_spinning"

#: Whether the intra-op (and inter-op) threads spin after a run when the config does not say:
#: off, measured by ``bench/ort_threads.py`` (docs/backends.md has the figures).
DEFAULT_ALLOW_SPINNING = False


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """Session options parsed once from the config; applied to every instance's session."""

    intra_op_threads: int = 1
    # threads of the model's solo session (0: no solo session, see SoloSession)
    solo_threads: int = 0
    inter_op_threads: int = 0
    parallel_execution: bool = False
    graph_level: int = 0
    enable_mem_arena: bool | None = None
    enable_mem_pattern: bool | None = None
    # spinning of the intra-op / inter-op threads after a run (None: the config does not say)
    intra_spinning: bool | None = None
    inter_spinning: bool | None = None
    cores: int = 1  # the cores the default layout shared out
    explicit_threads: bool = False  # the config sets intra_op_thread_count
    config_entries: tuple[tuple[str, str], ...] = ()
    run_config_entries: tuple[tuple[str, str], ...] = ()
    share_weights: bool | None = None  # the config's share_weights (None: it does not say)

    def spinning(self, *, solo: bool = False) -> bool:
        """Whether the intra-op threads of a session spin: as the config says, else the default
        (never for the solo session, whose threads would keep the cores busy while the
        instances' own sessions run the next batches)."""
        if self.intra_spinning is not None:
            return self.intra_spinning
        return DEFAULT_ALLOW_SPINNING and not solo

    def session_options(
        self, intra_op_threads: int | None = None, *, solo: bool = False
    ) -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.intra_op_num_threads = (
            self.intra_op_threads if intra_op_threads is None else intra_op_threads
        )
        options.inter_op_num_threads = self.inter_op_threads
        options.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL
            if self.parallel_execution
            else ort.ExecutionMode.ORT_SEQUENTIAL
        )
        options.graph_optimization_level = GRAPH_LEVELS[self.graph_level]
        if self.enable_mem_arena is not None:
            options.enable_cpu_mem_arena = self.enable_mem_arena
        if self.enable_mem_pattern is not None:
            options.enable_mem_pattern = self.enable_mem_pattern
        for key, value in self.config_entries:
            options.add_session_config_entry(key, value)
        options.add_session_config_entry(INTRA_SPINNING, str(int(self.spinning(solo=solo))))
        inter = self.inter_spinning
        if inter is None:
            inter = DEFAULT_ALLOW_SPINNING and not solo
        options.add_session_config_entry(INTER_SPINNING, str(int(inter)))
        return options

    def run_options(self) -> ort.RunOptions:
        options = ort.RunOptions()
        options.log_severity_level = _RUN_LOG_SEVERITY_FATAL
        for key, value in self.run_config_entries:
            options.add_run_config_entry(key, value)
        return options

    def describe(self, instances: int) -> str:
        """The thread layout in one line, for the load log."""
        if self.explicit_threads:
            source = "intra_op_thread_count" + (
                ", 0: one per core" if self.intra_op_threads == 0 else ""
            )
        else:
            source = f"{self.cores} core(s) shared by {instances} instance(s)"
        text = f"{instances} session(s) x {self.intra_op_threads} intra-op thread(s) ({source})"
        if self.solo_threads:
            text += f", solo session {self.solo_threads} thread(s)"
        mode = "parallel" if self.parallel_execution else "sequential"
        inter = self.inter_op_threads if self.parallel_execution else "unused"
        spin = "on" if self.spinning() else "off"
        text = f"{text}, inter-op threads {inter} ({mode}), spinning {spin}"
        shrink = dict(self.run_config_entries).get("memory.enable_memory_arena_shrinkage")
        return text + (f", arena shrinks after each run ({shrink})" if shrink else "")


class SoloSession:
    """A session with a thread per core, shared by the instances of one model.

    An instance runs a batch on it when no other instance of the model is running one, and on
    its own session (with its share of the cores) otherwise. A lone request then gets every core
    (the best batch-1 latency), and concurrent requests one core each (the best throughput,
    with no intra-op threads competing for the cores). ``enter``/``leave`` count the runs in
    progress across the model's instance threads.
    """

    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        self._lock = threading.Lock()
        self._running = 0
        self.runs = 0  # batches run on the solo session (for tests and diagnostics)

    def enter(self) -> ort.InferenceSession | None:
        """Start a run: the solo session if nothing else of the model is running, else None."""
        with self._lock:
            self._running += 1
            if self._running > 1:
                return None
            self.runs += 1
            return self.session

    def leave(self) -> None:
        with self._lock:
            self._running -= 1
