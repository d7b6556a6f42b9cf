"""The ensemble graph checks: every structural and step-model error, and the step order."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.datatypes import from_config_name
from inferd.core.model_spec import EnsembleStepSpec, ModelSpec, TensorSpec
from inferd.errors import ConfigError
from inferd.scheduling.ensemble_graph import build_graph, check_step_models


def spec(text: str) -> ModelSpec:
    return spec_from_proto(parse_pbtxt(text, "test"))


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {ins} {outs} }}'


def ensemble(steps: list[str], *, inputs: str = "", outputs: str = "", mbs: int = 8) -> ModelSpec:
    inputs = inputs or '{ name: "RAW" data_type: TYPE_FP32 dims: [ 64 ] }'
    outputs = outputs or '{ name: "LABEL" data_type: TYPE_INT32 dims: [ 1 ] }'
    return spec(
        f'name: "pipe" platform: "ensemble" max_batch_size: {mbs} input [ {inputs} ] '
        f"output [ {outputs} ] ensemble_scheduling {{ step [ {', '.join(steps)} ] }}"
    )


def model(name: str, inputs: str, outputs: str, mbs: int = 8, extra: str = "") -> ModelSpec:
    return spec(
        f'name: "{name}" backend: "onnxruntime" max_batch_size: {mbs} input [ {inputs} ] '
        f"output [ {outputs} ] {extra}"
    )


SCALE = model(
    "scale",
    '{ name: "IN" data_type: TYPE_FP32 dims: [ 64 ] }',
    '{ name: "OUT" data_type: TYPE_FP32 dims: [ 64 ] }',
)
CLASSIFY = model(
    "classify",
    '{ name: "X" data_type: TYPE_FP32 dims: [ 64 ] }',
    '{ name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] }',
)
LABEL = model(
    "label",
    '{ name: "S" data_type: TYPE_FP32 dims: [ 10 ] }',
    '{ name: "TOP" data_type: TYPE_INT32 dims: [ 1 ] }',
)
MODELS = {m.name: m for m in (SCALE, CLASSIFY, LABEL)}

PIPELINE = [
    step("scale", {"IN": "RAW"}, {"OUT": "scaled"}),
    step("classify", {"X": "scaled"}, {"SCORES": "scores"}),
    step("label", {"S": "scores"}, {"TOP": "LABEL"}),
]


def test_a_three_step_chain_is_accepted_in_order() -> None:
    e = ensemble(PIPELINE)
    graph = build_graph(e)
    check_step_models(graph, e, MODELS)
    assert graph.order == (0, 1, 2)
    assert graph.depends_on == ((), (0,), (1,))
    assert graph.is_chain
    assert graph.composing_models() == ("scale", "classify", "label")


def test_steps_listed_out_of_order_are_ordered_by_their_data() -> None:
    graph = build_graph(ensemble(list(reversed(PIPELINE))))
    assert graph.order == (2, 1, 0)
    assert graph.is_chain


def test_independent_steps_make_a_graph_that_is_not_a_chain() -> None:
    e = ensemble(
        [
            step("scale", {"IN": "RAW"}, {"OUT": "a"}),
            step("scale", {"IN": "RAW"}, {"OUT": "b"}),
            step("join", {"A": "a", "B": "b"}, {"Y": "LABEL"}),
        ]
    )
    graph = build_graph(e)
    assert graph.order == (0, 1, 2)
    assert graph.depends_on[2] == (0, 1)
    assert not graph.is_chain


def error(exc: pytest.ExceptionInfo[BaseException]) -> str:
    return str(exc.value)


def test_a_cycle_is_named_step_by_step() -> None:
    e = ensemble(
        [
            step("scale", {"IN": "RAW"}, {"OUT": "unused_start"}),
            step("classify", {"X": "t2"}, {"SCORES": "t1"}),
            step("label", {"S": "t1"}, {"TOP": "t2"}),
            step("label", {"S": "unused_start"}, {"TOP": "LABEL"}),
        ]
    )
    with pytest.raises(ConfigError) as exc:
        build_graph(e)
    assert error(exc) == (
        "ensemble 'pipe' has a cycle: step 1 (model 'classify') -> step 2 (model 'label') -> "
        "step 1 (model 'classify') (each step reads a tensor the next one writes)"
    )


def test_a_tensor_mapped_from_nowhere() -> None:
    e = ensemble(
        [
            step("scale", {"IN": "RAW"}, {"OUT": "s"}),
            step("label", {"S": "ghost"}, {"TOP": "LABEL"}),
        ]
    )
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "in ensemble 'pipe', step 1 (model 'label') maps ensemble tensor 'ghost' to its input "
            "'S', but no step writes 'ghost' and it is not an input of the ensemble"
        ),
    ):
        build_graph(e)


def test_a_tensor_mapped_to_nothing() -> None:
    e = ensemble(
        [
            step("scale", {"IN": "RAW"}, {"OUT": "scaled"}),
            step("classify", {"X": "scaled"}, {"SCORES": "dangling"}),
            step("label", {"S": "scaled"}, {"TOP": "LABEL"}),
        ]
    )
    with pytest.raises(
        ConfigError,
        match="ensemble tensor 'dangling' written by step 1 "
        r"\(model 'classify'\) is unused",
    ):
        build_graph(e)


def test_an_ensemble_output_never_written() -> None:
    e = ensemble(PIPELINE[:2], outputs='{ name: "LABEL" data_type: TYPE_INT32 dims: [ 1 ] }')
    with pytest.raises(
        ConfigError, match="output 'LABEL' of ensemble 'pipe' is not written by any step"
    ):
        build_graph(e)


def test_an_unused_ensemble_input() -> None:
    e = ensemble(
        PIPELINE,
        inputs='{ name: "RAW" data_type: TYPE_FP32 dims: [ 64 ] }, '
        '{ name: "EXTRA" data_type: TYPE_FP32 dims: [ 1 ] }',
    )
    with pytest.raises(ConfigError, match="ensemble input 'EXTRA' of ensemble 'pipe' is not used"):
        build_graph(e)


def test_a_tensor_with_two_writers() -> None:
    e = ensemble(
        [
            step("scale", {"IN": "RAW"}, {"OUT": "x"}),
            step("scale", {"IN": "RAW"}, {"OUT": "x"}),
            step("label", {"S": "x"}, {"TOP": "LABEL"}),
        ]
    )
    with pytest.raises(ConfigError, match="ensemble tensor 'x' is written by both step 0"):
        build_graph(e)
    e = ensemble([step("scale", {"IN": "RAW"}, {"OUT": "RAW"})])
    with pytest.raises(ConfigError, match="writes ensemble tensor 'RAW', which is an input"):
        build_graph(e)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "must specify 'step' for ensemble 'pipe'"),
        (
            ['{ input_map { key: "IN" value: "RAW" } output_map { key: "O" value: "LABEL" } }'],
            "must specify 'model_name' in step 0 of ensemble 'pipe'",
        ),
        (
            ['{ model_name: "m" output_map { key: "O" value: "LABEL" } }'],
            "must specify 'input_map' in step 0 (model 'm') of ensemble 'pipe'",
        ),
        (
            ['{ model_name: "m" input_map { key: "IN" value: "RAW" } }'],
            "must specify 'output_map' in step 0 (model 'm') of ensemble 'pipe'",
        ),
    ],
)
def test_incomplete_steps(steps: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_graph(ensemble(steps))


def test_steps_on_a_model_that_is_not_an_ensemble_and_warmup() -> None:
    s = spec(
        'name: "m" backend: "onnxruntime" ensemble_scheduling { step [ ' + PIPELINE[0] + " ] }"
    )
    with pytest.raises(ConfigError, match="whose platform is not 'ensemble'"):
        build_graph(s)
    warm = spec(
        'name: "pipe" platform: "ensemble" model_warmup [ { name: "w" batch_size: 1 } ] '
        "ensemble_scheduling { step [ " + PIPELINE[0] + " ] }"
    )
    with pytest.raises(ConfigError, match="model_warmup can not be specified for ensemble 'pipe'"):
        build_graph(warm)


def check(e: ModelSpec, models: dict[str, ModelSpec]) -> None:
    check_step_models(build_graph(e), e, models)


def test_a_data_type_mismatch_between_steps() -> None:
    label = model(
        "label",
        '{ name: "S" data_type: TYPE_INT64 dims: [ 10 ] }',
        '{ name: "TOP" data_type: TYPE_INT32 dims: [ 1 ] }',
    )
    with pytest.raises(ConfigError) as exc:
        check(ensemble(PIPELINE), {**MODELS, "label": label})
    assert error(exc) == (
        "in ensemble 'pipe', ensemble tensor 'scores' has inconsistent data types: TYPE_FP32 "
        "from model 'classify' but TYPE_INT64 from model 'label'"
    )


def test_a_shape_mismatch_between_steps_and_with_the_ensemble() -> None:
    label = model(
        "label",
        '{ name: "S" data_type: TYPE_FP32 dims: [ 9 ] }',
        '{ name: "TOP" data_type: TYPE_INT32 dims: [ 1 ] }',
    )
    with pytest.raises(ConfigError) as exc:
        check(ensemble(PIPELINE), {**MODELS, "label": label})
    assert error(exc) == (
        "in ensemble 'pipe', ensemble tensor 'scores' has inconsistent shapes: [-1, 10] from "
        "model 'classify' but [-1, 9] from model 'label'"
    )
    with pytest.raises(
        ConfigError,
        match="ensemble tensor 'RAW' has inconsistent shapes: "
        r"\[-1, 63\] from model 'pipe'",
    ):
        check(
            ensemble(PIPELINE, inputs='{ name: "RAW" data_type: TYPE_FP32 dims: [ 63 ] }'), MODELS
        )


def test_variable_dims_and_a_non_batching_step_in_a_batching_ensemble_agree() -> None:
    label = model(
        "label",
        '{ name: "S" data_type: TYPE_FP32 dims: [ -1, 10 ] }',
        '{ name: "TOP" data_type: TYPE_INT32 dims: [ -1, 1 ] }',
        mbs=0,
    )
    check(ensemble(PIPELINE), {**MODELS, "label": label})


def test_unknown_step_inputs_and_outputs_and_unmapped_inputs() -> None:
    bad_in = ensemble([step("scale", {"NOPE": "RAW"}, {"OUT": "scaled"}), *PIPELINE[1:]])
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "in ensemble 'pipe', step 0 (model 'scale') maps ensemble tensor 'RAW' to input "
            "'NOPE', which model 'scale' does not have (its inputs: IN)"
        ),
    ):
        check(bad_in, MODELS)
    bad_out = ensemble([step("scale", {"IN": "RAW"}, {"NOPE": "scaled"}), *PIPELINE[1:]])
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "step 0 (model 'scale') maps output 'NOPE' to ensemble tensor 'scaled', but model "
            "'scale' has no such output (its outputs: OUT)"
        ),
    ):
        check(bad_out, MODELS)
    two = model(
        "classify",
        '{ name: "X" data_type: TYPE_FP32 dims: [ 64 ] }, '
        '{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }',
        '{ name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] }',
    )
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "in ensemble 'pipe', input 'Y' of model 'classify' (step 1 (model 'classify')) is not "
            "mapped to any ensemble tensor"
        ),
    ):
        check(ensemble(PIPELINE), {**MODELS, "classify": two})


def test_a_step_model_with_a_smaller_max_batch_size_or_decoupled() -> None:
    small = model(
        "classify",
        '{ name: "X" data_type: TYPE_FP32 dims: [ 64 ] }',
        '{ name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] }',
        mbs=4,
    )
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "ensemble 'pipe' allows max_batch_size 8, but its step 1 (model 'classify') allows "
            "only 4"
        ),
    ):
        check(ensemble(PIPELINE), {**MODELS, "classify": small})
    streaming = model(
        "label",
        '{ name: "S" data_type: TYPE_FP32 dims: [ 10 ] }',
        '{ name: "TOP" data_type: TYPE_INT32 dims: [ 1 ] }',
        extra="model_transaction_policy { decoupled: true }",
    )
    check(ensemble(PIPELINE), {**MODELS, "label": streaming})  # served, as Triton does
    cached = dataclasses.replace(ensemble(PIPELINE), response_cache=True)
    with pytest.raises(
        ConfigError,
        match="the response cache does not support ensemble 'pipe': its step 2 \\(model "
        "'label'\\) calls a decoupled model",
    ):
        check(cached, {**MODELS, "label": streaming})


def test_a_cached_ensemble_refuses_a_sequence_step() -> None:
    stateful = model(
        "classify",
        '{ name: "X" data_type: TYPE_FP32 dims: [ 64 ] }',
        '{ name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] }',
        extra="sequence_batching { }",
    )
    cached = dataclasses.replace(ensemble(PIPELINE), response_cache=True)
    with pytest.raises(
        ConfigError,
        match="the response cache does not support ensemble 'pipe': its step 1 \\(model "
        "'classify'\\) calls a model with the sequence batcher",
    ):
        check(cached, {**MODELS, "classify": stateful})
    check(ensemble(PIPELINE), {**MODELS, "classify": stateful})  # uncached: served
    check(cached, MODELS)


# -- property: random acyclic graphs ------------------------------------------------------------

FP32 = from_config_name("TYPE_FP32")


@st.composite
def acyclic_ensembles(draw: st.DrawFn) -> tuple[ModelSpec, list[set[int]]]:
    """An ensemble whose steps form a random DAG, listed in a random order, and each step's
    dependencies (by position in the listed order)."""
    count = draw(st.integers(1, 8))
    deps = [
        set(draw(st.sets(st.integers(0, i - 1), max_size=i))) if i else set() for i in range(count)
    ]
    read: set[int] = set().union(*deps)
    listed = draw(st.permutations(range(count)))
    position = {node: pos for pos, node in enumerate(listed)}
    steps: list[EnsembleStepSpec] = []
    for node in listed:
        inputs = {f"I{d}": f"t{d}" for d in sorted(deps[node])}
        if not deps[node] or node == 0:
            inputs["RAW"] = "RAW"
        steps.append(EnsembleStepSpec(f"m{node}", None, inputs, {"OUT": f"t{node}"}))
    outputs = tuple(TensorSpec(f"t{n}", FP32, (1,)) for n in range(count) if n not in read)
    e = ModelSpec(
        name="dag",
        platform="ensemble",
        backend="",
        max_batch_size=0,
        inputs=(TensorSpec("RAW", FP32, (1,)),),
        outputs=outputs,
        instance_groups=(),
        parameters={},
        default_model_filename="",
        is_ensemble=True,
        ensemble_steps=tuple(steps),
    )
    return e, [{position[d] for d in deps[node]} for node in listed]


@settings(max_examples=200, deadline=None)
@given(acyclic_ensembles())
def test_random_acyclic_graphs_are_accepted_and_ordered_by_their_dependencies(
    case: tuple[ModelSpec, list[set[int]]],
) -> None:
    e, deps = case
    graph = build_graph(e)
    assert sorted(graph.order) == list(range(len(e.ensemble_steps)))
    assert [set(d) for d in graph.depends_on] == deps
    done: set[int] = set()
    for index in graph.order:
        assert set(graph.depends_on[index]) <= done
        done.add(index)
