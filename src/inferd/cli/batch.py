"""``inferd batch``: offline inference over a file of rows, in this process or on Ray Data."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from inferd.cli.extras import missing_extra
from inferd.cli.perf_inprocess import running_engine
from inferd.errors import InferdError
from inferd.tools.batch.job import (
    DEFAULT_SHARD_ROWS,
    BatchJob,
    BatchReport,
    run_batch,
    set_instances,
)
from inferd.tools.batch.progress import progress_for
from inferd.tools.batch.sources import FORMATS

__all__ = ["add_batch_parser", "run_batch_command"]

DESCRIPTION = """\
Run a model over every row of a file and write its outputs as Parquet, with no server.

Inputs: Parquet (a file, or a folder of *.parquet files; one column per model input: fixed-size
list or list columns for tensors), NPZ (one array per input, rows first), CSV (a column per
input, or every column as the features of a model's single 1-D input), a folder of images (a
model with one image input), or a folder of KServe v2 JSON inference requests.

Output: a folder of Parquet files (part-NNNNN.parquet, one per shard of --shard-rows rows) with
the column 'row' (the input row's index) and one column per output, readable as one dataset
(pandas.read_parquet(OUTPUT)). Rows that cannot be sent (wrong shape or type, NaN, a row the
model fails on) are listed in OUTPUT/_bad_rows.jsonl with the reason, and the job goes on.

Resuming: OUTPUT/_manifest.json records finished shards; run the same command again after an
interruption and only the unfinished shards are done. A folder holding another job is refused.

Speed: requests carry the model's preferred (else maximum) batch size, two per instance are in
flight, and reading and writing overlap with inference.

With --ray the same job runs on Ray Data (pip install 'inferd[ray]'): read with Ray's readers,
inferred by --ray-actors actors that each hold an inferd engine, written with write_parquet.
"""


def add_batch_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "batch",
        help="offline inference over a file of rows, written as Parquet",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="the model's name in the repository")
    p.add_argument(
        "--model-repository",
        required=True,
        type=Path,
        metavar="DIR",
        help="the model repository (Triton's layout) holding MODEL",
    )
    p.add_argument(
        "--model-version",
        default="",
        metavar="V",
        help="the version to run (default: the latest ready version)",
    )
    p.add_argument("--input", required=True, type=Path, metavar="PATH", help="the rows to infer")
    p.add_argument(
        "--input-format",
        choices=("auto", *FORMATS),
        default="auto",
        help="how to read --input (default: from its suffix, or a folder's files)",
    )
    p.add_argument(
        "--output",
        required=True,
        type=Path,
        metavar="DIR",
        help="folder for the Parquet files, the manifest and the bad rows (new, empty, or this "
        "job's own unfinished output to resume)",
    )
    p.add_argument(
        "--outputs",
        default="",
        metavar="NAMES",
        help="comma-separated outputs to write (default: all of the model's outputs)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="rows per request (default: the model's largest preferred batch size, else its "
        "max_batch_size; 1 for a model without batching)",
    )
    p.add_argument(
        "--in-flight",
        type=int,
        metavar="N",
        help="requests sent at once (default: two per model instance)",
    )
    p.add_argument(
        "--instances",
        type=int,
        metavar="N",
        help="run N CPU instances of the model instead of its config's instance_group",
    )
    p.add_argument(
        "--shard-rows",
        type=int,
        default=DEFAULT_SHARD_ROWS,
        metavar="N",
        help=f"rows per output file, the unit of resuming (default: {DEFAULT_SHARD_ROWS})",
    )
    p.add_argument(
        "--allow-nan",
        action="store_true",
        help="send NaN and infinite values (default: such rows are bad rows)",
    )
    p.add_argument(
        "--image-scale",
        type=float,
        default=1.0,
        metavar="F",
        help="images: multiply pixel values (0..255) by F for a floating-point input "
        "(e.g. 0.00392156 for 0..1; default: 1)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress on stderr (default: when stderr is a terminal): a bar on a terminal, "
        "a plain line at every tenth of the rows or 30 s into a pipe or a log; with --ray, "
        "Ray Data's own progress bars",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run on Ray Data: a local Ray started for the job, or the cluster at ADDRESS "
        "(e.g. ray://head:10001 or auto)",
    )
    p.add_argument(
        "--ray-actors",
        type=int,
        default=2,
        metavar="N",
        help="with --ray: inference actors, each with its own engine (default: 2)",
    )
    p.add_argument(
        "--ray-cpus",
        type=int,
        metavar="N",
        help="with --ray and no ADDRESS: CPUs of the local Ray (default: all)",
    )
    p.set_defaults(func=run_batch_command)


def _job(args: argparse.Namespace) -> BatchJob:
    outputs = tuple(n.strip() for n in args.outputs.split(",") if n.strip())
    return BatchJob(
        model=args.model,
        input=args.input,
        output=args.output,
        version=args.model_version,
        input_format=args.input_format,
        outputs=outputs,
        shard_rows=args.shard_rows,
        batch_size=args.batch_size,
        in_flight=args.in_flight,
        allow_nan=args.allow_nan,
        image_scale=args.image_scale,
    )


def _refusal(args: argparse.Namespace) -> str | None:
    if args.ray is None and (args.ray_cpus is not None or args.ray_actors != 2):
        return "--ray-actors and --ray-cpus apply to a Ray run: add --ray"
    if args.ray is not None and args.ray != "local" and args.ray_cpus is not None:
        return "--ray-cpus sizes a local Ray; a cluster at an ADDRESS has its own CPUs"
    if args.ray_actors < 1:
        return f"--ray-actors must be at least 1, not {args.ray_actors}"
    if args.ray_cpus is not None and args.ray_cpus < 1:
        return f"--ray-cpus must be at least 1, not {args.ray_cpus}"
    if not args.input.exists():
        return f"--input {args.input} does not exist"
    if not args.model_repository.is_dir():
        return f"--model-repository {args.model_repository} is not a folder"
    if args.ray is not None:
        return missing_extra("ray", ("ray", "pyarrow"))
    return missing_extra("batch", ("pyarrow",))


async def _single_process(args: argparse.Namespace, job: BatchJob) -> BatchReport:
    async with running_engine(args.model_repository, args.model) as engine:
        if args.instances is not None:
            await set_instances(engine, args.model, args.instances)
        return await run_batch(engine, job, progress_for(args.progress))


def run_batch_command(args: argparse.Namespace) -> int:
    refusal = _refusal(args)
    if refusal is not None:
        print(f"inferd batch: error: {refusal}", file=sys.stderr)
        return 2
    job = _job(args)
    try:
        if args.ray is not None:
            from inferd.tools.batch.ray_job import RayOptions, run_ray_batch

            report = run_ray_batch(
                job,
                args.model_repository,
                RayOptions(
                    address=None if args.ray == "local" else args.ray,
                    actors=args.ray_actors,
                    cpus=args.ray_cpus,
                    instances=args.instances,
                    progress=progress_for(args.progress) is not None,
                ),
                engine=running_engine,
            )
        else:
            report = asyncio.run(_single_process(args, job))
    except InferdError as exc:
        print(f"inferd batch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "inferd batch: interrupted; run the same command again to finish the job",
            file=sys.stderr,
        )
        return 130
    print(_summary(report))
    return 0


def _summary(report: BatchReport) -> str:
    resumed = f", {report.done_before} finished before" if report.done_before else ""
    return (
        f"{report.written:,} rows written, {report.bad:,} bad rows, {report.shards} shard(s)"
        f"{resumed}, in {report.seconds:.1f} s ({report.rows_per_s:,.0f} rows/s) "
        f"to {report.output}"
    )
