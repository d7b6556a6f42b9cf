"""Measurements of bench/device_check.sh on the GPU machine (results written as they come).

    python bench/device_bench.py OUT_DIR [--cpu-only]

1. ``cnn``: the TorchScript digits CNN (examples/models-torch/digits_cnn_torch) served on
   KIND_GPU and on the machine's CPUs, loaded by ``inferd perf`` over gRPC at c=64 with
   one-image requests (the server forms the batches); raw PyTorch on the GPU runs the same call
   (host array -> GPU -> module -> host array) at the average batch size the server formed.
   Throughput and p50 of each, the served/raw ratio (goal >= 0.8), and the GPU gauges read from
   /metrics while the load runs.
2. ``resnet``: a ResNet-18-shaped TorchScript CNN (random weights, 3x112x112 images: a model
   whose GPU work is not negligible beside the request handling) served on KIND_GPU with
   ``--frontends`` 1 and 8, against raw PyTorch at the batch each formed; ``inferd perf
   --collect-metrics`` reads the GPU's utilization, power and energy per inference meanwhile.
3. ``frontends``: the small MLP and ``fraud_xgboost`` at c=64 with ``--frontends`` 1, 2, 4, 8
   (throughput per K, the batch formed, the ratio to K=1).
4. ``scaling``: the benchmark's small MLP (bench/models.py, ONNX) and the ``fraud_xgboost``
   example at c=64 through ``inferd perf`` with 1, 4 and 8 CPU instances.

Every step has a time limit; a failed step records its error and the next one runs. The
results go to OUT_DIR/device_check.json (rewritten after every step) and device_check.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TORCH_CNN = ROOT / "examples" / "models-torch" / "digits_cnn_torch"
FRAUD = ROOT / "examples" / "models" / "fraud_xgboost"
CONCURRENCY = 64
PERF_WINDOW_MS = 1500
PERF_TIMEOUT_S = 60
GOAL = 0.8

RESULTS: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def save(out: Path) -> None:
    (out / "device_check.json").write_text(json.dumps(RESULTS, indent=2, default=str) + "\n")
    (out / "device_check.md").write_text(markdown())


def step(out: Path, name: str, run: Callable[[], Any]) -> None:
    began = time.monotonic()
    try:
        RESULTS[name] = run()
    except Exception as exc:
        RESULTS[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    RESULTS.setdefault("seconds", {})[name] = round(time.monotonic() - began, 1)
    save(out)


# -- helpers -----------------------------------------------------------------------------------


def perf(
    model: str, grpc_url: str, metrics_url: str, work: Path, *, collect: bool = False
) -> dict[str, Any]:
    """One ``inferd perf`` point at c=64 over gRPC; its throughput, p50 and client load (and,
    with ``collect``, the server's GPU gauges and GPU energy per 1000 inferences)."""
    report = work / f"perf-{model}-{time.monotonic_ns()}.json"
    cmd = [
        sys.executable, "-m", "inferd.cli.main", "perf", "-m", model, "-i", "grpc",
        "-u", grpc_url, "--concurrency-range", str(CONCURRENCY),
        "-p", str(PERF_WINDOW_MS), "-r", "3", "-s", "20", "-q",
        "--metrics-url", metrics_url, "--json-output", str(report),
    ]  # fmt: skip
    if collect:
        cmd += ["--collect-metrics", "--metrics-interval", "250"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=PERF_TIMEOUT_S)
    if not report.exists():
        raise RuntimeError(f"inferd perf failed ({done.returncode}): {done.stderr[-2000:]}")
    point = json.loads(report.read_text())["points"][0]
    figures = {
        "throughput_infer_per_s": round(float(point["throughput"]), 1),
        "p50_us": point["percentiles_us"].get("50"),
        "p99_us": point["percentiles_us"].get("99"),
        "client_cpu_share": point.get("client_cpu_share"),
        "server_cpu_s_per_1000": point.get("cost", {}).get("server_cpu_s_per_1000"),
        "errors": point.get("errors"),
    }
    if collect:
        figures["server_metrics"] = point.get("server_metrics")
        figures["gpu_energy_j_per_1000"] = point.get("cost", {}).get("gpu_energy_j_per_1000")
    return figures


def batch_formed(grpc_url: str, model: str) -> float:
    """Inferences per execution so far: the average batch the server formed."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    executions = int(stats.get("execution_count", 0))
    inferences = int(stats.get("inference_count", 0))
    return inferences / executions if executions else 0.0


def gpu_gauges(metrics_url: str) -> dict[str, dict[str, float]]:
    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found: dict[str, dict[str, float]] = {}
    pattern = r'^(nv_gpu_\w+)\{gpu_uuid="([^"]+)"\} (\d+\.?\d*)$'
    for name, uuid, value in re.findall(pattern, text, re.M):
        found.setdefault(name, {})[uuid] = float(value)
    return found


def copy_model(source: Path, repo: Path, name: str, extra: str = "", count: int = 0) -> None:
    target = repo / name
    shutil.copytree(source, target)
    config = target / "config.pbtxt"
    text = re.sub(r'^name: ".*"$', f'name: "{name}"', config.read_text(), flags=re.M)
    if count:
        text = re.sub(r"instance_group \[.*\]\n", "", text)
        text += f"\ninstance_group [ {{ kind: KIND_CPU count: {count} }} ]\n"
    config.write_text(text + extra)


# -- 1. the CNN --------------------------------------------------------------------------------


def raw_torch(
    batch: int,
    seconds: float = 4.0,
    model: Path = TORCH_CNN / "1" / "model.pt",
    shape: tuple[int, ...] = (1, 8, 8),
) -> dict[str, Any]:
    """The served call done by hand: numpy batch -> GPU -> module -> numpy, one thread."""
    import torch

    load: Any = torch.jit.load
    module = load(str(model), map_location="cuda").eval()
    images = np.random.default_rng(0).uniform(0, 16, (batch, *shape)).astype(np.float32)
    latencies: list[float] = []
    with torch.inference_mode():
        for _ in range(50):  # warm up (TorchScript profiles its first runs)
            module(torch.from_numpy(images).cuda()).cpu().numpy()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            began = time.perf_counter()
            module(torch.from_numpy(images).cuda()).cpu().numpy()
            latencies.append(time.perf_counter() - began)
    total = sum(latencies)
    return {
        "batch": batch,
        "throughput_infer_per_s": round(batch * len(latencies) / total, 1),
        "p50_us": round(float(np.percentile(latencies, 50)) * 1e6, 1),
        "calls": len(latencies),
    }


def cnn(cpu_only: bool) -> dict[str, Any]:
    from inferd.testing import running_server

    work = Path(tempfile.mkdtemp(prefix="device-cnn-"))
    repo = work / "repo"
    repo.mkdir()
    delay = "dynamic_batching { max_queue_delay_microseconds: 100 }\n"
    models = ["cnn_cpu"] if cpu_only else ["cnn_gpu", "cnn_cpu"]
    for name in models:
        kind = (
            "kind: KIND_CPU count: 2"
            if name == "cnn_cpu"
            else "kind: KIND_GPU count: 2 gpus: [ 0 ]"
        )
        copy_model(TORCH_CNN, repo, name, f"instance_group [ {{ {kind} }} ]\n")
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text().replace("dynamic_batching { }\n", delay))
    result: dict[str, Any] = {"concurrency": CONCURRENCY, "request_batch": 1}
    with running_server([repo], startup_timeout_s=120) as server:
        for name in models:
            sampled: dict[str, Any] = {}

            def sample(url: str = server.metrics_url, into: dict[str, Any] = sampled) -> None:
                time.sleep(PERF_WINDOW_MS / 1000 * 1.5)
                try:
                    into.update(gpu_gauges(url))
                except Exception as exc:
                    into["error"] = str(exc)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            point = perf(name, server.grpc_url, server.metrics_url, work)
            sampler.join(timeout=30)
            point["batch_formed"] = round(batch_formed(server.grpc_url, name), 2)
            if name == "cnn_gpu":
                point["gpu_metrics_during_load"] = sampled
            result[name] = point
    if not cpu_only:
        batch = max(1, round(result["cnn_gpu"]["batch_formed"]))
        raw = raw_torch(batch)
        result["raw_torch_gpu"] = raw
        ratio = result["cnn_gpu"]["throughput_infer_per_s"] / raw["throughput_infer_per_s"]
        result["served_over_raw"] = round(ratio, 3)
        result["goal_met"] = ratio >= GOAL
        gauges = result["cnn_gpu"]["gpu_metrics_during_load"]
        result["gpu_metrics_nonzero"] = all(
            any(v > 0 for v in gauges.get(n, {}).values())
            for n in ("nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes", "nv_gpu_power_usage")
        )
    shutil.rmtree(work, ignore_errors=True)
    return result


# -- 2. a ResNet-18-shaped CNN, with front-end processes ----------------------------------------

RESNET_SHAPE = (3, 112, 112)


def build_resnet(folder: Path) -> Path:
    """A ResNet-18-shaped TorchScript model (random weights: speed does not depend on them)."""
    import torch
    from torch import nn

    def block(cin: int, cout: int, stride: int) -> nn.Module:
        class Basic(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.body = nn.Sequential(
                    nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                    nn.BatchNorm2d(cout),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                    nn.BatchNorm2d(cout),
                )
                self.skip: nn.Module = (
                    nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                    if stride != 1 or cin != cout
                    else nn.Identity()
                )

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.relu(self.body(x) + self.skip(x))

        return Basic()

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    width = 64
    for out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [block(width, out, stride), block(out, out, 1)]
        width = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    torch.manual_seed(0)
    net = nn.Sequential(*layers).eval()
    target = folder / "resnet" / "1"
    target.mkdir(parents=True)
    with torch.inference_mode():
        traced = torch.jit.trace(net, torch.zeros(1, *RESNET_SHAPE))
    traced.save(str(target / "model.pt"))
    dims = ", ".join(str(d) for d in RESNET_SHAPE)
    (folder / "resnet" / "config.pbtxt").write_text(
        'name: "resnet"\nplatform: "pytorch_libtorch"\nmax_batch_size: 64\n'
        f'input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]\n'
        "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]\n"
        "dynamic_batching { max_queue_delay_microseconds: 200 }\n"
    )
    return target / "model.pt"


def resnet(out: Path, frontends: tuple[int, ...]) -> dict[str, Any]:
    from inferd.testing import running_server

    work = Path(tempfile.mkdtemp(prefix="device-resnet-"))
    repo = work / "repo"
    model = build_resnet(repo)
    result: dict[str, Any] = {"concurrency": CONCURRENCY, "request_batch": 1, "input": RESNET_SHAPE}
    RESULTS["resnet"] = result
    for k in frontends:
        try:
            with running_server([repo], ["--frontends", str(k)], startup_timeout_s=120) as server:
                point = perf("resnet", server.grpc_url, server.metrics_url, work, collect=True)
                point["batch_formed"] = round(batch_formed(server.grpc_url, "resnet"), 2)
        except Exception as exc:
            result[f"frontends_{k}"] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        raw = raw_torch(max(1, round(point["batch_formed"])), 3.0, model, RESNET_SHAPE)
        point["raw_torch_gpu"] = raw
        point["served_over_raw"] = round(
            point["throughput_infer_per_s"] / raw["throughput_infer_per_s"], 3
        )
        result[f"frontends_{k}"] = point
        save(out)
    shutil.rmtree(work, ignore_errors=True)
    return result


# -- 3. front-end processes on the host ----------------------------------------------------------


def mlp_source(work: Path) -> Path:
    sys.path.insert(0, str(BENCH))
    from models import build_mlp  # bench/models.py

    source = work / "mlp-source"
    build_mlp([64, 256, 256, 10], source / "1" / "model.onnx")
    (source / "config.pbtxt").write_text(
        'name: "mlp"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 64\n'
        'input [ { name: "input" data_type: TYPE_FP32 dims: [ 64 ] } ]\n'
        'output [ { name: "output" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
    )
    return source


def frontends(out: Path, ks: tuple[int, ...]) -> dict[str, Any]:
    from inferd.testing import running_server

    work = Path(tempfile.mkdtemp(prefix="device-frontends-"))
    source = mlp_source(work)
    result: dict[str, Any] = {"concurrency": CONCURRENCY, "cores": os.cpu_count()}
    RESULTS["frontends"] = result
    for model, source_dir in (("mlp", source), ("fraud_xgboost", FRAUD)):
        repo = work / model
        repo.mkdir()
        copy_model(source_dir, repo, model)
        rows: dict[str, Any] = {}
        for k in ks:
            try:
                with running_server([repo], ["--frontends", str(k)], startup_timeout_s=120) as s:
                    point = perf(model, s.grpc_url, s.metrics_url, work)
                    point["batch_formed"] = round(batch_formed(s.grpc_url, model), 2)
            except Exception as exc:
                rows[str(k)] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            base = rows.get(str(ks[0]), {}).get("throughput_infer_per_s")
            if base:
                point["over_first"] = round(point["throughput_infer_per_s"] / base, 2)
            rows[str(k)] = point
            result[model] = rows
            save(out)
    shutil.rmtree(work, ignore_errors=True)
    return result


# -- 4. CPU scaling ----------------------------------------------------------------------------


def scaling(out: Path, counts: tuple[int, ...]) -> dict[str, Any]:
    from inferd.testing import running_server

    work = Path(tempfile.mkdtemp(prefix="device-scaling-"))
    source = mlp_source(work)
    result: dict[str, Any] = {"concurrency": CONCURRENCY, "cores": os.cpu_count()}
    RESULTS["scaling"] = result  # saved after every point: a timeout keeps what was measured
    for model, source_dir in (("mlp", source), ("fraud_xgboost", FRAUD)):
        rows: dict[str, Any] = {}
        for count in counts:
            repo = work / f"{model}-{count}"
            repo.mkdir()
            copy_model(source_dir, repo, model, count=count)
            try:
                with running_server([repo], startup_timeout_s=120) as server:
                    point = perf(model, server.grpc_url, server.metrics_url, work)
                    point["batch_formed"] = round(batch_formed(server.grpc_url, model), 2)
                    rows[str(count)] = point
            except Exception as exc:
                rows[str(count)] = {"error": f"{type(exc).__name__}: {exc}"}
            result[model] = rows
            save(out)
    shutil.rmtree(work, ignore_errors=True)
    return result


# -- the report --------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:,.0f}" if isinstance(value, float) else str(value)


def _resnet_lines(res: Any) -> list[str]:
    if not isinstance(res, dict):
        return []
    lines = [
        "",
        "## ResNet-18-shaped CNN (3x112x112) on KIND_GPU at c=64, one image per request",
        "",
    ]
    if "error" in res:
        lines.append(f"failed: {res['error']}")
    lines += [
        "| front ends | batch | infer/s | p50 us | raw at that batch | served/raw | GPU util | "
        "GPU J/1000 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, row in res.items():
        if not key.startswith("frontends_") or not isinstance(row, dict):
            continue
        if "error" in row:
            lines.append(f"| {key[10:]} | failed: {row['error'][:80]} | | | | | | |")
            continue
        metrics = row.get("server_metrics") or {}
        util = ", ".join(f"{v:.0%}" for v in (metrics.get("gpu_utilization") or {}).values())
        raw = row.get("raw_torch_gpu", {})
        lines.append(
            f"| {key[10:]} | {row['batch_formed']} | {_fmt(row['throughput_infer_per_s'])} | "
            f"{_fmt(row['p50_us'])} | {_fmt(raw.get('throughput_infer_per_s'))} | "
            f"{row.get('served_over_raw')} | {util or '-'} | "
            f"{_fmt(row.get('gpu_energy_j_per_1000'))} |"
        )
    return lines


def _frontends_lines(fe: Any) -> list[str]:
    if not isinstance(fe, dict):
        return []
    lines = ["", f"## --frontends K at c=64 ({fe.get('cores')} cores)", ""]
    if "error" in fe:
        lines.append(f"failed: {fe['error']}")
    lines += ["| model | K | infer/s | p50 us | batch | vs first K |", "|---|---|---|---|---|---|"]
    for model in ("mlp", "fraud_xgboost"):
        for k, row in (fe.get(model) or {}).items():
            if "error" in row:
                lines.append(f"| {model} | {k} | failed: {row['error'][:80]} | | | |")
                continue
            lines.append(
                f"| {model} | {k} | {_fmt(row['throughput_infer_per_s'])} | "
                f"{_fmt(row['p50_us'])} | {row['batch_formed']} | {row.get('over_first', 1.0)} |"
            )
    return lines


def markdown() -> str:
    lines = ["# inferd device check", ""]
    env = RESULTS.get("environment", {})
    lines += [f"- {k}: {v}" for k, v in env.items()]
    for name, seconds in RESULTS.get("seconds", {}).items():
        lines.append(f"- step `{name}`: {seconds} s")
    cnn_result = RESULTS.get("cnn")
    if isinstance(cnn_result, dict):
        lines += ["", "## TorchScript CNN at c=64, one image per request", ""]
        if "error" in cnn_result:
            lines.append(f"failed: {cnn_result['error']}")
        lines += ["| what | batch | infer/s | p50 us |", "|---|---|---|---|"]
        for key in ("cnn_gpu", "cnn_cpu"):
            row = cnn_result.get(key)
            if isinstance(row, dict):
                lines.append(
                    f"| served {key} | {row.get('batch_formed')} | "
                    f"{_fmt(row.get('throughput_infer_per_s'))} | {_fmt(row.get('p50_us'))} |"
                )
        raw = cnn_result.get("raw_torch_gpu")
        if isinstance(raw, dict):
            lines.append(
                f"| raw PyTorch on the GPU | {raw['batch']} | "
                f"{_fmt(raw['throughput_infer_per_s'])} | {_fmt(raw['p50_us'])} |"
            )
        if "served_over_raw" in cnn_result:
            lines += [
                "",
                f"served / raw: {cnn_result['served_over_raw']} (goal >= {GOAL}: "
                f"{'met' if cnn_result['goal_met'] else 'not met'}); GPU gauges non-zero: "
                f"{cnn_result['gpu_metrics_nonzero']}",
            ]
    lines += _resnet_lines(RESULTS.get("resnet"))
    lines += _frontends_lines(RESULTS.get("frontends"))
    scale = RESULTS.get("scaling")
    if isinstance(scale, dict):
        lines += ["", f"## CPU scaling at c=64 ({scale.get('cores')} cores)", ""]
        if "error" in scale:
            lines.append(f"failed: {scale['error']}")
        lines += ["| model | instances | infer/s | p50 us | batch |", "|---|---|---|---|---|"]
        for model in ("mlp", "fraud_xgboost"):
            for count, row in (scale.get(model) or {}).items():
                if "error" in row:
                    lines.append(f"| {model} | {count} | failed: {row['error'][:80]} | | |")
                    continue
                lines.append(
                    f"| {model} | {count} | {_fmt(row['throughput_infer_per_s'])} | "
                    f"{_fmt(row['p50_us'])} | {row['batch_formed']} |"
                )
    tests = RESULTS.get("gpu_tests")
    if tests:
        lines += ["", f"## pytest -m gpu: {tests}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cpu-only", action="store_true", help="skip everything on the GPU")
    parser.add_argument("--counts", default="1,4,8", help="CPU instance counts (default 1,4,8)")
    parser.add_argument(
        "--frontends", default="1,2,4,8", help="--frontends values measured (default 1,2,4,8)"
    )
    parser.add_argument("--tests", default="", help="the GPU tests' summary line, for the report")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    previous = args.out / "device_check.json"
    if previous.exists():
        RESULTS.update(json.loads(previous.read_text()))
    if args.tests:
        RESULTS["gpu_tests"] = args.tests

    def environment() -> dict[str, Any]:
        import onnxruntime
        import torch

        return {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cuda": torch.cuda.is_available(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "onnxruntime": onnxruntime.__version__,
            "ort_providers": onnxruntime.get_available_providers(),
            "cores": os.cpu_count(),
        }

    step(args.out, "environment", environment)
    step(args.out, "cnn", lambda: cnn(args.cpu_only))
    ks = tuple(int(k) for k in args.frontends.split(","))
    if not args.cpu_only:
        step(args.out, "resnet", lambda: resnet(args.out, (ks[0], ks[-1])))
    step(args.out, "frontends", lambda: frontends(args.out, ks))
    counts = tuple(int(c) for c in args.counts.split(","))
    step(args.out, "scaling", lambda: scaling(args.out, counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
