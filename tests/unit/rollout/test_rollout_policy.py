"""The traffic policy schema: every field parsed, every wrong field refused in one line that
names it, and a policy written back (``as_dict``) parses to itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferd.errors import InvalidArgumentError
from inferd.rollout.policy import (
    DEFAULT_STAGES,
    CanarySpec,
    FeedbackSpec,
    Policy,
    Target,
    parse_policy,
    parse_policy_text,
)

SPLIT = {
    "kind": "split",
    "variants": [{"name": "a", "version": 1, "weight": 9}, {"version": 2, "weight": 1}],
}
SHADOW = {"kind": "shadow", "shadow": {"version": 2}}
BANDIT = {"kind": "bandit", "variants": [{"version": 1}, {"version": 2}]}
CANARY = {"kind": "canary", "primary": {"version": 1}, "candidate": {"version": 2}}


def _error(data: Any) -> str:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_policy(data)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_split_policy() -> None:
    policy = parse_policy(SPLIT)
    assert policy.kind == "split"
    assert policy.names == ("a", "v2")
    assert [v.weight for v in policy.variants] == [9.0, 1.0]
    assert policy.variants[1].target == Target(None, 2)
    assert policy.feedback is None
    assert policy.sticky_key is None


def test_a_shadow_policy_defaults_to_the_latest_version_as_primary() -> None:
    policy = parse_policy(SHADOW)
    assert policy.names == ("latest", "v2")
    assert policy.variants[0].target == Target(None, None)
    assert policy.shadow.sample == 1.0
    assert policy.shadow.max_in_flight == 16
    assert policy.shadow.log_payloads is False
    assert (policy.shadow.batch, policy.shadow.batch_delay_ms) == (8, 20.0)
    assert parse_policy({**CANARY, "max_disagreement": 0.1}).shadow.batch == 1  # judged at once


def test_a_bandit_takes_binary_feedback_by_default() -> None:
    policy = parse_policy(BANDIT)
    assert policy.feedback == FeedbackSpec()
    assert policy.min_share == 0.0


def test_a_canary_policy_has_default_stages() -> None:
    policy = parse_policy(CANARY)
    assert policy.canary == CanarySpec()
    assert policy.canary.stages == DEFAULT_STAGES
    assert policy.names == ("v1", "v2")


def test_another_model_as_a_variant() -> None:
    policy = parse_policy(
        {"kind": "shadow", "shadow": {"model": "digits_v2"}, "primary": {"version": 3}}
    )
    assert policy.variants[1].target == Target("digits_v2", None)
    assert policy.names == ("v3", "digits_v2")
    named = parse_policy({"kind": "shadow", "shadow": {"model": "other", "version": 2}})
    assert named.names == ("latest", "other:v2")
    assert named.variants[1].target.resolve("mine") == ("other", 2)
    assert named.variants[0].target.resolve("mine") == ("mine", None)


@pytest.mark.parametrize(
    "data",
    [
        SPLIT,
        SHADOW,
        BANDIT,
        CANARY,
        {
            **CANARY,
            "stages": [0.2, 1],
            "min_requests": 5,
            "max_error_rate": 0,
            "max_latency_ratio": 2,
            "max_p99_ms": 30,
            "max_disagreement": 0.1,
            "auto_promote": False,
            "sticky_key": "user",
            "feedback": {"reward": "continuous", "ttl_s": 60, "max_ids": 10},
            "compare": {"outputs": ["label"], "atol": 0.01, "rtol": 0},
            "max_in_flight": 2,
            "batch": 1,
            "seed": 7,
        },
        {
            **SHADOW,
            "sample": 0.25,
            "log_payloads": True,
            "compare": {"outputs": ["y"]},
            "batch": 32,
            "batch_delay_ms": 0,
        },
        {**BANDIT, "min_share": 0.1, "feedback": {"reward": "continuous"}},
        {**SPLIT, "sticky_key": "user", "feedback": {}},
    ],
)
def test_a_policy_written_back_parses_to_itself(data: dict[str, Any]) -> None:
    policy = parse_policy(data)
    again = parse_policy(policy.as_dict())
    assert again == policy
    assert isinstance(again, Policy)


def test_yaml_text() -> None:
    policy = parse_policy_text(
        "kind: split\nvariants:\n  - {version: 1, weight: 1}\n  - {version: 2, weight: 3}\n"
    )
    assert [v.weight for v in policy.variants] == [1.0, 3.0]


def test_yaml_errors_name_the_line() -> None:
    with pytest.raises(InvalidArgumentError, match="not valid YAML at line 3, column 5"):
        parse_policy_text("kind: split\nvariants: [1, 2\nseed: {\n")


# every field, a wrong value, and the field the message must name
WRONG: list[tuple[str, dict[str, Any], str]] = [
    ("not a mapping", [1, 2], "must be a mapping"),  # type: ignore[list-item]
    ("no kind", {"variants": []}, "kind: missing"),
    ("unknown kind", {"kind": "blue_green"}, "kind: 'blue_green' is not known"),
    ("unknown field", {**SPLIT, "colour": 1}, "colour: unknown field for a split policy"),
    ("shadow field on split", {**SPLIT, "sample": 0.5}, "sample: unknown field"),
    ("sticky on bandit", {**BANDIT, "sticky_key": "u"}, "sticky_key: unknown field"),
    ("feedback on shadow", {**SHADOW, "feedback": {}}, "feedback: unknown field"),
    ("seed", {**SPLIT, "seed": -1}, "seed: must be a whole number >= 0"),
    ("seed type", {**SPLIT, "seed": "x"}, "seed: must be a whole number"),
    ("no variants", {"kind": "split"}, "variants: required"),
    ("one variant", {"kind": "split", "variants": [{"version": 1}]}, "variants: required"),
    ("variants not a list", {"kind": "bandit", "variants": "v1,v2"}, "variants: required"),
    (
        "too many variants",
        {"kind": "bandit", "variants": [{"version": i} for i in range(1, 19)]},
        "variants: at most 16",
    ),
    ("variant not a mapping", {"kind": "bandit", "variants": [1, 2]}, "variants[0]: must be a"),
    (
        "variant unknown field",
        {"kind": "bandit", "variants": [{"version": 1, "weight": 2}, {"version": 2}]},
        "variants[0].weight: unknown field",
    ),
    (
        "variant without version",
        {"kind": "bandit", "variants": [{"version": 1}, {"name": "b"}]},
        "variants[1].version: required",
    ),
    (
        "variant version 0",
        {"kind": "bandit", "variants": [{"version": 0}, {"version": 2}]},
        "variants[0].version: must be a version number >= 1",
    ),
    (
        "variant version bool",
        {"kind": "bandit", "variants": [{"version": True}, {"version": 2}]},
        "variants[0].version: must be a version number",
    ),
    (
        "variant model",
        {"kind": "bandit", "variants": [{"version": 1}, {"model": 3}]},
        "variants[1].model: must be a model name",
    ),
    (
        "variant name",
        {"kind": "bandit", "variants": [{"version": 1, "name": ""}, {"version": 2}]},
        "variants[0].name: must be a short printable name",
    ),
    (
        "duplicate names",
        {"kind": "bandit", "variants": [{"version": 1, "name": "x"}, {"version": 2, "name": "x"}]},
        "variants[1].name: 'x' is also the name of variants[0]",
    ),
    (
        "duplicate targets",
        {"kind": "bandit", "variants": [{"version": 1}, {"version": 1, "name": "again"}]},
        "variants[1]: names the same model version as variants[0]",
    ),
    (
        "weight missing",
        {"kind": "split", "variants": [{"version": 1, "weight": 1}, {"version": 2}]},
        "variants[1].weight: required",
    ),
    (
        "weight zero",
        {"kind": "split", "variants": [{"version": 1, "weight": 0}, {"version": 2, "weight": 1}]},
        "variants[0].weight: must be a number > 0",
    ),
    (
        "weight text",
        {"kind": "split", "variants": [{"version": 1, "weight": "9"}, {"version": 2, "weight": 1}]},
        "variants[0].weight: must be a number",
    ),
    ("sticky key", {**SPLIT, "sticky_key": ""}, "sticky_key: must be the name of a request"),
    ("feedback type", {**SPLIT, "feedback": "yes"}, "feedback: must be a mapping"),
    ("feedback field", {**SPLIT, "feedback": {"kind": "x"}}, "feedback.kind: unknown field"),
    ("reward", {**SPLIT, "feedback": {"reward": "ordinal"}}, "feedback.reward: must be binary"),
    ("ttl", {**SPLIT, "feedback": {"ttl_s": 0}}, "feedback.ttl_s: must be a number > 0"),
    ("max ids", {**SPLIT, "feedback": {"max_ids": 0}}, "feedback.max_ids: must be a whole number"),
    ("min share", {**BANDIT, "min_share": -0.1}, "min_share: must be a number >= 0"),
    ("min share sum", {**BANDIT, "min_share": 0.6}, "min_share: 0.6 x 2 variants exceeds 1"),
    ("no shadow", {"kind": "shadow"}, "shadow: required"),
    ("shadow = primary", {**SHADOW, "primary": {"version": 2}}, "shadow: names the same model"),
    ("shadow not a mapping", {"kind": "shadow", "shadow": 2}, "shadow: must be a mapping"),
    ("primary field", {**SHADOW, "primary": {"weight": 1}}, "primary.weight: unknown field"),
    ("sample zero", {**SHADOW, "sample": 0}, "sample: must be a number > 0"),
    ("sample above one", {**SHADOW, "sample": 1.5}, "sample: must be a number <= 1"),
    ("max in flight", {**SHADOW, "max_in_flight": 0}, "max_in_flight: must be a whole number"),
    ("log payloads", {**SHADOW, "log_payloads": "yes"}, "log_payloads: must be true or false"),
    ("batch", {**SHADOW, "batch": 0}, "batch: must be a whole number >= 1, not 0"),
    ("batch delay", {**SHADOW, "batch_delay_ms": -1}, "batch_delay_ms: must be a number >= 0"),
    ("split batch", {**SPLIT, "batch": 4}, "batch: unknown field"),
    ("compare type", {**SHADOW, "compare": [1]}, "compare: must be a mapping"),
    ("compare field", {**SHADOW, "compare": {"top": 1}}, "compare.top: unknown field"),
    ("compare outputs", {**SHADOW, "compare": {"outputs": "y"}}, "compare.outputs: must be a list"),
    ("compare atol", {**SHADOW, "compare": {"atol": -1}}, "compare.atol: must be a number >= 0"),
    ("compare rtol", {**SHADOW, "compare": {"rtol": "x"}}, "compare.rtol: must be a number"),
    ("canary primary", {"kind": "canary", "candidate": {"version": 2}}, "primary: required"),
    ("canary candidate", {"kind": "canary", "primary": {"version": 1}}, "candidate: required"),
    ("stages type", {**CANARY, "stages": 0.5}, "stages: must be a list"),
    ("stages empty", {**CANARY, "stages": []}, "stages: must be a list"),
    ("stage value", {**CANARY, "stages": ["half", 1]}, "stages[0]: must be a number"),
    ("stage zero", {**CANARY, "stages": [0, 1]}, "stages[0]: must be a share in (0, 1]"),
    ("stage order", {**CANARY, "stages": [0.5, 0.1, 1]}, "stages[1]: must be greater"),
    ("last stage", {**CANARY, "stages": [0.1, 0.5]}, "stages: the last stage must be 1.0"),
    ("min requests", {**CANARY, "min_requests": 0}, "min_requests: must be a whole number >= 1"),
    ("error rate", {**CANARY, "max_error_rate": 2}, "max_error_rate: must be a number <= 1"),
    ("error rate sign", {**CANARY, "max_error_rate": -1}, "max_error_rate: must be a number >= 0"),
    ("latency ratio", {**CANARY, "max_latency_ratio": 0}, "max_latency_ratio: must be a number >"),
    ("p99", {**CANARY, "max_p99_ms": "fast"}, "max_p99_ms: must be a number"),
    ("disagreement", {**CANARY, "max_disagreement": 1.1}, "max_disagreement: must be a number <="),
    ("auto promote", {**CANARY, "auto_promote": 1}, "auto_promote: must be true or false"),
]


@pytest.mark.parametrize(
    ("data", "expected"), [(d, e) for _, d, e in WRONG], ids=[w[0] for w in WRONG]
)
def test_every_wrong_field_is_named(data: Any, expected: str) -> None:
    message = _error(data)
    assert message.startswith("rollout policy")
    assert expected in message, message


EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "rollout"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_example_policies_parse(path: Path) -> None:
    policy = parse_policy_text(path.read_text())
    assert path.stem == policy.kind
