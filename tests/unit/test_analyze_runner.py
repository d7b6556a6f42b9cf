"""The analysis driver on inferd's engine in this process: the default first, the search, a config
the server refuses recorded and skipped, the confirmation round, and a rerun over the same
results that measures nothing again."""

from __future__ import annotations

import json
from pathlib import Path

from inferd.cli.perf_inprocess import running_engine
from inferd.tools.analyze.control import EngineControl, LoadFailedError
from inferd.tools.analyze.measure import MeasureSettings
from inferd.tools.analyze.memory import MemoryProbe
from inferd.tools.analyze.objective import Goals
from inferd.tools.analyze.progress import QuietReporter
from inferd.tools.analyze.runner import AnalyzeOptions, Analyzer, ModelRun
from inferd.tools.analyze.space import RangeChoices
from inferd.tools.analyze.store import ResultStore
from inferd.tools.perf.inprocess import InProcessTransport
from inferd.tools.perf.transport import Transport

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
MEASURE = MeasureSettings("in-process", "", (1, 2), measurement_interval_ms=100, max_trials=3)
OPTIONS = AnalyzeOptions(
    models=("simple",),
    repository=EXAMPLES,
    goals=Goals(),
    measure=MEASURE,
    choices=RangeChoices(instances=(1, 2), dynamic_batching=(False,), intra_op_threads=(None,)),
    search="grid",
    confirm=1,
    cores=2,
)


class RefusesTwoInstances(EngineControl):
    """The engine's own control, except that it answers as a server refusing the load would
    for any config with two instances."""

    async def load(self, model: str, config_json: str | None = None) -> None:
        if config_json is not None:
            groups = json.loads(config_json).get("instance_group", [])
            if any(int(g.get("count", 1)) == 2 for g in groups):
                raise LoadFailedError(f"failed to load '{model}': two instances refused")
        await super().load(model, config_json)


async def analyze(store: ResultStore) -> list[ModelRun]:
    async with running_engine(EXAMPLES, "simple") as engine:

        def transport(model: str) -> Transport:
            return InProcessTransport(engine, model)

        analyzer = Analyzer(
            OPTIONS,
            RefusesTwoInstances(engine),
            transport,
            MemoryProbe(None, None),
            store,
            QuietReporter(OPTIONS.goals, lines=False),
            in_process=True,
        )
        return await analyzer.run()


async def test_a_run_then_a_rerun_that_measures_nothing(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, MEASURE.to_dict())
    (run,) = await analyze(store)
    taken = [(m.key, m.repeat) for m in store.measurements()]
    # the default, the grid (two-instance config refused), then the default and the best
    # feasible one measured again
    assert taken == [
        ("default", 0),
        ("i1-b8-off", 0),
        ("i2-b8-off", 0),
        ("default", 1),
        ("i1-b8-off", 1),
    ]
    refused = store.get("simple", "i2-b8-off")
    assert refused is not None
    assert refused.error == "load failed: failed to load 'simple': two instances refused"
    assert run.measured_now == 5
    assert run.search == "grid"
    best = run.outcome.best
    assert best is not None
    assert best.key in ("default", "i1-b8-off")
    assert best.runs == 2
    assert not run.outcome.verdicts["i2-b8-off"].feasible

    again = ResultStore(tmp_path, MEASURE.to_dict())
    (rerun,) = await analyze(again)
    assert rerun.measured_now == 0
    assert rerun.resumed == 3
    assert len(again.measurements()) == 5
    assert rerun.outcome.best is not None
    assert rerun.outcome.best.key == best.key
