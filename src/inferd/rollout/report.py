"""What a live policy shows: the admin API's JSON report and the metrics' figures, both read
from the policy's counters when asked (never on the request path)."""

from __future__ import annotations

from typing import Any

from inferd.core.routing import PolicyFigures, VariantFigures
from inferd.rollout.bayes import Comparison, Kind, compare
from inferd.rollout.router import LivePolicy, VariantState

__all__ = ["comparisons", "policy_figures", "policy_report"]


def comparisons(live: LivePolicy) -> dict[str, Comparison]:
    """Each variant's reward against the baseline's (variants[0]), when the policy takes
    feedback."""
    fb = live.policy.feedback
    if fb is None:
        return {}
    base = live.variants[0]
    kind: Kind = "binary" if fb.reward == "binary" else "continuous"
    return {v.name: compare(base.rewards, v.rewards, kind=kind) for v in live.variants[1:]}


def _agreement(v: VariantState) -> float | None:
    m = v.mirror
    return m.agreed / m.compared if m.compared else None


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1e3, 4)


def policy_figures(live: LivePolicy, earlier_rollbacks: int = 0) -> PolicyFigures:
    live.compare_pending()
    shares = live.shares()
    found = comparisons(live)
    variants = tuple(
        VariantFigures(
            name=v.name,
            requests=v.requests,
            errors=v.errors,
            latency_p99_s=v.latency.percentile(99.0),
            share=shares.get(v.name, 0.0),
            feedback=v.rewards.count,
            reward_mean=v.rewards.mean if v.rewards.count else None,
            p_better=found[v.name].p_better if v.name in found else None,
            shadow_requests=v.mirror.requests,
            shadow_agreement=_agreement(v),
        )
        for v in live.variants
    )
    canary = live.canary
    return PolicyFigures(
        model=live.model,
        kind=live.policy.kind,
        variants=variants,
        canary_stage=canary.state.stage if canary is not None else None,
        canary_rollbacks=earlier_rollbacks + (canary.rollbacks if canary is not None else 0),
    )


def _variant_report(v: VariantState, share: float) -> dict[str, Any]:
    m = v.mirror
    out: dict[str, Any] = {
        "name": v.name,
        "model": v.model,
        "version": v.version,
        "share": share,
        "requests": v.requests,
        "errors": v.errors,
        "error_rate": v.errors / v.requests if v.requests else None,
        "latency_p50_ms": _ms(v.latency.percentile(50.0)),
        "latency_p99_ms": _ms(v.latency.percentile(99.0)),
        "feedback": v.rewards.count,
        "reward_mean": v.rewards.mean if v.rewards.count else None,
    }
    if m.requests or m.skipped:
        out["mirrored"] = {
            "requests": m.requests,
            "errors": m.errors,
            "skipped": m.skipped,
            "compared": m.compared,
            "agreement": _agreement(v),
            "row_agreement": m.agreed_rows / m.rows if m.rows else None,
            "max_abs_error": m.max_abs_error,
            "mean_cosine": m.cosine_sum / m.cosine_count if m.cosine_count else None,
        }
    return out


def policy_report(live: LivePolicy, earlier_rollbacks: int = 0) -> dict[str, Any]:
    live.compare_pending()
    shares = live.shares()
    report: dict[str, Any] = {
        "model": live.model,
        "kind": live.policy.kind,
        "policy": live.policy.as_dict(),
        "variants": [_variant_report(v, shares.get(v.name, 0.0)) for v in live.variants],
    }
    found = comparisons(live)
    if found:
        assert live.policy.feedback is not None
        report["comparison"] = {
            "baseline": live.variants[0].name,
            "reward": live.policy.feedback.reward,
            "candidates": {name: c.as_dict() for name, c in found.items()},
        }
    canary = live.canary
    if canary is not None:
        window = canary.current_window()
        report["canary"] = {
            "stage": canary.state.stage,
            "stages": list(canary.rules.stages),
            "share": canary.share,
            "status": canary.state.status,
            "reason": canary.state.reason,
            "rollbacks": earlier_rollbacks + canary.rollbacks,
            "window": {
                "candidate_requests": window.candidate_requests,
                "candidate_errors": window.candidate_errors,
                "primary_requests": window.primary_requests,
                "primary_errors": window.primary_errors,
                "candidate_p99_ms": window.candidate_p99_ms,
                "primary_p99_ms": window.primary_p99_ms,
                "compared": window.compared,
                "disagreed": window.disagreed,
            },
            "history": [change.as_dict() for change in canary.history],
        }
    return report
