"""Which version a rollback chooses: the highest version below the default one, or the one
named; refusals name what is wrong."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.errors import InvalidArgumentError, NotFoundError, UnavailableError
from inferd.repository.rollback import Pin, refuse_in_mode_none, rollback_target


@given(st.sets(st.integers(1, 50), min_size=1, max_size=12), st.data())
def test_the_default_target_is_the_highest_version_below_the_current_one(
    available: set[int], data: st.DataObject
) -> None:
    current = data.draw(st.sampled_from(sorted(available)))
    older = [v for v in available if v < current]
    if not older:
        with pytest.raises(InvalidArgumentError, match="no version below"):
            rollback_target("m", current, available)
        return
    target = rollback_target("m", current, available)
    assert target in available
    assert target < current
    assert all(not target < v < current for v in available)


def test_gaps_in_the_version_numbers_are_skipped() -> None:
    assert rollback_target("m", 7, [1, 3, 7, 9]) == 3


def test_a_named_version_must_exist_and_differ_from_the_default() -> None:
    assert rollback_target("m", 3, [1, 2, 3], 1) == 1
    assert rollback_target("m", 2, [1, 2, 3], 3) == 3  # forward is allowed: the named one
    with pytest.raises(NotFoundError, match=r"no such version \(it has 1, 2, 3\)"):
        rollback_target("m", 3, [1, 2, 3], 5)
    with pytest.raises(InvalidArgumentError, match="already the default version of 'm'"):
        rollback_target("m", 3, [1, 2, 3], 3)


def test_the_pin_says_how_it_is_lifted() -> None:
    reason = Pin(2, 3).reason("m")
    assert "rollback from version 3" in reason
    assert "inferd model unpin m" in reason
    refusal = refuse_in_mode_none("roll a model back")
    assert isinstance(refusal, UnavailableError)
    assert "--model-control-mode poll or explicit to roll a model back" in str(refusal)
