"""The live sketches are bounded whatever the traffic, keep the last rows, and count data
quality (NaN, out of range, unseen categories, missing inputs)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from inferd.monitoring.drift.build import TensorData, build_profile
from inferd.monitoring.drift.window import Ring, VersionWindow

rng = np.random.default_rng(5)


@given(st.integers(1, 20), st.lists(st.integers(0, 30), max_size=20))
def test_a_ring_holds_exactly_the_last_rows(capacity: int, sizes: list[int]) -> None:
    ring = Ring(capacity, 1, np.int64)
    pushed: list[int] = []
    for size in sizes:
        rows = np.arange(len(pushed), len(pushed) + size).reshape(-1, 1)
        ring.push(rows)
        pushed += rows[:, 0].tolist()
    assert sorted(ring.rows()[:, 0].tolist()) == pushed[-capacity:] if pushed else True
    assert ring.filled == min(capacity, len(pushed))
    assert ring.nbytes == capacity * 8


def _profile() -> object:
    numbers = rng.normal(size=(500, 3)).astype(np.float32)
    colours = np.array([b"red", b"green", b"blue"] * 166 + [b"red", b"red"], dtype=object)
    return build_profile(
        "m",
        1,
        [
            TensorData("x", "input", "FP32", numbers),
            TensorData("colour", "input", "BYTES", colours.reshape(-1, 1)),
            TensorData("emb", "input", "FP32", rng.normal(size=(500, 100)).astype(np.float32)),
            TensorData("y", "output", "FP32", numbers[:, :1]),
        ],
        "test",
    )


def test_memory_is_fixed_when_the_profile_loads() -> None:
    window = VersionWindow(_profile(), 100, 30)  # type: ignore[arg-type]
    before = window.nbytes
    for _ in range(50):
        window.add(
            [
                {
                    "x": rng.normal(size=(40, 3)),
                    "colour": np.array([[b"red"]] * 40, dtype=object),
                    "emb": rng.normal(size=(40, 100)),
                    "y": rng.normal(size=(40, 1)),
                }
            ],
            40,
        )
    assert window.nbytes == before
    assert window.rows == 2000
    assert window.tensors["x"].filled == 100
    assert window.tensors["emb"].filled == 30


def test_data_quality_is_counted() -> None:
    window = VersionWindow(_profile(), 100, 30)  # type: ignore[arg-type]
    x = np.zeros((4, 3))
    x[0, 1] = np.nan
    x[1, 2] = 1e6  # far outside the reference's range
    colours = np.array([[b"red"], [b"purple"], [b"green"], [b"purple"]], dtype=object)
    emb = rng.normal(size=(4, 100))
    emb[2, 5] = np.nan
    window.add([{"x": x, "colour": colours, "emb": emb}], 4)  # no "y": missing
    xw = window.tensors["x"]
    assert xw.nan.tolist() == [0, 1, 0]
    assert xw.out_of_range.tolist() == [0, 0, 1]
    assert window.tensors["colour"].unseen.tolist() == [2]
    assert window.tensors["emb"].nan.tolist() == [1]
    assert window.tensors["emb"].filled == 3  # the row with a NaN is not projected
    assert window.tensors["y"].missing == 1
    # rows of another size than the profile's are not observed, only counted
    window.add([{"x": np.zeros((2, 5))}], 2)
    assert xw.mismatched == 1
