"""Comparing two answers (shadow and canary comparisons), and the map of routed request ids that
feedback is credited through."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.rollout.compare import compare_many, compare_outputs
from inferd.rollout.feedback import RoutedIds
from inferd.rollout.policy import CompareSpec
from inferd.testing import FakeClock

SPEC = CompareSpec()


def _probs(labels: list[int], classes: int = 4) -> np.ndarray:
    out = np.full((len(labels), classes), 0.1 / (classes - 1), dtype=np.float32)
    out[np.arange(len(labels)), labels] = 0.9
    return out


def test_classifier_rows_agree_on_the_top_class() -> None:
    a = {"probs": _probs([0, 1, 2, 3])}
    b = {"probs": _probs([0, 1, 3, 3]) * 0.99 + 0.0025}
    found = compare_outputs(a, b, SPEC, batched=True)
    assert (found.rows, found.agreed_rows, found.agreed) == (4, 3, False)
    assert found.max_abs_error is not None
    assert found.max_abs_error == pytest.approx(0.9 - (0.1 / 3 * 0.99 + 0.0025), abs=1e-6)
    assert found.cosine is not None
    assert 0.0 < found.cosine < 1.0


def test_logits_with_a_label_file_count_as_a_classifier() -> None:
    a = {"logits": np.array([[5.0, 1.0], [0.0, 2.0]])}
    b = {"logits": np.array([[4.0, 1.5], [1.0, 3.0]])}
    assert compare_outputs(a, b, SPEC, batched=True).agreed_rows == 0  # tolerance
    labelled = compare_outputs(a, b, SPEC, batched=True, labelled={"logits"})
    assert labelled.agreed_rows == 2


def test_numeric_outputs_agree_within_tolerance() -> None:
    a = {"y": np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)}
    b = {"y": np.array([[1.0, 2.00001], [3.0, 4.5]], dtype=np.float32)}
    found = compare_outputs(a, b, CompareSpec(atol=1e-4), batched=True)
    assert found.agreed_rows == 1
    assert found.max_abs_error == pytest.approx(0.5)
    assert compare_outputs(a, b, CompareSpec(atol=1.0), batched=True).agreed


def test_integers_and_bytes_agree_when_equal() -> None:
    a = {"label": np.array([1, 2, 3]), "name": np.array([b"x", b"y", b"z"], dtype=object)}
    b = {"label": np.array([1, 2, 4]), "name": np.array([b"x", b"q", b"z"], dtype=object)}
    found = compare_outputs(a, b, SPEC, batched=True)
    assert found.agreed_rows == 1
    assert found.max_abs_error is None
    assert found.cosine is None
    only = compare_outputs(a, b, CompareSpec(outputs=("label",)), batched=True)
    assert only.agreed_rows == 2


def test_an_unbatched_answer_is_one_row() -> None:
    a = {"y": np.arange(6, dtype=np.float64).reshape(2, 3)}
    found = compare_outputs(a, {"y": a["y"].copy()}, SPEC, batched=False)
    assert (found.rows, found.agreed_rows, found.cosine) == (1, 1, pytest.approx(1.0))


def test_a_missing_or_reshaped_output_disagrees() -> None:
    a = {"y": np.zeros((2, 3), np.float32)}
    assert compare_outputs(a, {}, CompareSpec(outputs=("y",)), batched=True).agreed_rows == 0
    reshaped = {"y": np.zeros((2, 4), np.float32)}
    assert compare_outputs(a, reshaped, SPEC, batched=True).agreed_rows == 0


@given(st.lists(st.integers(0, 3), min_size=1, max_size=20))
def test_an_answer_agrees_with_itself(labels: list[int]) -> None:
    a = {"p": _probs(labels), "label": np.array(labels)}
    found = compare_outputs(a, {k: v.copy() for k, v in a.items()}, SPEC, batched=True)
    assert found.agreed
    assert found.rows == len(labels)
    assert found.max_abs_error == 0.0
    assert found.cosine == pytest.approx(1.0)


# -- routed ids -----------------------------------------------------------------------------------


def test_an_id_is_taken_once() -> None:
    ids = RoutedIds(max_ids=10, ttl_s=60, clock=FakeClock())
    ids.remember("a", "v1")
    assert ids.take("a") == "v1"
    assert ids.take("a") is None
    assert ids.take("never") is None


def test_ids_expire_after_the_ttl() -> None:
    clock = FakeClock()
    ids = RoutedIds(max_ids=10, ttl_s=1.0, clock=clock)
    ids.remember("a", "v1")
    clock.advance(999_000_000)
    ids.remember("b", "v2")
    clock.advance(2_000_000)
    assert ids.take("a") is None
    assert ids.take("b") == "v2"


def test_the_oldest_ids_are_forgotten_past_the_bound() -> None:
    ids = RoutedIds(max_ids=3, ttl_s=60, clock=FakeClock())
    for i in range(5):
        ids.remember(str(i), f"v{i}")
    assert len(ids) == 3
    assert ids.take("0") is None
    assert ids.take("1") is None
    assert ids.take("4") == "v4"
    ids.remember("2", "again")  # remembered again: the newest
    assert ids.take("2") == "again"


def test_expired_ids_do_not_pile_up() -> None:
    clock = FakeClock()
    ids = RoutedIds(max_ids=1000, ttl_s=1.0, clock=clock)
    for i in range(100):
        ids.remember(str(i), "v")
        clock.advance(100_000_000)  # ten live ids at a time
    assert len(ids) <= 12


_answer = st.tuples(
    st.integers(1, 4),  # rows
    st.integers(0, 3),  # top class of the primary
    st.integers(0, 3),  # top class of the other
    st.floats(0.0, 0.01),  # a small difference in the scores
    st.booleans(),  # an extra numeric output differs a lot
)


def _pair(rows: int, top_a: int, top_b: int, delta: float, far: bool) -> tuple[dict, dict]:
    a = {"p": _probs([top_a] * rows), "y": np.arange(2.0, 2.0 + rows * 2).reshape(rows, 2)}
    b = {
        "p": np.clip(_probs([top_b] * rows) + np.float32(delta), 0, 1),
        "y": a["y"] + (5.0 if far else 0.0),
    }
    return a, b


@given(st.lists(_answer, min_size=1, max_size=12), st.booleans())
def test_many_answers_compared_at_once_as_one_by_one(answers: list, labelled: bool) -> None:
    pairs = [_pair(*answer) for answer in answers]
    names = {"p"} if labelled else set()
    many = compare_many(pairs, SPEC, batched=True, labelled=names)
    one = [compare_outputs(a, b, SPEC, batched=True, labelled=names) for a, b in pairs]
    assert [(m.rows, m.agreed_rows) for m in many] == [(o.rows, o.agreed_rows) for o in one]
    for m, o in zip(many, one, strict=True):
        assert m.max_abs_error == pytest.approx(o.max_abs_error)
        assert m.cosine == pytest.approx(o.cosine)


def test_answers_that_cannot_be_stacked_are_compared_one_by_one() -> None:
    a1, b1 = _pair(2, 0, 0, 0.0, False)
    a2 = {"p": _probs([1, 2, 3]), "y": np.zeros((3, 5))}  # another width of y
    b2 = {"p": _probs([1, 2, 0]), "y": np.zeros((3, 5))}
    a3, b3 = {"p": _probs([1])}, {}  # missing output
    spec = CompareSpec(outputs=("p", "y"))
    many = compare_many([(a1, b1), (a2, b2), (a3, b3)], spec, batched=True)
    assert [(m.rows, m.agreed_rows) for m in many] == [(2, 2), (3, 2), (1, 0)]
    assert compare_many([], SPEC, batched=True) == []
