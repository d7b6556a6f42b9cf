"""The builders' own check that a new model answers like its source."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.tools.optimize.candidate import CandidateSkipped
from inferd.tools.optimize.verify import EXACT, HALF, INT8, agreement, check_agreement, head_rows

RNG = np.random.default_rng(3)


def test_close_outputs_pass_and_report_their_error() -> None:
    want = {"y": RNG.standard_normal((4, 10)).astype(np.float32)}
    got = {"y": want["y"] + np.float32(1e-5)}
    (found,) = check_agreement(want, got, EXACT, "the model")
    assert found.output == "y"
    assert found.max_abs_error == pytest.approx(1e-5, rel=0.1)
    assert found.min_cosine > 0.9999


def test_outputs_beyond_the_tolerance_are_refused_with_figures() -> None:
    want = {"y": RNG.standard_normal((4, 10)).astype(np.float32)}
    got = {"y": want["y"] * np.float32(1.01)}
    check_agreement(want, got, HALF, "the FP16 model")  # 1 % is fine for half precision
    with pytest.raises(CandidateSkipped, match=r"^the graph does not answer like its source"):
        check_agreement(want, got, EXACT, "the graph")


def test_a_row_pointing_elsewhere_fails_on_cosine_even_when_small() -> None:
    want = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    got = np.array([[1.0, 0.0], [0.0, -1.0]], np.float32)
    found = agreement("y", want, got)
    assert found.min_cosine == pytest.approx(-1.0)
    assert not found.within(INT8)


@pytest.mark.parametrize(
    "got",
    [
        np.zeros((3, 2), np.float32),  # wrong shape
        np.full((4, 2), np.nan, np.float32),  # NaN
    ],
)
def test_a_wrong_shape_or_nan_is_total_disagreement(got: np.ndarray) -> None:
    want = np.ones((4, 2), np.float32)
    assert not agreement("y", want, got).within(INT8)


def test_integer_outputs_must_be_equal() -> None:
    labels = np.array([1, 2, 3], np.int64)
    assert agreement("label", labels, labels.copy()).within(EXACT)
    assert not agreement("label", labels, np.array([1, 2, 4], np.int64)).within(INT8)


def test_a_lost_output_is_refused() -> None:
    want = {"a": np.ones((1, 2), np.float32), "b": np.ones((1, 2), np.float32)}
    with pytest.raises(CandidateSkipped, match="lost output"):
        check_agreement(want, {"a": want["a"]}, INT8, "the model")


def test_zero_rows_in_both_agree() -> None:
    zeros = np.zeros((2, 3), np.float32)
    assert agreement("y", zeros, zeros.copy()).within(EXACT)


def test_head_rows_keeps_the_first_rows_of_every_input() -> None:
    rows = head_rows({"a": np.arange(20).reshape(10, 2), "b": np.arange(10)}, rows=3)
    assert rows["a"].shape == (3, 2)
    assert rows["b"].tolist() == [0, 1, 2]
