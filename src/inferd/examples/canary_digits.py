"""A canary that goes wrong and is rolled back by itself.

``python -m inferd.examples.canary_digits`` builds a repository with one model, ``digits_canary``,
in two versions of the ``digits`` classifier (a StandardScaler and a LogisticRegression exported
to ONNX): version 1 trained on the true labels, version 2 "retrained" on labels that were
corrupted on purpose (most 3s, 4s and 7s of the training set labelled 8, 9 and 1). Version 2
raises no error; it is only wrong more often. Beside the config lies a ``rollout.yaml``: a
canary from version 1 to version 2 that also runs version 1 on every request version 2 answers
and compares the two answers (``max_disagreement``).

The script starts ``inferd serve`` on the repository, sends the held-out images one per request
with tritonclient, and prints each stage change of the canary as the server reports it: the
canary starts at 10% of the traffic, and once 20 compared answers disagree more than 10% of the
time the server rolls it back by itself, after which every request goes to version 1. It ends
with what each version answered and how often it was right.

    python -m inferd.examples.canary_digits [--repository DIR] [--requests 450]

It needs the examples extra (``pip install 'inferd[examples]'``: scikit-learn, skl2onnx,
tritonclient).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InferdError
from inferd.examples.common import DIGITS_SEED, write_file
from inferd.examples.digits_models import _digits_onnx, digits_split

MODEL = "digits_canary"
# the corruption: this share of the training images of each key is labelled as its value
SWAPS = {3: 8, 4: 9, 7: 1}
CORRUPTED_SHARE = 0.8

CONFIG = f"""\
# {MODEL}: the digits classifier in two versions (see inferd.examples.canary_digits):
# 1 trained on the true labels, 2 on labels corrupted on purpose. Both are served.
name: "{MODEL}"
platform: "onnxruntime_onnx"
max_batch_size: 32
version_policy: {{ all {{ }} }}
input [ {{ name: "input" data_type: TYPE_FP32 dims: [ 64 ] }} ]
output [
  {{ name: "label" data_type: TYPE_INT64 dims: [ 1 ] }},
  {{ name: "probabilities" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "labels.txt" }}
]
"""

POLICY = """\
# A canary of version 2 after version 1: 10% of the requests, then 50%, then all of them, each
# stage after 100 of version 2's requests pass. Every request version 2 answers also runs on
# version 1 in the background, and the two answers are compared (the top class of
# 'probabilities', and 'label'): more than 10% disagreement over 20 compared requests, or more
# than 2% errors, rolls the canary back.
kind: canary
primary: {version: 1}
candidate: {version: 2}
stages: [0.1, 0.5, 1.0]
min_requests: 100
max_error_rate: 0.02
max_disagreement: 0.1
seed: 0
"""


def _corrupt(labels: np.ndarray[Any, Any], seed: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    out = labels.copy()
    for source, target in SWAPS.items():
        rows = np.flatnonzero(labels == source)
        chosen = rng.choice(rows, int(len(rows) * CORRUPTED_SHARE), replace=False)
        out[chosen] = target
    return out


def build_repository(root: Path) -> dict[int, float]:
    """Write ``root/digits_canary`` (versions 1 and 2, the canary's rollout.yaml); return each
    version's held-out accuracy."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    x_train, x_test, y_train, y_test = digits_split()
    model_dir = root / MODEL
    accuracy: dict[int, float] = {}
    for version, labels in ((1, y_train), (2, _corrupt(y_train, DIGITS_SEED))):
        final_step = LogisticRegression(C=0.5, max_iter=2000, random_state=DIGITS_SEED)
        classifier = Pipeline([("scale", StandardScaler()), ("classify", final_step)])
        classifier.fit(x_train, labels)
        accuracy[version] = float(np.mean(classifier.predict(x_test) == y_test))
        graph = _digits_onnx(classifier, final_step)
        write_file(model_dir / str(version) / "model.onnx", graph.SerializeToString())
    write_file(model_dir / "config.pbtxt", CONFIG)
    write_file(model_dir / "labels.txt", "".join(f"{d}\n" for d in range(10)))
    write_file(model_dir / "rollout.yaml", POLICY)
    return accuracy


def _report(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{url}/v2/models/{MODEL}/rollout", timeout=10) as r:
        answer: dict[str, Any] = json.load(r)
    return answer


def _stage_text(change: dict[str, Any]) -> str:
    reason = f": {change['reason']}" if change["reason"] else ""
    return (
        f"stage {change['stage'] + 1}, {change['share']:.0%} to version 2, {change['status']}"
        + (reason)
    )


def drive(url: str, requests: int, out: Any = sys.stdout) -> dict[str, Any]:
    """Send ``requests`` held-out images (cycling) one per request; print each stage change;
    return the final report with, per variant, the answers it gave and how many were right."""
    import tritonclient.http as httpclient

    _, x_test, _, y_test = digits_split()
    answered: dict[str, list[int]] = {}
    printed = 0
    with httpclient.InferenceServerClient(url) as client:
        for i in range(requests):
            row = i % len(x_test)
            tensor = httpclient.InferInput("input", [1, 64], "FP32")
            tensor.set_data_from_numpy(x_test[row : row + 1])
            result = client.infer(MODEL, [tensor])
            variant = str(result.get_response()["parameters"]["variant"])
            label = int(np.asarray(result.as_numpy("label"))[0, 0])
            answered.setdefault(variant, []).append(int(label == y_test[row]))
            if i % 10 == 9 or i == requests - 1:
                history = _report(url)["canary"]["history"]
                for change in history[printed:]:
                    print(f"after {i + 1:4d} requests: {_stage_text(change)}", file=out)
                printed = len(history)
    report = _report(url)
    report["answered"] = {v: (len(a), sum(a)) for v, a in answered.items()}
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferd.examples.canary_digits",
        description="A canary of a worse digits model, rolled back automatically.",
    )
    parser.add_argument("--repository", type=Path, help="where to build it (default: a temp dir)")
    parser.add_argument("--requests", type=int, default=450, help="requests to send")
    args = parser.parse_args(argv)
    from inferd.testing import running_server

    root = args.repository or Path(tempfile.mkdtemp(prefix="canary-digits-"))
    try:
        accuracy = build_repository(root)
    except InferdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"built {root / MODEL}: version 1 is right on {accuracy[1]:.1%} of the held-out "
          f"images, version 2 on {accuracy[2]:.1%}")  # fmt: skip
    with running_server([root]) as server:
        print(f"inferd serve on {server.http_url}; the canary starts from rollout.yaml")
        report = drive(server.http_url, args.requests)
    canary = report["canary"]
    print(f"canary: {canary['status']}" + (f" ({canary['reason']})" if canary["reason"] else ""))
    for variant in report["variants"]:
        name = variant["name"]
        served, right = report["answered"].get(name, (0, 0))
        mirrored = variant.get("mirrored") or {}
        compared = mirrored.get("compared", 0)
        line = f"  {name}: answered {served} requests, {right} right"
        if served:
            line += f" ({right / served:.1%})"
        if compared:
            line += f"; compared with v1 on {compared}, agreed on {mirrored['agreement']:.1%}"
        print(line)
    return 0 if canary["status"] == "rolled_back" else 1


if __name__ == "__main__":
    sys.exit(main())
