"""``inferd monitor profile``: a model version's reference profile for drift monitoring."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import InferdError, InvalidArgumentError
from inferd.repository.layout import list_versions
from inferd.repository.manager import ControlMode

Array = np.ndarray[Any, Any]


def add_monitor_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("monitor", help="data monitoring: reference profiles for drift")
    monitor_sub = p.add_subparsers(dest="monitor_command", metavar="COMMAND", required=True)
    profile = monitor_sub.add_parser(
        "profile",
        help="build a version's reference profile from training or validation data",
        description=(
            "Read the model's inputs (and outputs, when the data has them; otherwise the model "
            "is run in process on the data) from a .npz, .parquet or .csv file, and write the "
            "version's reference profile to MODEL_REPOSITORY/MODEL/VERSION/drift_profile.json. "
            "inferd serve --monitor-drift compares live traffic with it (docs/monitoring.md)."
        ),
        epilog=(
            "example:\n"
            "  inferd monitor profile fraud_xgboost --model-repository examples/models "
            "--data train.parquet --exclude label"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    profile.add_argument("model", metavar="MODEL", help="the model's name in the repository")
    profile.add_argument(
        "--model-repository", type=Path, required=True, metavar="DIR", help="the repository"
    )
    profile.add_argument(
        "--data",
        type=Path,
        required=True,
        metavar="FILE",
        help=".npz (one array per tensor), .parquet or .csv (a column per tensor, or one "
        "column per feature of the model's only input)",
    )
    profile.add_argument(
        "--version", type=int, metavar="N", help="the version to profile (default: the latest)"
    )
    profile.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="COLUMN",
        help="a column or array of the data to ignore (labels, ids); repeatable",
    )
    profile.add_argument(
        "--sample-rows",
        type=int,
        default=10_000,
        metavar="N",
        help="reference values kept per numeric feature for the KS and Wasserstein tests "
        "(default: 10000)",
    )
    profile.set_defaults(func=run_profile)


def run_profile(args: argparse.Namespace) -> int:
    try:
        path, rows, features = asyncio.run(_profile(args))
    except InferdError as exc:
        print(f"inferd monitor profile: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}: {features} feature(s) from {rows} row(s)")
    return 0


async def _profile(args: argparse.Namespace) -> tuple[Path, int, int]:
    from inferd.monitoring.drift.build import ProfileLimits, TensorData, build_profile
    from inferd.monitoring.drift.data import read_reference
    from inferd.monitoring.drift.reference import PROFILE_FILE, write_profile
    from inferd.server import Server, ServerConfig

    if args.sample_rows < 100:
        raise InvalidArgumentError("--sample-rows must be at least 100")
    if not args.data.is_file():  # before the model loads
        raise InvalidArgumentError(f"{args.data}: no such file")
    model_dir = args.model_repository / args.model
    versions = list_versions(model_dir)
    if not versions:
        raise InvalidArgumentError(f"{model_dir}: no such model folder with a version in it")
    version = args.version if args.version is not None else versions[-1]
    if version not in versions:
        raise InvalidArgumentError(f"{model_dir}: no version {version} (it has {versions})")
    config = ServerConfig(
        model_repositories=(args.model_repository,),
        model_control_mode=ControlMode.EXPLICIT,
        load_models=(args.model,),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )
    server = Server(config)
    await server.start()
    try:
        spec = server.engine.model_config(args.model, str(version))
        data = read_reference(args.data, spec.inputs, spec.outputs, args.exclude)
        arrays = dict(data.arrays)
        if any(o.name not in arrays for o in spec.outputs):
            arrays |= await _run_model(server, spec, version, data.arrays, data.rows)
    finally:
        await server.stop()
    roles = {t.name: "input" for t in spec.inputs} | {t.name: "output" for t in spec.outputs}
    types = {t.name: t.datatype.name for t in (*spec.inputs, *spec.outputs)}
    tensors = [
        TensorData(name, roles[name], types[name], array, data.names.get(name))
        for name, array in arrays.items()
    ]
    try:
        profile = build_profile(
            args.model,
            version,
            tensors,
            args.data.name,
            ProfileLimits(sample_rows=args.sample_rows),
        )
    except ValueError as exc:
        raise InvalidArgumentError(f"{args.data}: {exc}") from None
    target = model_dir / str(version) / PROFILE_FILE
    await asyncio.to_thread(write_profile, profile, target)
    features = sum(len(t.columns) or 1 for t in profile.tensors)
    return target, profile.rows, features


async def _run_model(
    server: Any, spec: ModelSpec, version: int, inputs: dict[str, Array], rows: int
) -> dict[str, Array]:
    """The model's outputs for every row, in batches of its ``max_batch_size``."""
    names = [t.name for t in spec.inputs if t.name in inputs]
    batch = max(1, spec.max_batch_size)
    parts: dict[str, list[Array]] = {t.name: [] for t in spec.outputs}
    for start in range(0, rows, batch):
        chunk = {n: inputs[n][start : start + batch] for n in names}
        if spec.max_batch_size == 0:
            chunk = {n: a[0] for n, a in chunk.items()}
        request = InferRequest(spec.name, chunk, model_version=str(version))
        response = await server.engine.infer(request)
        for name, array in response.outputs.items():
            parts[name].append(array if spec.max_batch_size else array[None])
    return {name: np.concatenate(arrays) for name, arrays in parts.items() if arrays}
