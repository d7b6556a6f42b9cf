"""The response cache on its own: the LRU's bounds and eviction, immutable entries, keys that
tell apart every field of a request that decides the model's outputs (and not the outputs it
asks for), the ``--cache-config`` parser and the load-time checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2

from inferd.core.inference import InferRequest, RequestedOutput
from inferd.errors import ConfigError, InvalidArgumentError
from inferd.scheduling.response_cache import (
    ENTRY_OVERHEAD_BYTES,
    ResponseCache,
    check_model_cache,
    parse_cache_config,
    request_key,
)

Arr = np.ndarray[Any, Any]


def _req(inputs: dict[str, Arr], **kw: Any) -> InferRequest:
    return InferRequest(model_name="m", inputs=inputs, **kw)


def _key(request: InferRequest, name: str = "m", version: int = 1, epoch: int = 0) -> bytes:
    return request_key(request, name, version, epoch)


def _entry(nbytes: int) -> dict[str, Arr]:
    return {"OUT": np.zeros(nbytes, dtype=np.uint8)}


def _size(nbytes: int) -> int:
    """What one ``_entry(nbytes)`` costs in the cache."""
    probe = ResponseCache(1 << 30)
    probe.insert(b"k", _entry(nbytes))
    return probe.statistics().used_bytes


# -- the LRU ----------------------------------------------------------------------------------


def test_a_stored_response_is_found_and_a_missing_one_is_not() -> None:
    cache = ResponseCache(1 << 20)
    assert cache.lookup(b"a") is None
    assert cache.insert(b"a", {"OUT": np.arange(4, dtype=np.float32)})
    got = cache.lookup(b"a")
    assert got is not None
    np.testing.assert_array_equal(got["OUT"], np.arange(4, dtype=np.float32))
    stats = cache.statistics()
    assert (stats.hits, stats.misses, stats.entries) == (1, 1, 1)


def test_total_bytes_stay_within_the_size_and_the_oldest_entry_goes_first() -> None:
    one = _size(1000)
    cache = ResponseCache(3 * one)
    for key in (b"a", b"b", b"c"):
        assert cache.insert(key, _entry(1000))
    assert cache.lookup(b"a") is not None  # "a" is now the most recently used
    assert cache.insert(b"d", _entry(1000))
    assert b"b" not in cache  # the least recently used went
    assert all(k in cache for k in (b"a", b"c", b"d"))
    stats = cache.statistics()
    assert stats.used_bytes <= stats.capacity_bytes
    assert stats.evictions == 1


def test_a_large_entry_evicts_as_many_as_it_needs() -> None:
    one = _size(1000)
    cache = ResponseCache(4 * one)
    for key in (b"a", b"b", b"c", b"d"):
        cache.insert(key, _entry(1000))
    assert cache.insert(b"big", _entry(2 * one))
    assert b"big" in cache
    assert cache.statistics().used_bytes <= 4 * one
    assert b"a" not in cache
    assert b"b" not in cache


def test_an_entry_larger_than_the_cache_is_not_stored_and_evicts_nothing() -> None:
    cache = ResponseCache(4096)
    assert cache.insert(b"small", _entry(16))
    assert not cache.insert(b"huge", _entry(8192))
    assert b"huge" not in cache
    assert b"small" in cache
    assert cache.statistics().too_large == 1


def test_storing_a_key_again_replaces_its_entry_and_its_size() -> None:
    cache = ResponseCache(1 << 20)
    cache.insert(b"a", _entry(1000))
    cache.insert(b"a", _entry(10))
    assert len(cache) == 1
    assert cache.statistics().used_bytes == _size(10)


def test_entries_are_read_only_copies() -> None:
    cache = ResponseCache(1 << 20)
    produced = np.arange(4, dtype=np.int32)
    cache.insert(b"a", {"OUT": produced})
    produced[0] = 99  # the producer's array is not the cache's
    got = cache.lookup(b"a")
    assert got is not None
    assert got["OUT"][0] == 0
    with pytest.raises(ValueError, match="read-only"):
        got["OUT"][0] = 5
    got["OTHER"] = np.zeros(1)  # the dict is the caller's own
    again = cache.lookup(b"a")
    assert again is not None
    assert list(again) == ["OUT"]


def test_bytes_outputs_are_counted_by_their_elements() -> None:
    cache = ResponseCache(1 << 20)
    cache.insert(b"a", {"OUT": np.array([b"x" * 5000], dtype=np.object_)})
    assert cache.statistics().used_bytes >= 5000 + ENTRY_OVERHEAD_BYTES


def test_a_size_that_is_not_positive_is_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        ResponseCache(0)


# -- keys ---------------------------------------------------------------------------------------


def test_identical_requests_share_a_key_whatever_their_id_or_priority() -> None:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    a = _req({"IN": data}, id="1", parameters={"priority": 1, "timeout": 5})
    b = _req({"IN": data.copy()}, id="2")
    assert _key(a) == _key(b)


def test_a_strided_input_hashes_as_its_values() -> None:
    wide = np.arange(32, dtype=np.int32)
    assert _key(_req({"IN": wide[::2]})) == _key(_req({"IN": wide[::2].copy()}))


@pytest.mark.parametrize(
    "outputs",
    [
        None,
        [RequestedOutput("X")],
        [RequestedOutput("Y"), RequestedOutput("X")],
        [RequestedOutput("X", classification=2), RequestedOutput("Y")],
        [RequestedOutput("X", parameters={"k": "v"}), RequestedOutput("Y")],
    ],
)
def test_the_outputs_a_request_asks_for_are_no_part_of_its_key(
    outputs: list[RequestedOutput] | None,
) -> None:
    """An entry holds every raw output: any selection, order or class_count of the same
    inputs is shaped from it, as Triton's cache keys on the inputs alone."""
    data = {"A": np.array([[1, 2, 3, 4]], dtype=np.int32)}
    ref = _req(data, outputs=[RequestedOutput("X"), RequestedOutput("Y")])
    assert _key(ref) == _key(_req(dict(data), outputs=outputs))


@pytest.mark.parametrize(
    "change",
    [
        "model",
        "version",
        "epoch",
        "value",
        "dtype",
        "shape",
        "input_name",
        "param",
        "param_type",
        "bytes_split",
    ],
)
def test_every_field_that_changes_the_answer_changes_the_key(change: str) -> None:
    base = {"A": np.array([[1, 2, 3, 4]], dtype=np.int32)}
    ref = _req(base, outputs=[RequestedOutput("X"), RequestedOutput("Y")], parameters={"p": 1})
    name, version, epoch = "m", 1, 0
    other = _req(dict(base), outputs=list(ref.outputs or []), parameters=dict(ref.parameters))
    if change == "model":
        name = "n"
    elif change == "version":
        version = 2
    elif change == "epoch":
        epoch = 1
    elif change == "value":
        other.inputs["A"] = np.array([[1, 2, 3, 5]], dtype=np.int32)
    elif change == "dtype":
        other.inputs["A"] = np.array([[1, 2, 3, 4]], dtype=np.uint32)
    elif change == "shape":
        other.inputs["A"] = base["A"].reshape(2, 2)
    elif change == "input_name":
        other.inputs = {"B": base["A"]}
    elif change == "param":
        other.parameters = {"p": 2}
    elif change == "param_type":
        other.parameters = {"p": True}  # True == 1 in Python, not in a request
    elif change == "bytes_split":
        ref = _req({"S": np.array([b"ab", b"c"], dtype=np.object_)})
        other = _req({"S": np.array([b"a", b"bc"], dtype=np.object_)})
    assert _key(ref) != request_key(other, name, version, epoch)


_DTYPES = [np.dtype(t) for t in ("int8", "uint8", "int32", "float32", "float64", "bool")]
_params = st.dictionaries(
    st.sampled_from(["p", "q", "priority", "timeout", "custom"]),
    st.one_of(st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=3)),
    max_size=3,
)
_outputs = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.sampled_from(["X", "Y", "Z"]), st.integers(0, 3)),
        min_size=1,
        max_size=3,
        unique_by=lambda o: o[0],
    ),
)


@st.composite
def _requests(draw: st.DrawFn) -> tuple[Any, ...]:
    """A request as plain data: (model, version, inputs, outputs, parameters)."""
    inputs = {}
    for name in draw(st.lists(st.sampled_from(["A", "B", "AB"]), unique=True, max_size=2)):
        if draw(st.booleans()):
            dtype = draw(st.sampled_from(_DTYPES))
            shape = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=2)))
            count = int(np.prod(shape))
            raw = draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
            array = np.frombuffer(raw, dtype=np.uint8).copy()
            if dtype == np.bool_:
                array = array % 2
            inputs[name] = array.view(dtype).reshape(shape)
        else:
            items = draw(st.lists(st.binary(max_size=3), min_size=1, max_size=3))
            inputs[name] = np.array([*items, b""], dtype=np.object_)[:-1]
    return (
        draw(st.sampled_from(["m", "n"])),
        draw(st.integers(1, 2)),
        inputs,
        draw(_outputs),
        draw(_params),
    )


def _build(plain: tuple[Any, ...]) -> tuple[InferRequest, str, int]:
    model, version, inputs, outputs, params = plain
    wanted = None if outputs is None else [RequestedOutput(n, classification=c) for n, c in outputs]
    return _req(inputs, outputs=wanted, parameters=params), model, version


def _canonical(plain: tuple[Any, ...]) -> Any:
    """What decides the model's raw outputs, compared by value (the outputs a request asks
    for do not): two requests equal here must share a key."""
    model, version, inputs, _outputs, params = plain
    return (
        model,
        version,
        sorted(
            (n, a.dtype.str, a.shape, [bytes(x) for x in a] if a.dtype.hasobject else a.tobytes())
            for n, a in inputs.items()
        ),
        sorted(
            (k, type(v).__name__, v) for k, v in params.items() if k not in ("priority", "timeout")
        ),
    )


@settings(max_examples=300, deadline=None)
@given(_requests(), _requests())
def test_distinct_requests_never_share_a_key(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    ra, ma, va = _build(a)
    rb, mb, vb = _build(b)
    same = _canonical(a) == _canonical(b)
    assert (request_key(ra, ma, va) == request_key(rb, mb, vb)) == same


@settings(max_examples=100, deadline=None)
@given(_requests())
def test_a_request_always_has_the_same_key(a: tuple[Any, ...]) -> None:
    first, model, version = _build(a)
    second, _, _ = _build(a)
    assert request_key(first, model, version) == request_key(second, model, version)


# -- --cache-config ------------------------------------------------------------------------------


def test_the_local_cache_takes_its_size_in_bytes() -> None:
    assert parse_cache_config(["local,size=1048576"]) == 1048576
    assert parse_cache_config([]) is None


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["size=10"], "needs a cache name"),
        (["local"], "format is <cache>,<setting>=<value>"),
        (["local,size"], "format is <cache>,<setting>=<value>"),
        (["local,size="], "format is <cache>,<setting>=<value>"),
        (["redis,host=localhost"], "unknown cache 'redis'"),
        (["local,capacity=10"], "no setting 'capacity'"),
        (["local,size=ten"], "positive number of bytes"),
        (["local,size=0"], "positive number of bytes"),
        (["local,size=-5"], "positive number of bytes"),
        (["local,size=10", "other,size=10"], "unknown cache 'other'"),
    ],
)
def test_bad_cache_configs_are_refused_by_name(items: list[str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_cache_config(items)


def test_the_last_size_given_wins() -> None:
    assert parse_cache_config(["local,size=10", "local,size=20"]) == 20


# -- load-time checks ----------------------------------------------------------------------------


def _config(**fields: Any) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig(name="cached", **fields)
    config.response_cache.enable = True
    return config


def test_a_model_with_the_cache_loads_on_a_server_with_one() -> None:
    check_model_cache(_config(), server_cache=True)
    check_model_cache(model_config_pb2.ModelConfig(name="plain"), server_cache=False)


def test_a_model_with_the_cache_loads_uncached_on_a_server_without_one_with_a_warning() -> None:
    warning = check_model_cache(_config(), server_cache=False)
    assert warning is not None
    assert "model 'cached' enables response_cache" in warning
    assert "not cached" in warning
    assert "--cache-config local,size=" in warning
    assert check_model_cache(_config(), server_cache=True) is None


def test_sequence_and_decoupled_models_cannot_use_the_cache() -> None:
    seq = _config(sequence_batching=model_config_pb2.ModelSequenceBatching())
    with pytest.raises(ConfigError, match="sequence batcher"):
        check_model_cache(seq, server_cache=True)
    dec = _config()
    dec.model_transaction_policy.decoupled = True
    with pytest.raises(ConfigError, match="decoupled"):
        check_model_cache(dec, server_cache=True)


def test_extension_dtypes_are_hashed_and_told_apart() -> None:
    import ml_dtypes

    raw = np.arange(4, dtype=np.uint16)
    bf16 = _key(_req({"A": raw.view(ml_dtypes.bfloat16)}))
    fp16 = _key(_req({"A": raw.view(np.float16)}))
    i16 = _key(_req({"A": raw.view(np.int16)}))
    assert len({bf16, fp16, i16}) == 3
    assert bf16 == _key(_req({"A": raw.copy().view(ml_dtypes.bfloat16)}))
