"""Where the analyzer reads memory, and how the model control API's answers reach it (in process,
through the engine, the same operations the HTTP and gRPC clients send)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from inferd.cli.perf_inprocess import running_engine
from inferd.tools.analyze.configs import apply_candidate, load_base_config, override_json
from inferd.tools.analyze.control import EngineControl, LoadFailedError
from inferd.tools.analyze.memory import MemoryProbe, parse_resident_metric, parse_status_kib
from inferd.tools.analyze.space import Candidate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"

STATUS = "Name:\tinferd\nVmPeak:\t  900 kB\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n"


def test_status_fields() -> None:
    assert parse_status_kib(STATUS, "VmHWM") == 2048
    assert parse_status_kib(STATUS, "VmRSS") == 1024
    assert parse_status_kib(STATUS, "VmSwap") is None


def test_resident_metric() -> None:
    text = (
        b"# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        b"# TYPE process_resident_memory_bytes gauge\n"
        b"process_resident_memory_bytes 1.2345e+08\n"
    )
    assert parse_resident_metric(text) == pytest.approx(1.2345e8)
    assert parse_resident_metric(b"process_cpu_seconds_total 3\n") is None


def test_the_peak_since_the_reset_counts_memory_freed_before_the_reading() -> None:
    status = Path(f"/proc/{os.getpid()}/status")
    probe = MemoryProbe(os.getpid(), None)
    assert probe.source == str(status)
    probe.start()
    before_kib = parse_status_kib(status.read_text(), "VmRSS")
    assert before_kib is not None
    block = bytearray(64 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # touch every page: resident
    del block  # freed (an mmap of its own): the resident size falls back
    peak = asyncio.run(probe.read_mb())
    assert peak is not None
    assert peak >= before_kib / 1024 + 60
    assert asyncio.run(MemoryProbe(None, None).read_mb()) is None
    assert MemoryProbe(None, None).source == "unknown"


async def test_engine_control_loads_overrides_and_reports_failures() -> None:
    async with running_engine(EXAMPLES, "simple") as engine:
        control = EngineControl(engine)
        base = load_base_config(EXAMPLES / "simple", await control.config("simple"))
        await control.load("simple", override_json(apply_candidate(base, Candidate(3, 4, True))))
        served = await control.config("simple")
        assert served["max_batch_size"] == 4
        assert served["instance_group"][0]["count"] == 3
        with pytest.raises(LoadFailedError, match="simple"):
            await control.load("simple", '{"max_batch_size": "x"}')
        await control.load("simple")  # back to the repository's config
        assert (await control.config("simple"))["max_batch_size"] == 8
        await control.close()
