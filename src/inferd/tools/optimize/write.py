"""The winner goes into the repository.

When it runs on the model's own runtime with the model's own parameters, it becomes the model's
next version, and the version policy is widened so the previous version stays servable (a
request may still name it; an unversioned request gets the new one). When it needs another
runtime or other parameters (a TorchScript model exported to ONNX, an ONNX model served by
OpenVINO), the config cannot serve both, so it becomes a new model beside the old one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.codecs.model_config import ModelConfig
from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import Candidate
from inferd.tools.optimize.staging import (
    candidate_config,
    copy_model_files,
    copy_sidecars,
    model_filename,
    platform_of,
)

__all__ = ["Written", "next_version", "write_winner"]

PROVENANCE = "optimized.json"


@dataclass(frozen=True)
class Written:
    model: str
    version: int
    model_dir: Path
    new_model: bool  # True: written as a model of its own, beside the baseline


def next_version(model_dir: Path) -> int:
    versions = [int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    return max(versions, default=0) + 1


def _same_runtime(baseline: ModelConfig, candidate: Candidate) -> bool:
    if platform_of(baseline) != candidate.platform:
        return False
    current = {k: v.string_value for k, v in baseline.parameters.items()}
    return all(current.get(k) == v for k, v in candidate.parameters.items())


def _widen_policy(config_text: str, config: ModelConfig, old: int, new: int) -> str:
    """``config_text`` with a version policy that serves both ``old`` and ``new``."""
    from google.protobuf import text_format

    if not config.HasField("version_policy"):
        # the default policy serves the latest version only: keep the text (and its
        # comments) and add a policy that serves the two latest
        return config_text.rstrip() + "\n\nversion_policy: { latest: { num_versions: 2 } }\n"
    policy = config.version_policy
    if policy.HasField("all"):
        return config_text
    if policy.HasField("specific"):
        if new not in policy.specific.versions:
            policy.specific.versions.append(new)
        if old not in policy.specific.versions:
            policy.specific.versions.append(old)
    else:
        policy.latest.num_versions = max(policy.latest.num_versions, 2)
    header = "".join(line + "\n" for line in config_text.splitlines() if re.match(r"\s*#", line))
    return header + text_format.MessageToString(config)


def write_winner(
    candidate: Candidate,
    baseline: ModelConfig,
    model_dir: Path,
    *,
    output_model: str | None,
    provenance: dict[str, Any],
) -> Written:
    """Write ``candidate`` into the repository that holds ``model_dir``."""
    repository = model_dir.parent
    if output_model is None and _same_runtime(baseline, candidate):
        version = next_version(model_dir)
        previous = version - 1
        version_dir = model_dir / str(version)
        filename = baseline.default_model_filename or model_filename(candidate)
        written = copy_model_files(candidate, version_dir)
        if written.name != filename:
            written.rename(version_dir / filename)
        (version_dir / PROVENANCE).write_text(json.dumps(provenance, indent=2), encoding="utf-8")
        config_file = model_dir / "config.pbtxt"
        if config_file.is_file():
            text = config_file.read_text(encoding="utf-8")
            config_file.write_text(
                _widen_policy(text, baseline, previous, version), encoding="utf-8"
            )
        return Written(model_dir.name, version, model_dir, new_model=False)

    from google.protobuf import text_format

    name = output_model or f"{model_dir.name}_optimized"
    target = repository / name
    if target.exists():
        raise InvalidArgumentError(
            f"the optimized model goes beside the baseline as '{name}', but {target} exists: "
            "remove it or choose another name with --output-model"
        )
    if target.resolve() == model_dir.resolve():
        raise InvalidArgumentError(
            f"--output-model {name} is the baseline itself, whose runtime or parameters the "
            "winner cannot share: choose another name"
        )
    version_dir = target / "1"
    copy_model_files(candidate, version_dir)
    (version_dir / PROVENANCE).write_text(json.dumps(provenance, indent=2), encoding="utf-8")
    config = candidate_config(baseline, candidate, name)
    config.ClearField("version_policy")
    copy_sidecars(baseline, model_dir, target)
    (target / "config.pbtxt").write_text(text_format.MessageToString(config), encoding="utf-8")
    return Written(name, 1, target, new_model=True)
