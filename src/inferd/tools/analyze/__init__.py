"""``inferd analyze``: search a model's serving config (instances, batching, threads) for the one
that serves best on this machine, measuring each candidate through ``inferd perf``.

Pure pieces: :mod:`.space` (what is tried), :mod:`.objective` (what a result is worth, the
Pareto front), :mod:`.search` (grid and optuna's TPE), :mod:`.configs` (a candidate applied to a
config). Drivers: :mod:`.runner` (load, measure, store), :mod:`.control` (the model control
API), :mod:`.store` (resumable results). Reports: :mod:`.report_csv`, :mod:`.report_html`,
:mod:`.summary`, :mod:`.outputs`.
"""

from inferd.tools.analyze.objective import Goals, Measurement, Outcome, PointFigures, judge
from inferd.tools.analyze.runner import AnalyzeOptions, Analyzer, ModelRun
from inferd.tools.analyze.space import Candidate, RangeChoices, Space, enumerate_space

__all__ = [
    "AnalyzeOptions",
    "Analyzer",
    "Candidate",
    "Goals",
    "Measurement",
    "ModelRun",
    "Outcome",
    "PointFigures",
    "RangeChoices",
    "Space",
    "enumerate_space",
    "judge",
]
