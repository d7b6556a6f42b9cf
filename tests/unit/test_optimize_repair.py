"""Per-node sensitivity of a QDQ model and the accuracy repair that keeps the most sensitive
nodes in float: on a model with one outlier activation channel, plain static INT8 misses a
tight budget and the repair meets it by keeping exactly the nodes around that channel."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.data import Dataset
from inferd.tools.optimize.quantize import (
    PreparedModel,
    StaticSettings,
    prepare_model,
    quantize_static_int8,
)
from inferd.tools.optimize.repair import doubling_counts, repair_exclusions, repair_static
from inferd.tools.optimize.sensitivity import NodeSensitivity, node_sensitivity, rank, sqnr_db

Array = np.ndarray[Any, Any]
WIDTH = 64
OUTLIER = 5


def outlier_model() -> onnx.ModelProto:
    """X -> mm_a -> Relu -> mm_b -> mm_c -> Relu -> mm_d -> Y, where mm_b's output channel 5
    is 1000 times the others and mm_c all but ignores it: a per-tensor scale for mm_b's output
    leaves the other channels a few levels, and mm_c's output is ruined."""
    rng = np.random.default_rng(0)
    w_a = rng.normal(0, 0.3, (16, WIDTH))
    w_b = rng.normal(0, 0.3, (WIDTH, WIDTH))
    w_b[:, OUTLIER] *= 1000
    w_c = rng.normal(0, 0.3, (WIDTH, WIDTH))
    w_c[OUTLIER, :] *= 1e-3
    w_d = rng.normal(0, 0.3, (WIDTH, 8))
    weights = {"Wa": w_a, "Wb": w_b, "Wc": w_c, "Wd": w_d}
    nodes = [
        helper.make_node("MatMul", ["X", "Wa"], ["a"], name="mm_a"),
        helper.make_node("Relu", ["a"], ["ar"], name="relu_a"),
        helper.make_node("MatMul", ["ar", "Wb"], ["b"], name="mm_b"),
        helper.make_node("MatMul", ["b", "Wc"], ["c"], name="mm_c"),
        helper.make_node("Relu", ["c"], ["cr"], name="relu_c"),
        helper.make_node("MatMul", ["cr", "Wd"], ["Y"], name="mm_d"),
    ]
    graph = helper.make_graph(
        nodes,
        "outlier",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 8])],
        [numpy_helper.from_array(w.astype(np.float32), n) for n, w in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def rows(count: int, seed: int) -> Array:
    return np.random.default_rng(seed).normal(0, 1, (count, 16)).astype(np.float32)


def outputs(path: Path, x: Array) -> Array:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: Array = session.run(None, {"X": x})[0]
    return out


class RelativeError:
    """The evaluation's side of the repair: relative error of the outputs against the float
    model on held-out rows (lower is better), within budget up to ``limit``."""

    def __init__(self, reference: Path, x: Array, limit: float) -> None:
        self.x = x
        self.want = outputs(reference, x)
        self.limit = limit
        self.measured: list[Path] = []

    def quality(self, path: Path) -> float:
        self.measured.append(path)
        got = outputs(path, self.x)
        return float(np.linalg.norm(got - self.want) / np.linalg.norm(self.want))

    def budget_ok(self, value: float) -> bool:
        return value <= self.limit


CALIBRATION = Dataset({"X": rows(64, seed=1)}, None, "calibration")
EVAL = rows(128, seed=2)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("work")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "model.onnx"
    onnx.save(outlier_model(), path)
    return path


@pytest.fixture(scope="module")
def prepared(source: Path, work: Path) -> PreparedModel:
    return prepare_model(source, work)


@pytest.fixture(scope="module")
def plain(prepared: PreparedModel, work: Path) -> Candidate:
    return quantize_static_int8(prepared, CALIBRATION, work)


def test_plain_static_int8_misses_a_tight_budget(source: Path, plain: Candidate) -> None:
    judge = RelativeError(source, EVAL, limit=0.05)
    assert not judge.budget_ok(judge.quality(plain.path))
    assert judge.quality(plain.path) > 0.5


def test_sensitivity_ranks_the_nodes_around_the_outlier_first(
    prepared: PreparedModel, plain: Candidate, work: Path
) -> None:
    ranking = node_sensitivity(prepared.path, plain.path, CALIBRATION, work)
    assert {s.node for s in ranking} == {"mm_a", "mm_b", "mm_c", "mm_d"}
    assert all(s.op_type == "MatMul" for s in ranking)
    assert {s.node for s in ranking[:2]} == {"mm_b", "mm_c"}
    scores = {s.node: s for s in ranking}
    assert scores["mm_c"].score > 10 * scores["mm_a"].score
    # mm_d's output is as wrong as its input: it adds nothing of its own
    assert scores["mm_d"].output_error > 0.5
    assert scores["mm_d"].score < 0.05
    assert [s.score for s in ranking] == sorted((s.score for s in ranking), reverse=True)
    assert not (work / "sensitivity").exists()  # the augmented models are removed


def test_sensitivity_leaves_out_nodes_kept_in_float(prepared: PreparedModel, work: Path) -> None:
    mixed = quantize_static_int8(
        prepared, CALIBRATION, work, nodes_to_exclude=["mm_b", "mm_c"], name="kept"
    )
    # mm_b and mm_c read their weights in float: seen as kept in float without being told
    ranking = node_sensitivity(prepared.path, mixed.path, CALIBRATION, work)
    assert {s.node for s in ranking} == {"mm_a", "mm_d"}
    told = node_sensitivity(prepared.path, mixed.path, CALIBRATION, work, excluded=["mm_a"])
    assert {s.node for s in told} == {"mm_d"}
    assert all(s.score < 0.05 for s in ranking)


def test_repair_keeps_the_right_nodes_in_float(
    source: Path, prepared: PreparedModel, plain: Candidate, work: Path
) -> None:
    ranking = node_sensitivity(prepared.path, plain.path, CALIBRATION, work)
    judge = RelativeError(source, EVAL, limit=0.05)
    candidate = repair_static(
        prepared, CALIBRATION, work, StaticSettings(), ranking, judge, parent="baseline"
    )
    assert candidate.kind == "int8-mixed"
    assert candidate.name == "int8-mixed-minmax"
    assert candidate.parent == "baseline"
    assert candidate.path == work / "int8-mixed-minmax" / "model.onnx"
    assert set(candidate.recipe["excluded"]) == {"mm_b", "mm_c"}
    steps = candidate.recipe["repair"]
    assert isinstance(steps, list)
    assert [(s["excluded"], s["within_budget"]) for s in steps] == [(1, False), (2, True)]
    assert steps[1]["quality"] == pytest.approx(judge.quality(candidate.path))
    assert judge.budget_ok(judge.quality(candidate.path))
    assert any("mm_b (MatMul" in note and "mm_c (MatMul" in note for note in candidate.notes)
    assert not list(work.glob("*.try-*"))  # the tries not chosen are gone
    graph = onnx.load(candidate.path).graph
    inputs = {node.name: list(node.input) for node in graph.node}
    assert "Wb" in inputs["mm_b"]  # weights kept in float
    assert "Wc" in inputs["mm_c"]
    assert "Wa" not in inputs["mm_a"]  # the others read dequantized weights
    assert "Wd" not in inputs["mm_d"]
    quantized = {n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    assert "b" not in quantized  # the outlier tensor stays in float


def test_repair_says_why_when_no_mix_meets_the_budget(
    source: Path, prepared: PreparedModel, plain: Candidate, work: Path
) -> None:
    ranking = node_sensitivity(prepared.path, plain.path, CALIBRATION, work)
    judge = RelativeError(source, EVAL, limit=1e-9)
    with pytest.raises(CandidateSkipped) as info:
        repair_static(prepared, CALIBRATION, work, StaticSettings(), ranking, judge, name="none")
    message = str(info.value)
    assert "no mix met the accuracy budget" in message
    assert "1: " in message
    assert "3: " in message  # all but one node: something stays quantized
    assert len(judge.measured) == 3  # 1, 2, then 3 nodes kept in float
    assert not list(work.glob("none*"))
    with pytest.raises(CandidateSkipped, match="none can be kept"):
        repair_static(prepared, CALIBRATION, work, StaticSettings(), ranking[:1], judge)


# --- the search, on its own -------------------------------------------------------------------


@given(st.integers(0, 200))
def test_doubling_counts(limit: int) -> None:
    counts = doubling_counts(limit)
    if limit < 1:
        assert counts == []
        return
    assert counts[-1] == limit
    assert counts == sorted(set(counts))
    assert all(c == 2**i for i, c in enumerate(counts[:-1]))
    assert len(counts) <= math.ceil(math.log2(limit)) + 1


class Threshold:
    """A judge that passes once ``needed`` nodes are kept in float (builds are real folders)."""

    def __init__(self, needed: int) -> None:
        self.needed = needed
        self.tries = 0

    def quality(self, path: Path) -> float:
        self.tries += 1
        return float(path.read_text())

    def budget_ok(self, value: float) -> bool:
        return value >= self.needed


@settings(max_examples=60, deadline=None)
@given(data=st.data(), total=st.integers(2, 40))
def test_the_search_finds_the_shortest_prefix_in_few_tries(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, total: int
) -> None:
    needed = data.draw(st.integers(1, total + 3), label="needed")
    broken = data.draw(st.integers(1, total + 3), label="builds fail from")
    work = tmp_path_factory.mktemp("search")
    ranking = [NodeSensitivity(f"n{i}", "MatMul", 1.0 / (i + 1), 0.5) for i in range(total)]

    def build(excluded: Sequence[str], name: str) -> Candidate:
        folder = work / name
        folder.mkdir()
        if len(excluded) >= broken:
            raise CandidateSkipped(f"{name}: nothing left to quantize")
        (folder / "model.onnx").write_text(str(len(excluded)))
        return Candidate(name, "int8-mixed", folder / "model.onnx", recipe={"method": "x"})

    judge = Threshold(needed)
    limit = total - 1
    bound = 2 * math.ceil(math.log2(limit)) + 1 if limit > 1 else 1
    first_pass = next((c for c in doubling_counts(limit) if c >= needed), None)
    if first_pass is None or first_pass >= broken:
        with pytest.raises(CandidateSkipped, match="no mix met the accuracy budget"):
            repair_exclusions(ranking, judge, build, work, "mixed")
        assert not any(work.iterdir())
    else:
        candidate = repair_exclusions(ranking, judge, build, work, "mixed")
        assert candidate.recipe["excluded"] == [f"n{i}" for i in range(needed)]
        assert candidate.path.read_text() == str(needed)
        assert sorted(p.name for p in work.iterdir()) == ["mixed"]
    assert judge.tries <= bound


def test_rank_charges_every_node_that_keeps_a_tensor_quantized() -> None:
    local = {  # op type, local error, output error against the float model
        "p": ("MatMul", 0.01, 0.01),
        "c1": ("MatMul", 0.49, 0.5),
        "c2": ("MatMul", 0.02, 0.3),
        "d": ("Gemm", 0.1, 0.6),
    }
    tensors = [
        (["c1", "c2"], ["p"]),  # p writes a tensor that c1 and c2 read
        (["d"], []),  # d reads a graph input
        ([], ["d"]),  # d's output is quantized, read by nothing quantized
    ]
    ranking = rank(local, tensors)
    charged = {s.node: s for s in ranking}
    for name in ("p", "c1", "c2"):  # the tensor stays quantized while any of them is
        assert charged[name].score == pytest.approx(0.49)
    assert charged["d"].score == pytest.approx(0.1)
    assert charged["d"].op_type == "Gemm"
    assert charged["c2"].output_error == 0.3
    assert [s.node for s in ranking] == ["c1", "c2", "p", "d"]  # ties: own error first
    assert sqnr_db(0.1) == pytest.approx(20.0)
    assert sqnr_db(0.0) == math.inf
