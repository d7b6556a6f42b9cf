"""Python models: the cost of the worker process + shared memory, and memory per instance.

    .venv/bin/python bench/python_models.py [--quick]

1. Latency of an identity ``model.py`` (Triton style) on 1 KiB, 1 MiB and 10 MiB UINT8 tensors,
   median of many calls, measured two ways in this one run:
   - instance level: ``PythonInstance.execute`` (server -> arena -> worker -> arena -> server;
     the inputs are copied in once, the identity outputs come back as views of the arena)
     against calling the same model's ``execute`` in this process with the same request;
   - engine level: ``Engine.infer`` (validation, scheduler, instance thread) with the worker
     backend against the same engine with an in-process backend (no network in either).
2. Memory of N = 1, 2, 4 instances: RSS, PSS and USS (private) of each worker process, read
   from /proc/<pid>/smaps_rollup, for the default ``zygote`` start (workers forked from one
   preloaded process, sharing its pages) and for ``spawn`` (a fresh interpreter each).

Figures are only comparable within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import LoadContext, Result
from inferd.backends.python import PythonBackend
from inferd.backends.python.worker import triton_python_backend_utils as pb_utils
from inferd.backends.python.worker import user_model
from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec
from inferd.engine import Engine
from inferd.repository.loader import LoadOptions, prepare
from inferd.repository.manager import ControlMode, RepositoryManager

IDENTITY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
CONFIG = """
name: "{name}" backend: "{backend}" max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
parameters [ {{ key: "worker-start-method" value: {{ string_value: "{method}" }} }} ]
"""
SIZES = (("1 KiB", 1 << 10), ("1 MiB", 1 << 20), ("10 MiB", 10 << 20))


class InProcessInstance:
    """The same model called in the server process: what the worker path is compared with."""

    def __init__(self, model_file: Path) -> None:
        module = user_model.load_module(model_file, f"bench_inprocess_{id(self)}")
        self.model = user_model.find_model_class(module, model_file)()

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        batch = [
            pb_utils.InferenceRequest(
                inputs=[pb_utils.Tensor(n, a) for n, a in r.inputs.items()], request_id=r.id
            )
            for r in requests
        ]
        return [
            {t.name(): t.as_numpy() for t in response.output_tensors()}
            for response in self.model.execute(batch)
        ]

    def close(self) -> None:
        pass


class InProcessModel:
    def __init__(self, model_file: Path) -> None:
        self.model_file = model_file

    def create_instance(self, group: InstanceGroupSpec, index: int) -> InProcessInstance:
        return InProcessInstance(self.model_file)

    def close(self) -> None:
        pass


class InProcessBackend:
    name = "python_inprocess"
    platforms: tuple[str, ...] = ()
    default_model_filename = "model.py"

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        pass

    def load(self, ctx: LoadContext) -> InProcessModel:
        return InProcessModel(ctx.model_path)


def write_model(
    repo: Path, name: str, backend: str, count: int = 1, method: str = "zygote"
) -> Path:
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(
        CONFIG.format(name=name, backend=backend, count=count, method=method)
    )
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(IDENTITY))
    return model_dir


def median_us(call: Callable[[], Any], iterations: int) -> float:
    for _ in range(max(3, iterations // 10)):
        call()
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000


def iterations_for(size: int, quick: bool) -> int:
    base = 2000 if size <= 4096 else (300 if size <= 2 << 20 else 60)
    return max(20, base // 4) if quick else base


def instance_latency(repo: Path, quick: bool) -> list[tuple[str, float, float]]:
    model_dir = write_model(repo, "identity_direct", "python")
    prepared = prepare("identity_direct", model_dir, default_registry(), LoadOptions())
    ctx = LoadContext(prepared.spec, 1, model_dir, model_dir / "1")
    loaded = PythonBackend().load(ctx)
    instance = loaded.create_instance(prepared.spec.instance_groups[0], 0)
    local = InProcessInstance(ctx.model_path)
    rows = []
    try:
        for label, size in SIZES:
            request = InferRequest("identity_direct", {"IN": np.ones(size, dtype=np.uint8)})
            n = iterations_for(size, quick)
            inproc = median_us(lambda r=request: local.execute([r]), n)
            out = instance.execute([request])[0]
            assert isinstance(out, dict)
            assert out["OUT"].nbytes == size
            viaworker = median_us(lambda r=request: instance.execute([r]), n)
            rows.append((label, inproc, viaworker))
    finally:
        instance.close()
        loaded.close()
    return rows


def engine_latency(repo: Path, quick: bool) -> list[tuple[str, float, float]]:
    write_model(repo, "identity_worker", "python")
    write_model(repo, "identity_inprocess", "python_inprocess")
    registry = default_registry()
    registry.register(InProcessBackend())

    async def run() -> list[tuple[str, float, float]]:
        manager = RepositoryManager([repo], registry, mode=ControlMode.EXPLICIT)
        failures = await manager.startup(("identity_worker", "identity_inprocess"))
        assert not failures, failures
        engine = Engine(manager, server_version="bench")
        rows = []
        try:
            for label, size in SIZES:
                data = np.ones(size, dtype=np.uint8)
                n = iterations_for(size, quick)
                results = {}
                for model in ("identity_inprocess", "identity_worker"):
                    request = InferRequest(model, {"IN": data})
                    for _ in range(max(3, n // 10)):
                        await engine.infer(request)
                    samples = []
                    for _ in range(n):
                        t0 = time.perf_counter_ns()
                        await engine.infer(request)
                        samples.append(time.perf_counter_ns() - t0)
                    results[model] = statistics.median(samples) / 1000
                rows.append((label, results["identity_inprocess"], results["identity_worker"]))
        finally:
            await manager.close()
        return rows

    return asyncio.run(run())


def memory_kib(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0])
    return {
        "rss": fields["Rss"],
        "pss": fields["Pss"],
        "uss": fields["Private_Clean"] + fields["Private_Dirty"],
    }


def memory(repo: Path) -> list[tuple[str, int, dict[str, float]]]:
    rows = []
    for method in ("zygote", "spawn"):
        for count in (1, 2, 4):
            name = f"mem_{method}_{count}"
            model_dir = write_model(repo, name, "python", count=count, method=method)
            prepared = prepare(name, model_dir, default_registry(), LoadOptions())
            ctx = LoadContext(prepared.spec, 1, model_dir, model_dir / "1")
            loaded = PythonBackend().load(ctx)
            group = prepared.spec.instance_groups[0]
            instances = [loaded.create_instance(group, i) for i in range(count)]
            try:
                request = InferRequest(name, {"IN": np.ones(1 << 20, dtype=np.uint8)})
                for inst in instances:  # touch the arena like real traffic
                    inst.execute([request])
                stats = [memory_kib(int(inst.pid or 0)) for inst in instances]
                mean = {k: sum(s[k] for s in stats) / count / 1024 for k in ("rss", "pss", "uss")}
                rows.append((method, count, mean))
            finally:
                for inst in instances:
                    inst.close()
                loaded.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="inferd-bench-py-") as scratch:
        repo = Path(scratch)
        print("identity model, median latency per call (one request, UINT8 tensor)\n")
        print(
            f"{'level':<9}{'size':>8}{'in-process':>14}{'worker+shm':>14}{'added':>11}{'ratio':>8}"
        )
        for level, rows in (
            ("instance", instance_latency(repo, args.quick)),
            ("engine", engine_latency(repo, args.quick)),
        ):
            for label, inproc, viaworker in rows:
                added = viaworker - inproc
                print(
                    f"{level:<9}{label:>8}{inproc:>11.1f} us{viaworker:>11.1f} us"
                    f"{added:>8.1f} us{viaworker / inproc:>7.2f}x"
                )
        print("\nworker memory per instance (MiB; PSS splits shared pages among their users)\n")
        print(f"{'start':<11}{'N':>3}{'RSS':>9}{'PSS':>9}{'USS':>9}")
        for method, count, mean in memory(repo):
            print(
                f"{method:<11}{count:>3}{mean['rss']:>9.1f}{mean['pss']:>9.1f}{mean['uss']:>9.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
