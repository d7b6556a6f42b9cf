"""Ceilings on what a model configuration may make the server build (repository/ceilings.py):
a load request's configuration is refused above any of them, the repository's own is honoured
with a warning above the soft ones."""

from __future__ import annotations

import logging

import pytest

from inferd.codecs.model_config import ModelConfig, parse_pbtxt
from inferd.errors import ConfigError
from inferd.repository.ceilings import (
    MAX_BATCH_SIZE,
    MAX_PREFERRED_BATCH_SIZES,
    MAX_PRIORITY_LEVELS,
    MAX_QUEUE_SIZE,
    MAX_SEQUENCE_SLOTS,
    THREADS_PER_CORE,
    check_ceilings,
    default_max_threads,
    thread_parameters,
)

BASE = 'name: "m" platform: "onnxruntime_onnx" max_batch_size: 8 '


def _config(text: str) -> ModelConfig:
    return parse_pbtxt(BASE + text, "test")


def _params(**values: str) -> str:
    return " ".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in values.items()
    )


def _check(config: ModelConfig, *, from_request: bool, max_threads: int = 16) -> None:
    check_ceilings(config, max_instances=64, max_threads=max_threads, from_request=from_request)


def test_the_default_thread_ceiling_follows_the_cores() -> None:
    assert default_max_threads(3) == 3 * THREADS_PER_CORE
    assert default_max_threads() >= THREADS_PER_CORE


def test_thread_parameters_are_found_by_name() -> None:
    config = _config(
        _params(
            intra_op_thread_count="4",
            INFERENCE_NUM_THREADS="8",
            NUM_STREAMS="2",
            cpu_nthread="-1",  # FIL: all cores, sized by the runtime
            threads_per_tree="32",  # a GPU kernel's shape, not threads
            inter_op_thread_count="auto",  # not a number: the runtime refuses it
            execution_mode="1",
        )
    )
    assert thread_parameters(config) == {
        "intra_op_thread_count": 4,
        "INFERENCE_NUM_THREADS": 8,
        "NUM_STREAMS": 2,
    }


def test_threads_times_instances_pass_the_ceiling_in_a_load_request() -> None:
    config = _config(
        "instance_group [{ count: 2 kind: KIND_CPU }] " + _params(intra_op_thread_count="2000")
    )
    with pytest.raises(ConfigError) as info:
        _check(config, from_request=True)
    assert str(info.value) == (
        "model 'm': parameter 'intra_op_thread_count' asks for 2000 threads on each of 2 "
        "instance(s) (4000 in all), more than the 16 a load request's configuration may ask "
        "for; the server allows more with --model-max-threads (default 4 per core this process "
        "may use), or set it in the model's config.pbtxt in the repository instead (the "
        "operator's configuration may pass this ceiling; the server logs a warning)"
    )
    within = _config("instance_group [{ count: 2 }] " + _params(intra_op_thread_count="8"))
    _check(within, from_request=True)  # 16 in all: at the ceiling
    over = _config("instance_group [{ count: 3 }] " + _params(intra_op_thread_count="8"))
    with pytest.raises(ConfigError, match=r"8 threads on each of 3 instance\(s\) \(24 in all\)"):
        _check(over, from_request=True)


def test_the_repository_may_pass_the_soft_ceilings_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = _config(
        "instance_group [{ count: 2 }] "
        + _params(intra_op_thread_count="100")
        + " dynamic_batching { default_queue_policy { max_queue_size: 100000 } }"
    )
    with caplog.at_level(logging.WARNING, logger="inferd.repository"):
        _check(config, from_request=False)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2
    assert "parameter 'intra_op_thread_count' asks for 100 threads" in warned[0]
    assert "honoured, as the repository's own configuration" in warned[0]
    assert "max_queue_size asks for 100000, more than the 65536" in warned[1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            f"max_batch_size: {MAX_BATCH_SIZE + 1}",
            f"max_batch_size asks for {MAX_BATCH_SIZE + 1}, more than the {MAX_BATCH_SIZE}",
        ),
        (
            "dynamic_batching { preferred_batch_size: ["
            + ", ".join(["1"] * (MAX_PREFERRED_BATCH_SIZES + 1))
            + "] }",
            f"dynamic_batching.preferred_batch_size asks for {MAX_PREFERRED_BATCH_SIZES + 1} sizes",
        ),
        (
            "dynamic_batching { priority_levels: 2 priority_queue_policy { key: 2 value: { "
            f"max_queue_size: {MAX_QUEUE_SIZE + 1} }} }} }}",
            "dynamic_batching.priority_queue_policy[2].max_queue_size asks for 65537",
        ),
    ],
)
def test_soft_ceilings_refuse_a_load_request(text: str, message: str) -> None:
    config = parse_pbtxt(BASE.replace("max_batch_size: 8 ", "") + text, "test")
    if not config.max_batch_size:
        config.max_batch_size = 8
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _check(config, from_request=True)
    _check(config, from_request=False)


@pytest.mark.parametrize("from_request", [True, False], ids=["request", "repository"])
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "instance_group [{ count: 40 }, { count: 30 }]",
            "instance_group asks for 70 instances, more than the 64 .* may ask for; the server "
            "allows more with --model-max-instances",
        ),
        (
            f"dynamic_batching {{ priority_levels: {MAX_PRIORITY_LEVELS + 1} }}",
            f"priority_levels asks for {MAX_PRIORITY_LEVELS + 1} levels, more than the "
            f"{MAX_PRIORITY_LEVELS} .*; this bound is fixed",
        ),
        (
            "instance_group [{ count: 64 }] sequence_batching { oldest { "
            "max_candidate_sequences: 2048 } }",
            f"sequence_batching asks for {64 * 2048} sequence slots \\(2048 on each of 64 "
            f"instance\\(s\\)\\), more than the {MAX_SEQUENCE_SLOTS} .*max_candidate_sequences",
        ),
    ],
)
def test_hard_ceilings_hold_for_every_configuration(
    text: str, message: str, from_request: bool
) -> None:
    with pytest.raises(ConfigError, match=message):
        _check(_config(text), from_request=from_request)


def test_a_plain_configuration_passes() -> None:
    config = _config(
        "instance_group [{ count: 4 }] dynamic_batching { preferred_batch_size: [4, 8] "
        "priority_levels: 3 default_queue_policy { max_queue_size: 1000 } }"
    )
    _check(config, from_request=True)
