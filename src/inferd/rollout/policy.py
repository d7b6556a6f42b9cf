"""A model's traffic policy: the schema of ``rollout.yaml`` (and of the admin API's JSON body),
parsed into one typed value, every field checked.

Pure: no I/O besides parsing text. Every error is one line naming the field, e.g.
``rollout policy: variants[1].weight: must be a number > 0, not -1``; unknown fields are
refused by name. :meth:`Policy.as_dict` writes the policy back in the same schema, defaults
filled in, so what ``GET /v2/models/{m}/rollout`` shows can be ``PUT`` again unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from inferd.errors import InvalidArgumentError
from inferd.rollout.fields import fail, flag, number, optional_int, optional_number, whole

__all__ = [
    "KINDS",
    "CanarySpec",
    "CompareSpec",
    "FeedbackSpec",
    "Policy",
    "ShadowSpec",
    "Target",
    "Variant",
    "parse_policy",
    "parse_policy_text",
]

KINDS = ("shadow", "split", "bandit", "canary")
REWARDS = ("binary", "continuous")
DEFAULT_STAGES = (0.01, 0.1, 0.5, 1.0)

_COMMON = {"kind", "seed"}
_CANARY = (
    "primary candidate stages min_requests max_error_rate max_latency_ratio max_p99_ms "
    "max_disagreement auto_promote sticky_key feedback compare max_in_flight batch "
    "batch_delay_ms"
)
_FIELDS: dict[str, set[str]] = {
    "shadow": _COMMON
    | {"primary", "shadow", "sample", "max_in_flight", "log_payloads", "compare"}
    | {"batch", "batch_delay_ms"},
    "split": _COMMON | {"variants", "sticky_key", "feedback"},
    "bandit": _COMMON | {"variants", "feedback", "min_share"},
    "canary": _COMMON | set(_CANARY.split()),
}
_TARGET_FIELDS = {"name", "model", "version"}


@dataclass(frozen=True, slots=True)
class Target:
    """A model version: ``model`` None means the policy's own model, ``version`` None its latest
    ready version."""

    model: str | None
    version: int | None

    def resolve(self, own: str) -> tuple[str, int | None]:
        return (self.model or own, self.version)

    def default_name(self) -> str:
        if self.model is None:
            return "latest" if self.version is None else f"v{self.version}"
        return self.model if self.version is None else f"{self.model}:v{self.version}"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.model is not None:
            out["model"] = self.model
        if self.version is not None:
            out["version"] = self.version
        return out


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    target: Target
    weight: float = 1.0  # split only

    def as_dict(self, *, weight: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, **self.target.as_dict()}
        if weight:
            out["weight"] = self.weight
        return out


#: ceilings of a feedback policy's memory of request ids: how many, and for how long
MAX_FEEDBACK_IDS = 1_000_000
MAX_FEEDBACK_TTL_S = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class FeedbackSpec:
    reward: str = "binary"  # "binary" (rewards in [0, 1]) or "continuous"
    ttl_s: float = 3600.0  # how long a request id can still be rewarded
    max_ids: int = 100_000  # request ids remembered at most (the oldest are forgotten)

    def as_dict(self) -> dict[str, Any]:
        return {"reward": self.reward, "ttl_s": self.ttl_s, "max_ids": self.max_ids}


@dataclass(frozen=True, slots=True)
class CompareSpec:
    outputs: tuple[str, ...] = ()  # () = every output both answers have
    atol: float = 1e-6
    rtol: float = 1e-4

    def as_dict(self) -> dict[str, Any]:
        return {"outputs": list(self.outputs), "atol": self.atol, "rtol": self.rtol}


@dataclass(frozen=True, slots=True)
class ShadowSpec:
    sample: float = 1.0  # the share of requests mirrored
    max_in_flight: int = 16  # mirrored requests running at once; more are skipped (counted)
    log_payloads: bool = False  # the shadow's answers go to the payload log too
    batch: int = 8  # mirrors gathered and started together (1: each at once)
    batch_delay_ms: float = 20.0  # the longest a gathered mirror waits for its batch


@dataclass(frozen=True, slots=True)
class CanarySpec:
    stages: tuple[float, ...] = DEFAULT_STAGES
    min_requests: int = 100
    max_error_rate: float | None = None
    max_latency_ratio: float | None = None
    max_p99_ms: float | None = None
    max_disagreement: float | None = None
    auto_promote: bool = True


@dataclass(frozen=True, slots=True)
class Policy:
    """One model's policy. ``variants[0]`` is the baseline: the primary of a shadow or canary
    policy (``variants[1]`` is the shadow or the candidate), the first variant of a split or
    bandit."""

    kind: str
    variants: tuple[Variant, ...]
    sticky_key: str | None = None  # the request parameter whose value keeps a caller's variant
    feedback: FeedbackSpec | None = None
    compare: CompareSpec = field(default_factory=CompareSpec)
    shadow: ShadowSpec = field(default_factory=ShadowSpec)  # also bounds canary comparisons
    canary: CanarySpec | None = None
    min_share: float = 0.0  # bandit: the exploration floor of each variant
    seed: int | None = None  # fixes the random draws (tests, reproducible simulations)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variants)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind in ("shadow", "canary"):
            second = "shadow" if self.kind == "shadow" else "candidate"
            out["primary"] = self.variants[0].as_dict()
            out[second] = self.variants[1].as_dict()
        else:
            out["variants"] = [v.as_dict(weight=self.kind == "split") for v in self.variants]
        if self.kind == "shadow":
            out["sample"] = self.shadow.sample
            out["log_payloads"] = self.shadow.log_payloads
        if self.kind in ("shadow", "canary"):
            out["max_in_flight"] = self.shadow.max_in_flight
            out["batch"] = self.shadow.batch
            out["batch_delay_ms"] = self.shadow.batch_delay_ms
            out["compare"] = self.compare.as_dict()
        if self.canary is not None:
            c = self.canary
            out["stages"] = list(c.stages)
            out["min_requests"] = c.min_requests
            out["max_error_rate"] = c.max_error_rate
            out["max_latency_ratio"] = c.max_latency_ratio
            out["max_p99_ms"] = c.max_p99_ms
            out["max_disagreement"] = c.max_disagreement
            out["auto_promote"] = c.auto_promote
        if self.kind == "bandit":
            out["min_share"] = self.min_share
        if self.kind in ("split", "canary"):
            out["sticky_key"] = self.sticky_key
        if self.feedback is not None:
            out["feedback"] = self.feedback.as_dict()
        if self.seed is not None:
            out["seed"] = self.seed
        return out


# -- parsing ------------------------------------------------------------------------------------


def parse_policy_text(text: str) -> Policy:
    """A policy from YAML (or JSON, which is YAML) text."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "cannot be parsed"
        raise InvalidArgumentError(f"rollout policy is not valid YAML{where}: {problem}") from None
    return parse_policy(data)


def parse_policy(data: Any) -> Policy:
    """A policy from its parsed YAML / JSON value; :class:`InvalidArgumentError` names the
    first field that is wrong."""
    if not isinstance(data, Mapping):
        raise InvalidArgumentError(
            "rollout policy: must be a mapping with a 'kind' (one of " + ", ".join(KINDS) + ")"
        )
    kind = data.get("kind")
    if kind not in KINDS:
        shown = "missing" if kind is None else f"{kind!r} is not known"
        raise fail("kind", f"{shown}; expected one of {', '.join(KINDS)}")
    allowed = _FIELDS[kind]
    for key in data:
        if key not in allowed:
            raise fail(
                str(key),
                f"unknown field for a {kind} policy; expected one of {', '.join(sorted(allowed))}",
            )
    seed = optional_int(data, "seed", minimum=0)
    if kind in ("shadow", "canary"):
        second = "shadow" if kind == "shadow" else "candidate"
        if kind == "canary" and "primary" not in data:
            raise fail("primary", "required: the version serving today, e.g. {version: 1}")
        primary = _variant(data.get("primary", {}), "primary", default_name="latest")
        if second not in data:
            raise fail(second, "required, e.g. {version: 2}")
        other = _variant(data[second], second, default_name=None)
        variants = _distinct((primary, other), ("primary", second))
    else:
        variants = _variant_list(data.get("variants"), weights=kind == "split")
    sticky = _sticky(data)
    feedback = _feedback(data.get("feedback"), "feedback") if "feedback" in data else None
    if kind == "bandit" and feedback is None:
        feedback = FeedbackSpec()
    min_share = 0.0
    if kind == "bandit":
        min_share = number(data, "min_share", 0.0, low=0.0)
        if min_share * len(variants) > 1.0 + 1e-12:
            raise fail("min_share", f"{min_share:g} x {len(variants)} variants exceeds 1")
    shadow = ShadowSpec(
        sample=number(data, "sample", 1.0, low=0.0, high=1.0, low_open=True),
        max_in_flight=whole(data, "max_in_flight", 16, minimum=1),
        log_payloads=flag(data, "log_payloads", False),
        # a canary judges each comparison as it comes: gathering them would delay a rollback
        batch=whole(data, "batch", 8 if kind == "shadow" else 1, minimum=1),
        batch_delay_ms=number(data, "batch_delay_ms", 20.0, low=0.0, high=60_000.0),
    )
    compare = _compare(data["compare"]) if "compare" in data else CompareSpec()
    canary = _canary(data) if kind == "canary" else None
    return Policy(
        kind=kind,
        variants=variants,
        sticky_key=sticky,
        feedback=feedback,
        compare=compare,
        shadow=shadow,
        canary=canary,
        min_share=min_share,
        seed=seed,
    )


def _variant(raw: Any, where: str, *, default_name: str | None, weights: bool = False) -> Variant:
    if not isinstance(raw, Mapping):
        raise fail(where, "must be a mapping such as {version: 2} or {model: other, version: 1}")
    allowed = _TARGET_FIELDS | ({"weight"} if weights else set())
    for key in raw:
        if key not in allowed:
            raise fail(
                f"{where}.{key}", f"unknown field; expected one of {', '.join(sorted(allowed))}"
            )
    model = raw.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise fail(f"{where}.model", "must be a model name")
    version = raw.get("version")
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version < 1
    ):
        raise fail(f"{where}.version", f"must be a version number >= 1, not {version!r}")
    if version is None and model is None and default_name is None:
        raise fail(f"{where}.version", "required (or name another model with 'model')")
    target = Target(model, version)
    name = raw.get("name", target.default_name())
    if not isinstance(name, str) or not name or len(name) > 64 or not name.isprintable():
        raise fail(f"{where}.name", "must be a short printable name")
    weight = 1.0
    if weights:
        if "weight" not in raw:
            raise fail(
                f"{where}.weight",
                "required: a number > 0 (the shares are the weights over their sum)",
            )
        weight = number(raw, "weight", 1.0, low=0.0, low_open=True, where=f"{where}.weight")
    return Variant(name, target, weight)


def _variant_list(raw: Any, *, weights: bool) -> tuple[Variant, ...]:
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or len(raw) < 2:
        raise fail(
            "variants",
            "required: a list of at least two variants, e.g. [{version: 1}, {version: 2}]",
        )
    if len(raw) > 16:
        raise fail("variants", f"at most 16 variants, not {len(raw)}")
    found = tuple(
        _variant(item, f"variants[{i}]", default_name=None, weights=weights)
        for i, item in enumerate(raw)
    )
    return _distinct(found, tuple(f"variants[{i}]" for i in range(len(found))))


def _distinct(variants: tuple[Variant, ...], wheres: Sequence[str]) -> tuple[Variant, ...]:
    seen_names: dict[str, str] = {}
    seen_targets: dict[Target, str] = {}
    for variant, where in zip(variants, wheres, strict=True):
        if variant.target in seen_targets:
            raise fail(where, f"names the same model version as {seen_targets[variant.target]}")
        if variant.name in seen_names:
            raise fail(
                f"{where}.name", f"'{variant.name}' is also the name of {seen_names[variant.name]}"
            )
        seen_names[variant.name] = where
        seen_targets[variant.target] = where
    return variants


def _sticky(data: Mapping[str, Any]) -> str | None:
    raw = data.get("sticky_key")
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        raise fail("sticky_key", "must be the name of a request parameter (e.g. user_id)")
    return raw


def _feedback(raw: Any, where: str) -> FeedbackSpec:
    if raw is None or raw is True:
        return FeedbackSpec()
    if not isinstance(raw, Mapping):
        raise fail(where, "must be a mapping such as {reward: binary}")
    allowed = {"reward", "ttl_s", "max_ids"}
    for key in raw:
        if key not in allowed:
            raise fail(
                f"{where}.{key}", f"unknown field; expected one of {', '.join(sorted(allowed))}"
            )
    reward = raw.get("reward", "binary")
    if reward not in REWARDS:
        raise fail(f"{where}.reward", f"must be binary or continuous, not {reward!r}")
    ttl = number(
        raw,
        "ttl_s",
        3600.0,
        low=0.0,
        low_open=True,
        high=MAX_FEEDBACK_TTL_S,
        where=f"{where}.ttl_s",
    )
    max_ids = whole(raw, "max_ids", 100_000, minimum=1, where=f"{where}.max_ids")
    if max_ids > MAX_FEEDBACK_IDS:  # each id kept costs up to ~0.5 KB (ids are <= 256 bytes)
        raise fail(f"{where}.max_ids", f"must be at most {MAX_FEEDBACK_IDS}, not {max_ids}")
    return FeedbackSpec(reward, ttl, max_ids)


def _compare(raw: Any) -> CompareSpec:
    if not isinstance(raw, Mapping):
        raise fail("compare", "must be a mapping such as {outputs: [label], atol: 1e-6}")
    for key in raw:
        if key not in ("outputs", "atol", "rtol"):
            raise fail(f"compare.{key}", "unknown field; expected one of atol, outputs, rtol")
    outputs = raw.get("outputs", [])
    if (
        not isinstance(outputs, Sequence)
        or isinstance(outputs, str | bytes)
        or not all(isinstance(o, str) and o for o in outputs)
    ):
        raise fail("compare.outputs", "must be a list of output names")
    atol = number(raw, "atol", 1e-6, low=0.0, where="compare.atol")
    rtol = number(raw, "rtol", 1e-4, low=0.0, where="compare.rtol")
    return CompareSpec(tuple(outputs), atol, rtol)


def _canary(data: Mapping[str, Any]) -> CanarySpec:
    raw = data.get("stages", list(DEFAULT_STAGES))
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or not raw:
        raise fail("stages", "must be a list of shares such as [0.01, 0.1, 0.5, 1.0]")
    stages: list[float] = []
    for i, value in enumerate(raw):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise fail(f"stages[{i}]", f"must be a number, not {value!r}")
        if not 0.0 < value <= 1.0:
            raise fail(f"stages[{i}]", f"must be a share in (0, 1], not {value:g}")
        if stages and value <= stages[-1]:
            raise fail(f"stages[{i}]", f"must be greater than the stage before ({stages[-1]:g})")
        stages.append(float(value))
    if stages[-1] != 1.0:
        raise fail("stages", f"the last stage must be 1.0 (all traffic), not {stages[-1]:g}")
    spec = CanarySpec(
        stages=tuple(stages),
        min_requests=whole(data, "min_requests", 100, minimum=1),
        max_error_rate=optional_number(data, "max_error_rate", high=1.0),
        max_latency_ratio=optional_number(data, "max_latency_ratio", low_open=True),
        max_p99_ms=optional_number(data, "max_p99_ms", low_open=True),
        max_disagreement=optional_number(data, "max_disagreement", high=1.0),
        auto_promote=flag(data, "auto_promote", True),
    )
    return spec
