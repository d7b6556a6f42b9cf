"""The analyzer's search space: enumeration, the rules that keep it free of duplicates and invalid
configs, the defaults per machine and model, and the command line's lists."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.space import (
    Candidate,
    ModelFacts,
    RangeChoices,
    Space,
    default_space,
    enumerate_space,
    parse_int_list,
    parse_preferred_list,
    parse_switch_list,
    parse_thread_list,
    space_for,
)

BATCHING_ORT = ModelFacts("digits", max_batch_size=32, onnxruntime=True)
NO_BATCH_ORT = ModelFacts("flat", max_batch_size=0, onnxruntime=True)
BATCHING_PYTHON = ModelFacts("py", max_batch_size=8, onnxruntime=False)
SEQUENCE = ModelFacts("seq", max_batch_size=8, onnxruntime=True, sequence=True)


def test_enumeration_counts_every_valid_combination_once() -> None:
    space = Space(
        instances=(1, 2),
        max_batch_sizes=(4, 16),
        dynamic_batching=(False, True),
        queue_delays_us=(0, 100),
        preferred_batch_sizes=((), (8,)),
        intra_op_threads=(None, 1),
        own_max_batch_size=16,
    )
    found = enumerate_space(space)
    # per instances x threads: 1 off + on: (mbs 4: 2 delays x 1 preferred) + (mbs 16: 2 x 2)
    assert len(found) == 2 * 2 * (1 + 2 + 4)
    assert len({c.key for c in found}) == len(found)
    assert found == enumerate_space(space)  # the order is fixed


def test_batching_off_keeps_the_models_own_max_batch_and_no_preferred_sizes() -> None:
    space = Space(
        instances=(1,),
        max_batch_sizes=(4, 8, 64),
        dynamic_batching=(False,),
        queue_delays_us=(0, 500),
        preferred_batch_sizes=((), (4,)),
        own_max_batch_size=32,
    )
    assert enumerate_space(space) == [Candidate(1, 32, False)]


def test_a_preferred_size_above_the_max_batch_is_never_proposed() -> None:
    space = Space(
        instances=(1,),
        max_batch_sizes=(4, 8),
        dynamic_batching=(True,),
        queue_delays_us=(0,),
        preferred_batch_sizes=((2,), (8,), (2, 8)),
        own_max_batch_size=8,
    )
    found = enumerate_space(space)
    assert all(max(c.preferred_batch_sizes) <= c.max_batch_size for c in found)
    assert {(c.max_batch_size, c.preferred_batch_sizes) for c in found} == {
        (4, (2,)),
        (8, (2,)),
        (8, (8,)),
        (8, (2, 8)),
    }


def test_defaults_for_a_batching_onnxruntime_model_on_two_cores() -> None:
    space = default_space(BATCHING_ORT, cores=2)
    assert space.instances == (1, 2)
    assert space.max_batch_sizes == (8, 32)
    assert space.dynamic_batching == (False, True)
    assert space.queue_delays_us == (0, 100, 1000)
    assert space.intra_op_threads == (None, 1)
    # 2 instances x 2 threads x (off + 2 max batches x 3 delays)
    assert len(enumerate_space(space)) == 2 * 2 * (1 + 2 * 3)


def test_defaults_follow_the_cores() -> None:
    assert default_space(BATCHING_ORT, cores=1).instances == (1,)
    assert default_space(BATCHING_ORT, cores=1).intra_op_threads == (None,)
    assert default_space(BATCHING_ORT, cores=8).instances == (1, 2, 4, 8)
    assert default_space(BATCHING_ORT, cores=6).instances == (1, 2, 4, 6)
    assert default_space(BATCHING_ORT, cores=32).instances == (1, 8, 16, 32)


def test_defaults_without_batching_or_onnxruntime() -> None:
    flat = enumerate_space(default_space(NO_BATCH_ORT, cores=2))
    assert all(not c.dynamic_batching and c.max_batch_size == 0 for c in flat)
    python = enumerate_space(default_space(BATCHING_PYTHON, cores=2))
    assert all(c.intra_op_threads is None and c.inter_op_threads is None for c in python)
    assert {c.max_batch_size for c in python if c.dynamic_batching} == {8}
    sequence = enumerate_space(default_space(SEQUENCE, cores=2))
    assert not any(c.dynamic_batching for c in sequence)


def test_user_values_replace_the_defaults() -> None:
    choices = RangeChoices(
        instances=(3,),
        max_batch_sizes=(16,),
        dynamic_batching=(True,),
        queue_delays_us=(50,),
        preferred_batch_sizes=((4, 16),),
        intra_op_threads=(2,),
        inter_op_threads=(1,),
    )
    space = space_for(BATCHING_ORT, 2, choices)
    assert enumerate_space(space) == [Candidate(3, 16, True, 50, (4, 16), 2, 1)]
    assert space.notes == ()


def test_values_that_do_not_apply_to_a_model_are_left_out_with_a_note() -> None:
    choices = RangeChoices(max_batch_sizes=(16,), queue_delays_us=(10,), intra_op_threads=(1,))
    flat = space_for(NO_BATCH_ORT, 2, choices)
    assert "does not batch" in flat.notes[0]
    assert "--max-batch-sizes, --queue-delays-us" in flat.notes[0]
    assert not any(c.dynamic_batching for c in enumerate_space(flat))
    python = space_for(BATCHING_PYTHON, 2, choices)
    assert any("ONNX Runtime: --threads" in note for note in python.notes)
    assert all(c.intra_op_threads is None for c in enumerate_space(python))


def test_max_batch_size_zero_is_refused_for_a_batching_model() -> None:
    with pytest.raises(InvalidArgumentError, match="batch dimension"):
        space_for(BATCHING_ORT, 2, RangeChoices(max_batch_sizes=(0, 8)))


def test_list_parsing() -> None:
    assert parse_int_list("1, 2,4,2", "--instances", minimum=1) == (1, 2, 4)
    assert parse_thread_list("auto,1,2", "--threads") == (None, 1, 2)
    assert parse_switch_list("on,off", "--dynamic-batching") == (True, False)
    assert parse_preferred_list("none,8,8+4", "--preferred-batch-sizes") == ((), (8,), (4, 8))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: parse_int_list("1,x", "--instances", minimum=1), "'x' is not a whole number"),
        (lambda: parse_int_list("0", "--instances", minimum=1), "below the minimum of 1"),
        (lambda: parse_int_list("1,,2", "--instances"), "comma-separated list"),
        (lambda: parse_thread_list("0", "--threads"), "below the minimum"),
        (lambda: parse_switch_list("maybe", "--dynamic-batching"), "neither on nor off"),
        (lambda: parse_preferred_list("0", "--preferred-batch-sizes"), "minimum of 1"),
    ],
)
def test_bad_lists_are_refused_with_one_clear_line(call: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        call()  # type: ignore[operator]


candidates = st.builds(
    Candidate,
    instances=st.integers(1, 8),
    max_batch_size=st.integers(0, 64),
    dynamic_batching=st.booleans(),
    max_queue_delay_us=st.integers(0, 10_000),
    preferred_batch_sizes=st.lists(st.integers(1, 64), max_size=3, unique=True).map(
        lambda sizes: tuple(sorted(sizes))
    ),
    intra_op_threads=st.none() | st.integers(1, 8),
    inter_op_threads=st.none() | st.integers(1, 8),
)


@given(candidates)
def test_a_candidate_survives_its_stored_form(candidate: Candidate) -> None:
    assert Candidate.from_dict(candidate.to_dict()) == candidate


@given(candidates, candidates)
def test_keys_differ_when_the_batching_settings_differ(a: Candidate, b: Candidate) -> None:
    # the key leaves out what the batcher does not use when it is off
    def used(c: Candidate) -> tuple[object, ...]:
        batching = (c.max_queue_delay_us, c.preferred_batch_sizes) if c.dynamic_batching else ()
        return (
            c.instances,
            c.max_batch_size,
            c.dynamic_batching,
            batching,
            c.intra_op_threads,
            c.inter_op_threads,
        )

    assert (a.key == b.key) == (used(a) == used(b))
