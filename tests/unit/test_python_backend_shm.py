"""The shared-memory arena of Python model instances: layout, every datatype, growth, limits."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.python import shm
from inferd.backends.python import triton_python_backend_utils as pb_utils
from inferd.backends.python.server import transfer
from inferd.core import datatypes
from inferd.errors import InvalidInputError, OverloadedError


def _ours() -> set[str]:
    return {n for n in os.listdir(shm.SHM_DIR) if n.startswith(f"{shm.PREFIX}{os.getpid()}-")}


@pytest.fixture
def arena() -> Iterator[shm.Arena]:
    before = _ours()
    made = shm.Arena.create(1 << 20, tag="unit")
    try:
        yield made
    finally:
        made.close()
        assert _ours() == before  # nothing leaked


def _sample(dt: datatypes.DataType, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    count = int(np.prod(shape))
    if dt.is_bytes:
        out = np.empty(count, dtype=object)
        out[:] = [b"", b"\x00binary\xff", "héllo".encode(), b"x" * 300][:count] + [b"z"] * max(
            0, count - 4
        )
        return out.reshape(shape)
    if dt.name == "BOOL":
        return (np.arange(count) % 3 == 0).reshape(shape)
    return np.arange(count).astype(dt.dtype).reshape(shape)


@pytest.mark.parametrize("dt", datatypes.ALL, ids=lambda d: d.name)
def test_every_datatype_round_trips(arena: shm.Arena, dt: datatypes.DataType) -> None:
    array = _sample(dt, (2, 3))
    staged = shm.stage("T", array)
    ref = shm.write(arena, staged, 128)
    assert (ref.datatype, ref.shape, ref.offset) == (dt.name, (2, 3), 128)
    again = shm.TensorRef.from_wire(ref.to_wire())
    got = shm.read(arena, again, copy=True)
    assert (got.dtype, got.shape) == (array.dtype, array.shape)
    assert got.tolist() == array.tolist()


def test_fixed_size_reads_are_zero_copy_views(arena: shm.Arena) -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    ref = shm.write(arena, shm.stage("X", array), 0)
    view = shm.read(arena, ref, copy=False)
    copied = shm.read(arena, ref, copy=True)
    arena.buffer[0:4] = np.float32(42).tobytes()  # the other process writes...
    assert view[0, 0] == 42  # ...and the view sees it: no copy was made
    assert copied[0, 0] == 0
    del view
    assert arena.close()  # no view left: unmapped


def test_bytes_use_triton_length_prefixed_serialisation() -> None:
    data = shm.serialize_bytes(np.array([b"ab", "c", 7], dtype=object))
    assert data == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c\x01\x00\x00\x007"
    back = shm.deserialize_bytes(memoryview(data), 3)
    assert back.tolist() == [b"ab", b"c", b"7"]


def test_layout_aligns_every_tensor() -> None:
    items = [shm.stage(f"T{i}", np.zeros(n, dtype=np.uint8)) for i, n in enumerate((1, 64, 65, 0))]
    offsets, end = shm.layout(items, start=10)
    assert offsets == [64, 128, 192, 320]
    assert all(o % shm.ALIGNMENT == 0 for o in offsets)
    assert end == 320


def test_write_past_the_end_is_refused(arena: shm.Arena) -> None:
    big = shm.stage("BIG", np.zeros(arena.size, dtype=np.uint8))
    with pytest.raises(OverloadedError, match="does not fit"):
        shm.write(arena, big, 64)


def test_policy_doubles_until_it_fits() -> None:
    policy = shm.ArenaPolicy(initial_bytes=1 << 20, max_bytes=1 << 30)
    assert policy.next_size(1 << 20, (1 << 20) + 1) == 2 << 20
    assert policy.next_size(16 << 20, 100 << 20) == 128 << 20
    assert policy.next_size(16 << 20, 1000 << 20) == 1 << 30  # capped, still fits


def test_policy_refuses_over_the_cap_naming_both_sizes() -> None:
    policy = shm.ArenaPolicy(initial_bytes=1 << 20, max_bytes=8 << 20)
    with pytest.raises(OverloadedError, match=r"needs 9\.0 MiB .* at most 8\.0 MiB"):
        policy.next_size(1 << 20, 9 << 20)


def test_policy_is_bounded_by_free_shared_memory() -> None:
    free = shm.shm_free_bytes()
    limit = shm.ArenaPolicy().limit(0)
    assert 0 < limit <= free
    with pytest.raises(OverloadedError, match="shared memory"):
        shm.ArenaPolicy().next_size(1 << 20, free + 1)


def test_attach_sees_the_creators_bytes_and_only_the_creator_unlinks() -> None:
    before = _ours()
    owner = shm.Arena.create(4096, tag="attach")
    other = shm.Arena.attach(owner.path, owner.size)
    ref = shm.write(owner, shm.stage("X", np.arange(4, dtype=np.int64)), 0)
    assert shm.read(other, ref, copy=True).tolist() == [0, 1, 2, 3]
    assert other.close()
    assert Path(owner.path).exists()  # attaching side never unlinks
    assert owner.close()
    assert not Path(owner.path).exists()
    assert _ours() == before


def test_a_pinned_mapping_is_unlinked_and_freed_later() -> None:
    owner = shm.Arena.create(4096, tag="pinned")
    ref = shm.write(owner, shm.stage("X", np.ones(8, dtype=np.int32)), 0)
    view = shm.read(owner, ref, copy=False)
    assert not owner.close()  # a view pins the mapping...
    assert not Path(owner.path).exists()  # ...but the name is gone already
    assert view.sum() == 8
    del view
    assert owner.close()


def test_creating_more_than_the_filesystem_holds_fails_clearly(tmp_path: Path) -> None:
    free = shm.shm_free_bytes()
    before = _ours()
    with pytest.raises(OverloadedError, match="cannot allocate"):
        shm.Arena.create(free + (1 << 30), tag="huge")
    assert _ours() == before


def test_locate_recognises_views_of_the_input_span_only(arena: shm.Arena) -> None:
    ref = shm.write(arena, shm.stage("X", np.arange(16, dtype=np.float32)), 128)
    view = shm.read(arena, ref, copy=False)
    assert shm.locate(arena, "Y", view[4:], 128, 192) == shm.TensorRef("Y", "FP32", (12,), 144, 48)
    assert shm.locate(arena, "Y", view, 0, 128) is None  # outside the window
    assert shm.locate(arena, "Y", view[::2], 128, 192) is None  # not contiguous
    assert shm.locate(arena, "Y", view.copy(), 0, arena.size) is None  # not in the arena
    del view


def test_lent_spans_come_back_when_their_views_are_released(arena: shm.Arena) -> None:
    space = transfer.ArenaSpace(arena)
    assert space.largest_free() == (0, arena.size)
    holder = space.lend(0, 1000)
    outputs = [holder[0:400].view(np.float32), holder[448:1000]]
    del holder
    assert space.largest_free() == (shm.align(1000), arena.size)
    second = space.lend(shm.align(1000), arena.size - 64)
    assert space.largest_free() == (arena.size - 64, arena.size)
    del outputs  # the first span is free again once its last view is gone
    assert space.largest_free() == (0, shm.align(1000))
    del second
    assert space.largest_free() == (0, arena.size)
    assert not space.lent_spans()


@pytest.mark.parametrize("datatype", ["FP32", "BYTES", "BOOL"])
def test_zero_element_tensors_need_no_arena(datatype: str) -> None:
    ref = shm.TensorRef("OUT", datatype, (2, 0, 3), 0, 0)
    got = shm.read_any(None, ref, copy=True)
    assert got.shape == (2, 0, 3)
    assert got.dtype == (np.object_ if datatype == "BYTES" else datatypes.from_name(datatype).dtype)


def test_a_tensor_with_bytes_but_no_arena_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="'OUT' came without a shared-memory arena"):
        shm.read_any(None, shm.TensorRef("OUT", "FP32", (1,), 0, 4), copy=True)
    with pytest.raises(InvalidInputError, match=r"'OUT' of shape \[1\] has 0 bytes"):
        shm.empty(shm.TensorRef("OUT", "FP32", (1,), 0, 0))


def test_using_decoupled_model_transaction_policy_reads_the_config() -> None:
    decoupled = pb_utils.using_decoupled_model_transaction_policy
    assert decoupled({"model_transaction_policy": {"decoupled": True}}) is True
    assert decoupled({"model_transaction_policy": {"decoupled": False}}) is False
    assert decoupled({"model_transaction_policy": {}}) is False
    assert decoupled({"name": "m"}) is False
