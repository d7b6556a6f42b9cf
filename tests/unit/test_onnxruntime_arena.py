"""Under a memory budget, ONNX Runtime's CPU arena gives back what a run grew it by.

Without that, a session keeps its largest batch's activations for good, and the budget counts
them as memory no model holds. Memory is read from glibc's own counters (``mallinfo2``: bytes
in use, blocks mapped apart included), in process."""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

import numpy as np
import pytest
from onnx_graphs import save, wide_hidden

from inferd.backends.base import LoadContext
from inferd.backends.onnxruntime import BOUNDED_SHRINKAGE, OnnxRuntimeBackend, parse_settings
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import InferdError

SHRINK = "memory.enable_memory_arena_shrinkage"
CONFIG = """
name: "wide"
backend: "onnxruntime"
default_model_filename: "model.onnx"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
ROWS = 8192  # the intermediate: 8192 x 4096 floats, 128 MiB
MIB = 1 << 20


def _spec(extra: str = "") -> ModelSpec:
    return spec_from_proto(parse_pbtxt(CONFIG + extra, "wide"))


def _param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'


def test_a_budget_turns_arena_shrinkage_on() -> None:
    bounded = parse_settings(_spec(), bounded_memory=True)
    assert bounded.run_config_entries == ((SHRINK, BOUNDED_SHRINKAGE),)
    assert parse_settings(_spec()).run_config_entries == ()


def test_the_config_decides_over_the_budget() -> None:
    explicit = parse_settings(_spec(_param(SHRINK, "cpu:0;gpu:0")), bounded_memory=True)
    assert explicit.run_config_entries == ((SHRINK, "cpu:0;gpu:0"),)
    no_arena = parse_settings(_spec(_param("enable_mem_arena", "0")), bounded_memory=True)
    assert no_arena.run_config_entries == ()  # no arena, nothing to shrink


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _in_use() -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc's mallinfo2 (2.33+) is needed to read the memory in use")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def _held_after_a_big_batch(tmp_path: Path, bounded: bool) -> int:
    model_dir = tmp_path / "wide"
    save(wide_hidden(), model_dir / "1" / "model.onnx")
    ctx = LoadContext(
        spec=_spec(_param("intra_op_thread_count", "1")),
        version=1,
        model_dir=model_dir,
        version_dir=model_dir / "1",
        bounded_memory=bounded,
    )
    loaded = OnnxRuntimeBackend().load(ctx)
    instance = loaded.create_instance(InstanceGroupSpec(name="g", kind="KIND_CPU", count=1), 0)
    small = InferRequest(model_name="wide", inputs={"X": np.ones((2, 16), np.float32)})
    big = InferRequest(model_name="wide", inputs={"X": np.ones((ROWS, 16), np.float32)})
    try:
        [result] = instance.execute([small])
        assert not isinstance(result, InferdError), result
        before = _in_use()
        [result] = instance.execute([big])
        assert not isinstance(result, InferdError), result
        np.testing.assert_allclose(result["Y"][:2], [[16.0 * 4096]] * 2)
        del result
        return _in_use() - before
    finally:
        instance.close()
        loaded.close()


def test_without_a_budget_the_arena_keeps_the_batch(tmp_path: Path) -> None:
    # the reference the next test is measured against: the arena holds the 128 MiB
    assert _held_after_a_big_batch(tmp_path, bounded=False) > 96 * MIB


def test_under_a_budget_the_arena_gives_the_batch_back(tmp_path: Path) -> None:
    assert _held_after_a_big_batch(tmp_path, bounded=True) < 16 * MIB
