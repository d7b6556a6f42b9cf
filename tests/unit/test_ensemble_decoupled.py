"""Decoupled steps in an ensemble: which steps run per response of which decoupled step, and the
graphs refused at load (a step reading tensors of two decoupled origins, as Triton refuses it;
outputs of different origins, which inferd does not pair)."""

from __future__ import annotations

import re

import pytest

from inferd.core.model_spec import ModelSpec
from inferd.errors import ConfigError, UnsupportedError
from inferd.scheduling.ensemble_decoupled import trace_origins
from inferd.scheduling.ensemble_graph import build_graph
from tests.unit.test_ensemble_graph import ensemble, model, step

FP32 = '{{ name: "{}" data_type: TYPE_FP32 dims: [ 64 ] }}'


def unary(name: str, *, decoupled: bool = False) -> ModelSpec:
    extra = "model_transaction_policy { decoupled: true }" if decoupled else ""
    return model(name, FP32.format("X"), FP32.format("Y"), mbs=0, extra=extra)


def pair(name: str) -> ModelSpec:
    inputs = f"{FP32.format('A')}, {FP32.format('B')}"
    return model(name, inputs, FP32.format("Y"), mbs=0)


MODELS = {
    "pre": unary("pre"),
    "burst": unary("burst", decoupled=True),
    "other_burst": unary("other_burst", decoupled=True),
    "post": unary("post"),
    "join": pair("join"),
}


def pipeline(steps: list[str], outputs: tuple[str, ...] = ("OUT",)) -> ModelSpec:
    return ensemble(
        steps,
        inputs=FP32.format("RAW"),
        outputs=", ".join(FP32.format(o) for o in outputs),
        mbs=0,
    )


def test_steps_after_a_decoupled_step_run_per_response() -> None:
    e = pipeline(
        [
            step("pre", {"X": "RAW"}, {"Y": "a"}),
            step("burst", {"X": "a"}, {"Y": "b"}),
            step("post", {"X": "b"}, {"Y": "OUT"}),
        ]
    )
    origins = trace_origins(build_graph(e), MODELS)
    assert origins.decoupled
    assert origins.steps == ((0,), (2,))  # pre once per request, post once per response
    assert origins.children == ((1,), ())
    assert origins.opens == {1: 1}
    assert origins.output == 1


def test_an_ensemble_without_decoupled_steps_is_not_decoupled() -> None:
    e = pipeline([step("pre", {"X": "RAW"}, {"Y": "a"}), step("post", {"X": "a"}, {"Y": "OUT"})])
    assert not trace_origins(build_graph(e), MODELS).decoupled


def test_a_step_reading_two_decoupled_origins_is_refused() -> None:
    e = pipeline(
        [
            step("burst", {"X": "RAW"}, {"Y": "a"}),
            step("other_burst", {"X": "RAW"}, {"Y": "b"}),
            step("join", {"A": "a", "B": "b"}, {"Y": "OUT"}),
        ]
    )
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "in ensemble 'pipe', step 2 (model 'join') receives inputs originated from "
            "different decoupled models"
        ),
    ):
        trace_origins(build_graph(e), MODELS)
    # once per request and per response do not mix either
    mixed = pipeline(
        [
            step("burst", {"X": "RAW"}, {"Y": "a"}),
            step("join", {"A": "a", "B": "RAW"}, {"Y": "OUT"}),
        ]
    )
    with pytest.raises(ConfigError, match="receives inputs originated from different"):
        trace_origins(build_graph(mixed), MODELS)


def test_outputs_of_different_origins_are_refused() -> None:
    e = pipeline(
        [
            step("pre", {"X": "RAW"}, {"Y": "ONCE"}),
            step("burst", {"X": "RAW"}, {"Y": "MANY"}),
        ],
        outputs=("ONCE", "MANY"),
    )
    with pytest.raises(
        UnsupportedError,
        match=re.escape(
            "ensemble 'pipe' has outputs of different origins: 'ONCE' (once per request), "
            "'MANY' (per response of step 1 (model 'burst'))"
        ),
    ):
        trace_origins(build_graph(e), MODELS)
