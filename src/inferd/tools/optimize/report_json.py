"""Every figure of a run as one JSON document (``report.json`` in the results folder)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from inferd.tools.optimize.decide import Goals, Outcome
from inferd.tools.optimize.run import OptimizeResult

__all__ = ["outcome_dict", "report_document", "report_text"]


def outcome_dict(outcome: Outcome) -> dict[str, Any]:
    return {
        "name": outcome.name,
        "kind": outcome.kind,
        "skipped": outcome.skipped,
        "quality": (
            {
                "metric": outcome.quality.metric,
                "value": outcome.quality.value,
                "figures": dict(outcome.quality.figures),
            }
            if outcome.quality is not None
            else None
        ),
        "speed": [asdict(p) for p in outcome.speed],
        "size_bytes": outcome.size_bytes,
        "memory_mb": outcome.memory_mb,
        "build_s": outcome.build_s,
        "notes": list(outcome.notes),
        "recipe": outcome.recipe,
    }


def report_document(result: OptimizeResult, goals: Goals, model: str) -> dict[str, Any]:
    decision = result.decision
    return {
        "model": model,
        "cpu": result.cpu_summary,
        "device": result.device,
        "device_reason": result.device_reason,
        "goals": {
            "objective": goals.objective,
            "accuracy_budget": goals.budget.fraction,
            "latency_budget_ms": goals.latency_budget_ms,
            "batch_size": decision.batch_size,
            "min_gain": goals.min_gain,
        },
        "decision": {
            "winner": decision.winner,
            "kept_baseline": decision.kept_baseline,
            "gain": decision.gain,
            "reasons": decision.reasons,
        },
        "written": (
            {
                "model": result.written.model,
                "version": result.written.version,
                "path": str(result.written.model_dir),
                "new_model": result.written.new_model,
            }
            if result.written is not None
            else None
        ),
        "candidates": [outcome_dict(o) for o in result.outcomes],
        "sensitivity": result.sensitivity,
    }


def report_text(result: OptimizeResult, goals: Goals, model: str) -> str:
    return json.dumps(report_document(result, goals, model), indent=2, default=str)
