"""The one batch execution path of every runtime (``inferd.backends.execution``): a batch is
split only when a request's content is at fault, a fault fails the batch without running the
model again, every request gets its own error object, and both are logged."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from inferd.backends.base import ExecutionTimes
from inferd.backends.batching import StackingInstance, as_error, split_outputs
from inferd.backends.execution import RetryPolicy, each_request, run_batch
from inferd.backends.tabular import TabularInstance, TabularIO
from inferd.core.datatypes import from_name
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.errors import InferdError, InternalError, InvalidInputError, UnavailableError

Array = np.ndarray[Any, Any]


class Calls:
    """A model that counts its runs: fails on a row holding -1 (the request's content) or 13
    (a fault of the model)."""

    def __init__(self) -> None:
        self.runs: list[int] = []

    def __call__(self, rows: Array) -> Array:
        self.runs.append(len(rows))
        if (rows == 13).any():
            raise InternalError("the model broke")
        if (rows == -1).any():
            raise InvalidInputError("-1 is not a value")
        return rows * 2


def _run(values: Sequence[int], model: Calls, *, policy: RetryPolicy | None = None) -> list[Any]:
    items = [np.array([[v]]) for v in values]

    def stacked(batch: Sequence[Array]) -> list[Array]:
        return list(model(np.concatenate(batch)))

    return run_batch(
        items,
        stacked=stacked,
        alone=model,
        answer=as_error,
        ids=lambda: [f"r{i}" for i in range(len(items))],
        model="m",
        **({"policy": policy} if policy else {}),
    )


def test_a_request_at_fault_splits_the_batch_and_the_split_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = Calls()
    with caplog.at_level(logging.DEBUG, logger="inferd.backends.execution"):
        results = _run([1, -1, 2], model)
    assert model.runs == [3, 1, 1, 1]  # the batch, then each request alone
    assert isinstance(results[1], InvalidInputError)
    assert [int(np.asarray(results[i]).item()) for i in (0, 2)] == [2, 4]
    [split] = caplog.records
    assert split.levelno == logging.DEBUG
    assert "batch of 3 requests" in split.getMessage()
    assert "running each request alone" in split.getMessage()


def test_a_fault_fails_the_batch_once_without_running_it_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = Calls()
    with caplog.at_level(logging.DEBUG, logger="inferd.backends.execution"):
        results = _run([1, 13, 2], model)
    assert model.runs == [3]
    assert all(isinstance(r, InternalError) and r.message == "the model broke" for r in results)
    assert len({id(r) for r in results}) == 3
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert "model 'm' failed 3 requests ('r0', 'r1', 'r2')" in record.getMessage()


def test_a_fault_of_a_request_run_alone_is_logged_with_its_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = Calls()
    with caplog.at_level(logging.ERROR, logger="inferd.backends.execution"):
        results = run_batch(
            [np.array([[13]])],
            stacked=None,
            alone=model,
            answer=as_error,
            ids=lambda: ["x"],
            model="m",
        )
    assert isinstance(results[0], InternalError)
    [record] = caplog.records
    assert "request 'x'" in record.getMessage()


def test_what_the_policy_does_not_catch_propagates() -> None:
    def broken(rows: Array) -> Array:
        raise KeyError("a bug in inferd")

    with pytest.raises(KeyError):
        run_batch(
            [1, 2], stacked=None, alone=broken, answer=as_error, ids=lambda: ["", ""], model="m"
        )


def test_a_policy_names_the_errors_that_split() -> None:
    model = Calls()
    never = RetryPolicy(per_request=())
    results = _run([1, -1], model, policy=never)
    assert model.runs == [2]
    assert all(isinstance(r, InvalidInputError) for r in results)


def test_each_request_gets_its_own_error_object() -> None:
    try:
        raise UnavailableError("unloading") from OSError("gone")
    except UnavailableError as caught:
        first = caught
    errors = each_request(first, 3)
    assert errors[0] is first
    assert len({id(e) for e in errors}) == 3
    assert all(type(e) is UnavailableError and e.message == "unloading" for e in errors)
    assert all(isinstance(e.__cause__, OSError) for e in errors)
    assert all(e.__traceback__ is None for e in errors[1:])

    class Odd(Exception):  # an exception whose constructor does not take its args back
        def __init__(self, a: int, b: int) -> None:
            super().__init__(f"{a}/{b}")

    assert [str(e) for e in each_request(Odd(1, 2), 2)] == ["1/2", "1/2"]


# -- the runtimes' execute ----------------------------------------------------------------------


SPEC = ModelSpec("m", "", "test", 8, (), (), (), {}, "")


class _Doubler(StackingInstance[dict[str, Array]]):
    """A tensor runtime over ``Calls``: Y = 2 X."""

    def __init__(self, model: Calls) -> None:
        self._spec = SPEC
        self._batched = True
        self._output_names = ["Y"]
        self._model = model

    def _feeds(self, inputs: dict[str, Array]) -> dict[str, Array]:
        return inputs

    def run(self, feeds: dict[str, Array], output_names: list[str]) -> dict[str, Array]:
        return {"Y": self._model(feeds["X"])}


def _requests(*values: int) -> list[InferRequest]:
    return [InferRequest("m", {"X": np.array([[v]], np.float32)}, id=f"r{v}") for v in values]


def test_stacking_runtimes_give_each_request_of_a_failed_batch_its_own_error() -> None:
    model = Calls()
    results = _Doubler(model).execute(_requests(1, 13, 2))
    assert model.runs == [3]
    assert all(isinstance(r, InternalError) for r in results)
    assert len({id(r) for r in results}) == 3


def test_stacked_outputs_that_lose_the_batch_dimension_fail_the_batch() -> None:
    class Summing(_Doubler):
        def run(self, feeds: dict[str, Array], output_names: list[str]) -> dict[str, Array]:
            self._model.runs.append(len(feeds["X"]))
            return {"Y": feeds["X"].sum(axis=0, keepdims=True)}

    model = Calls()
    results = Summing(model).execute(_requests(1, 2))
    assert model.runs == [2]
    assert all(isinstance(r, InternalError) and "batch dimension" in r.message for r in results)


def _tabular(model: Calls) -> TabularInstance:
    fp32 = from_name("FP32")
    io = TabularIO(TensorSpec("X", fp32, (1,)), TensorSpec("Y", fp32, (1,)), batched=True)
    return TabularInstance("m", io, model, num_features=1, runtime="a library")


def test_tabular_runtimes_run_a_faulty_batch_once() -> None:
    model = Calls()
    times = ExecutionTimes()
    results = _tabular(model).execute_timed(_requests(1, 13, 2), times)
    assert model.runs == [3]
    assert all(isinstance(r, InternalError) for r in results)
    assert len({id(r) for r in results}) == 3


def test_tabular_runtimes_split_on_content_and_name_the_library() -> None:
    def library(rows: Array) -> Array:
        if (rows < 0).any():
            raise ValueError("negative rows")
        return rows

    instance = _tabular(Calls())
    instance._predict = library
    ok, bad = instance.execute(_requests(1, -1))
    assert not isinstance(ok, InferdError)
    assert isinstance(bad, InvalidInputError)
    assert bad.message == "inference request to model 'm' failed in a library: negative rows"


def test_split_outputs_cuts_views_by_rows() -> None:
    y = np.arange(12).reshape(6, 2)
    parts = split_outputs({"Y": y, "Z": y[:, :1]}, [1, 3, 2], "m")
    assert [p["Y"].shape[0] for p in parts] == [1, 3, 2]
    assert parts[1]["Z"].tolist() == [[2], [4], [6]]
    assert all(np.shares_memory(p["Y"], y) for p in parts)
