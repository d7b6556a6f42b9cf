"""``inferd optimize``: build faster or smaller versions of a model, check each one's accuracy
and speed, and write the best into the repository.

Exit codes: 0 a candidate won and was written (or would be, with --dry-run), 1 the model could
not be loaded, 2 usage error, 3 no candidate qualified (the baseline stays), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferd.cli.extras import missing_extra
from inferd.cli.running import CommandExit, run_reported
from inferd.client.progress import interactive
from inferd.errors import InvalidArgumentError

EXIT_OK, EXIT_LOAD, EXIT_USAGE, EXIT_KEPT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def add_optimize_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from inferd.cli.optimize_args import add_optimize_arguments

    p = sub.add_parser(
        "optimize",
        help="quantize, fuse, prune: the fastest version within an accuracy budget",
        description=(
            "Build candidates from a model (ONNX Runtime graph and transformer fusions, FP16/BF16, "
            "dynamic and static INT8 with calibration, mixed precision where INT8 loses accuracy, "
            "OpenVINO and NNCF where installed, 2:4 and channel pruning), serve each one in "
            "process, check it on the eval data against the model as served, and measure its "
            "speed at several batch sizes. The best candidate within the budgets is written into "
            "the repository as the model's next version (the previous one stays servable), "
            "with report.html, report.json and the candidates under --results."
        ),
        epilog=(
            "examples:\n"
            "  inferd optimize digits_cnn_torch --model-repository examples/models-torch \\\n"
            "      --calibration calib.npz --eval eval.npz --accuracy-budget 1%\n"
            "  inferd optimize minilm --model-repository repo --calibration sentences.npz \\\n"
            "      --eval held_out.npz --metric cosine --batch-size 8 --dry-run\n"
            "  inferd optimize digits_cnn_torch --model-repository repo --device cuda:0 \\\n"
            "      --calibration calib.npz --eval eval.npz --only torch-fp16,torch-bf16,fp16\n"
            "exit codes: 0 a candidate won, 1 model not loadable, 2 usage error, "
            "3 no candidate qualified (the baseline stays), 130 interrupted"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_optimize_arguments(p)
    p.set_defaults(func=optimize_command)


def _error(message: str) -> None:
    print(f"inferd optimize: error: {message}", file=sys.stderr, flush=True)


def optimize_command(args: argparse.Namespace) -> int:
    missing = missing_extra("optimize", ("rich", "plotly", "sklearn"))
    if missing is not None:
        _error(missing)
        return EXIT_USAGE
    from rich.console import Console

    from inferd.cli.optimize_args import options_from_args
    from inferd.cli.perf_inprocess import running_engine
    from inferd.tools.optimize.progress import LineReporter, Reporter, RichReporter
    from inferd.tools.optimize.report_html import write_html
    from inferd.tools.optimize.report_json import report_text
    from inferd.tools.optimize.run import optimize
    from inferd.tools.optimize.summary import reason_lines, summary_table, verdict_line

    try:
        options = options_from_args(args)
    except InvalidArgumentError as exc:
        _error(exc.message)
        return EXIT_USAGE
    live = interactive(quiet=args.quiet)
    reporter: Reporter = RichReporter() if live else LineReporter()
    try:
        result = run_reported(
            optimize(options, running_engine, reporter),
            reporter,
            _error,
            interrupted="interrupted: the repository is unchanged",
            failed=EXIT_LOAD,
        )
    except CommandExit as exc:
        return exc.code
    results: Path = options.results
    results.mkdir(parents=True, exist_ok=True)
    (results / "report.json").write_text(
        report_text(result, options.goals, options.model), encoding="utf-8"
    )
    write_html(results / "report.html", result, options.goals, options.model)
    # a pipe or a log gets every column whole; a terminal keeps its own width
    console = Console() if live else Console(width=160)
    console.print(summary_table(result, options.goals))
    for line in reason_lines(result):
        console.print(line, markup=False, highlight=False)
    console.print(verdict_line(result, options.goals), markup=False, highlight=False)
    console.print(f"report: {results / 'report.html'}, {results / 'report.json'}", markup=False)
    return EXIT_KEPT if result.decision.kept_baseline else EXIT_OK
