"""Replays transactions at the fraud model under drift monitoring until a drift alert fires.

    .venv/bin/python examples/monitoring/fraud_drift_replay.py [--feature 3] [--shift 0.5]

1. Without ``--url``, copies examples/models/fraud_xgboost to a temporary repository (or takes
   ``--model-repository``), writes its reference profile with ``inferd monitor profile`` from
   the model's training rows when the version has none, and starts
   ``inferd serve --monitor-drift`` on ports it picks. With ``--url`` it talks to a server you
   started that way.
2. Sends one-row requests drawn from the 2,500 held-out transactions the profile never saw
   (in distribution), then the same kind of rows with one feature moved by ``--shift``
   standard deviations of its training values.
3. Every ``--report-every`` requests, once the monitor has seen them, prints what the server
   says: the drift report (``GET /v2/models/fraud_xgboost/drift``: evaluations, features with an
   alert) and the ``inferd_drift_*`` metrics of the shifted feature (KS statistic and p-value,
   PSI, alert). Stops when the shifted feature's alert fires and prints after how many shifted
   requests it did.

Exit status: 0 when no alert fired in distribution and the shifted feature's alert fired;
1 when an alert fired in distribution; 2 when the shifted feature raised no alert within
``--max-drifted`` requests; 3 when the server cannot be used (one line says why).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from inferd.examples.tabular_models import fraud_split
from inferd.testing import running_server
from inferd.testing.process import ServerStartError

MODEL = "fraud_xgboost"
EXAMPLE = Path(__file__).resolve().parents[1] / "models" / MODEL
INPUT = "input__0"
CATCH_UP_S = 30.0  # how long the monitor may take to see the requests sent


class ReplayError(Exception):
    """The server cannot be used as asked; the message says what to do."""


@dataclass(frozen=True)
class Endpoints:
    http: str  # host:port
    grpc: str
    metrics: str


@dataclass(frozen=True)
class Observation:
    """What the server says after a chunk of requests."""

    rows: int  # rows the monitor has observed (version 1 of the model)
    evaluations: int
    alerts: tuple[str, ...]  # features whose alert is raised (report)
    ks_statistic: float | None  # the shifted feature's metrics
    ks_pvalue: float | None
    psi: float | None
    alert: bool


# -- pure pieces -------------------------------------------------------------------------------


def feature_name(index: int) -> str:
    """How the profile names column ``index`` of the model's one input."""
    return f"{INPUT}[{index}]"


def shifted(rows: np.ndarray, feature: int, amount: float) -> np.ndarray:
    """A copy of ``rows`` with column ``feature`` moved by ``amount`` (in its units)."""
    out = np.array(rows, dtype=np.float32, copy=True)
    out[:, feature] += amount
    return out


def feature_metrics(text: str, model: str, feature: str) -> dict[str, float]:
    """The ``inferd_drift_*`` gauges of one feature of ``model`` from a /metrics exposition
    (keyed by metric name; a statistic not computed yet is absent)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("inferd_drift_"):
            continue
        for sample in family.samples:
            labels = sample.labels
            if labels.get("model") == model and labels.get("feature") == feature:
                out[sample.name] = float(sample.value)
    return out


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def status_line(phase: str, sent: int, seen: Observation) -> str:
    alerts = ",".join(seen.alerts) if seen.alerts else "-"
    return (
        f"{phase:<16} {sent:>8} {seen.evaluations:>6} {_number(seen.ks_statistic, '.3f'):>8} "
        f"{_number(seen.ks_pvalue, '.1e'):>9} {_number(seen.psi, '.3f'):>7} "
        f"{'RAISED' if seen.alert else 'calm':>7}  {alerts}"
    )


HEADER = (
    f"{'phase':<16} {'requests':>8} {'evals':>6} {'KS stat':>8} {'KS p':>9} {'PSI':>7} "
    f"{'alert':>7}  alerts raised (report)"
)


# -- talking to the server ---------------------------------------------------------------------


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.load(reply)


def _drift(endpoints: Endpoints) -> dict[str, Any] | None:
    """The model's drift report, or None while the monitor has seen nothing of it."""
    try:
        report: dict[str, Any] = _get_json(f"http://{endpoints.http}/v2/models/{MODEL}/drift")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return report if report.get("versions") else None


def _report(endpoints: Endpoints) -> dict[str, Any] | None:
    """The report of the model's first monitored version."""
    report = _drift(endpoints)
    return None if report is None else dict(report["versions"][0])


def _observe(endpoints: Endpoints, feature: str, rows_needed: int) -> Observation:
    """The report and metrics once the monitor has seen ``rows_needed`` rows."""
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        version = _report(endpoints)
        if version is not None and int(version["rows"]) >= rows_needed:
            break
        if time.monotonic() > deadline:
            raise ReplayError(
                f"the drift monitor saw {0 if version is None else version['rows']} of "
                f"{rows_needed} rows after {CATCH_UP_S:.0f} s: is the server overloaded?"
            )
        time.sleep(0.02)
    with urllib.request.urlopen(f"http://{endpoints.metrics}/metrics", timeout=10) as reply:
        gauges = feature_metrics(reply.read().decode(), MODEL, feature)
    return Observation(
        rows=int(version["rows"]),
        evaluations=int(version["evaluations"]),
        alerts=tuple(version["alerts"]),
        ks_statistic=gauges.get("inferd_drift_ks_statistic"),
        ks_pvalue=gauges.get("inferd_drift_ks_pvalue"),
        psi=gauges.get("inferd_drift_psi"),
        alert=gauges.get("inferd_drift_alert") == 1.0,
    )


def _check_server(endpoints: Endpoints) -> None:
    """One clear line when the server is not one this replay can use."""
    try:
        _get_json(f"http://{endpoints.http}/v2/models/{MODEL}")
    except urllib.error.HTTPError as exc:
        raise ReplayError(
            f"{endpoints.http} does not serve {MODEL} (HTTP {exc.code}): serve a repository "
            f"holding examples/models/{MODEL}"
        ) from exc
    except OSError as exc:
        raise ReplayError(f"cannot reach an inferd server at {endpoints.http}: {exc}") from exc
    try:
        with urllib.request.urlopen(f"http://{endpoints.metrics}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    except OSError as exc:
        raise ReplayError(
            f"cannot read metrics at {endpoints.metrics}: give its address with --metrics-url"
        ) from exc
    if "inferd_drift_observed_rows" not in text:
        raise ReplayError(
            f"the server at {endpoints.http} does not monitor drift: start it with "
            "inferd serve --monitor-drift"
        )


def _profile(repo: Path) -> None:
    """Writes the model's reference profile from its training rows, if it has none."""
    if (repo / MODEL / "1" / "drift_profile.json").exists():
        return
    x_train, _, _, _ = fraud_split()
    data = repo / f".{MODEL}-train.npz"
    np.savez(data, **{INPUT: x_train})
    print(f"profiling {MODEL} from {len(x_train)} training rows (inferd monitor profile)")
    done = subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "monitor", "profile", MODEL,
         "--model-repository", str(repo), "--data", str(data)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    data.unlink()
    if done.returncode != 0:
        raise ReplayError(f"inferd monitor profile failed: {done.stderr.strip()}")


@contextmanager
def _server(args: argparse.Namespace) -> Iterator[Endpoints]:
    if args.url:
        host = args.url.rsplit(":", 1)[0]
        yield Endpoints(
            args.url, args.grpc_url or f"{host}:8001", args.metrics_url or f"{host}:8002"
        )
        return
    with ExitStack() as stack:
        if args.model_repository:
            repo = Path(args.model_repository)
            if not (repo / MODEL).is_dir():
                raise ReplayError(f"{repo} holds no {MODEL} model: copy examples/models/{MODEL}")
        else:
            repo = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "models"
            shutil.copytree(EXAMPLE, repo / MODEL)
        _profile(repo)
        flags = ["--monitor-drift", "--model-control-mode", "explicit", "--load-model", MODEL]
        if args.window_rows:
            flags += ["--drift-window-rows", str(args.window_rows)]
        if args.evaluate_every_rows:
            flags += ["--drift-evaluate-every-rows", str(args.evaluate_every_rows)]
        print(f"starting inferd serve {' '.join(flags)}")
        server = stack.enter_context(running_server([repo], flags, log_prefix="inferd-replay-"))
        yield Endpoints(server.http_url, server.grpc_url, server.metrics_url)


# -- the replay --------------------------------------------------------------------------------


class Sender:
    """One-row requests over gRPC on one connection."""

    def __init__(self, url: str) -> None:
        self._client = grpcclient.InferenceServerClient(url)
        self.sent = 0

    def send(self, rows: np.ndarray) -> None:
        for row in rows:
            tensor = grpcclient.InferInput(INPUT, [1, row.size], "FP32")
            tensor.set_data_from_numpy(row.reshape(1, -1).astype(np.float32))
            self._client.infer(MODEL, [tensor])
            self.sent += 1

    def close(self) -> None:
        self._client.close()


def replay(args: argparse.Namespace, endpoints: Endpoints) -> int:
    _check_server(endpoints)
    x_train, x_test, _, _ = fraud_split()
    sd = float(x_train[:, args.feature].std())
    feature = feature_name(args.feature)
    rng = np.random.default_rng(args.seed)
    start = _report(endpoints)
    base_rows = 0 if start is None else int(start["rows"])
    print(
        f"server {endpoints.http} (metrics {endpoints.metrics}); watching {feature}: shift "
        f"{args.shift:+.2f} sd = {args.shift * sd:+.4f} (training sd {sd:.4f})"
    )
    first = True
    sender = Sender(endpoints.grpc)
    try:
        for phase, count, amount in (
            ("in-distribution", args.in_distribution, 0.0),
            (f"drift {args.shift:+.2f} sd", args.max_drifted, args.shift * sd),
        ):
            phase_start = sender.sent
            while sender.sent - phase_start < count:
                n = min(args.report_every, count - (sender.sent - phase_start))
                rows = shifted(x_test[rng.integers(len(x_test), size=n)], args.feature, amount)
                sender.send(rows)
                seen = _observe(endpoints, feature, base_rows + sender.sent)
                if first:  # the report exists once the monitor has seen a request
                    report = _drift(endpoints) or {}
                    settings = report.get("settings", {})
                    print("drift settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
                    print(f"\n{HEADER}")
                    first = False
                print(status_line(phase, sender.sent - phase_start, seen), flush=True)
                if amount == 0.0 and seen.alerts:
                    print(
                        f"\nFALSE ALARM: {', '.join(seen.alerts)} raised after "
                        f"{sender.sent - phase_start} in-distribution requests"
                    )
                    return 1
                if amount != 0.0 and feature in seen.alerts:
                    print(
                        f"\nALERT: {feature} raised after {sender.sent - phase_start} drifted "
                        f"requests (shift {args.shift:+.2f} sd, {seen.evaluations} evaluations "
                        f"in all); {args.in_distribution} in-distribution requests raised none"
                    )
                    return 0
    finally:
        sender.close()
    print(f"\nNO ALERT: {feature} raised nothing in {args.max_drifted} drifted requests")
    return 2


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Without --url, a server is started with --monitor-drift on free ports.",
    )
    where = parser.add_argument_group("the server")
    where.add_argument(
        "--url",
        help="HTTP host:port of a running inferd serve --monitor-drift (default: start one)",
    )
    where.add_argument("--grpc-url", help="its gRPC host:port (default: the --url host, port 8001)")
    where.add_argument(
        "--metrics-url", help="its metrics host:port (default: the --url host, port 8002)"
    )
    where.add_argument(
        "--model-repository",
        help=f"when starting a server: a repository holding {MODEL} (profiled if it has no "
        "drift_profile.json; default: a temporary copy of the example)",
    )
    where.add_argument(
        "--window-rows", type=_positive, help="when starting a server: --drift-window-rows"
    )
    where.add_argument(
        "--evaluate-every-rows",
        type=_positive,
        help="when starting a server: --drift-evaluate-every-rows",
    )
    stream = parser.add_argument_group("the replay")
    stream.add_argument(
        "--feature", type=int, default=3, help="the input column to shift, 0-19 (default 3)"
    )
    stream.add_argument(
        "--shift",
        type=float,
        default=0.5,
        help="how far to move it, in standard deviations of its training values (default 0.5)",
    )
    stream.add_argument(
        "--in-distribution",
        type=_positive,
        default=3000,
        help="in-distribution requests before the shift (default 3000)",
    )
    stream.add_argument(
        "--max-drifted",
        type=_positive,
        default=10000,
        help="give up after this many shifted requests (default 10000)",
    )
    stream.add_argument(
        "--report-every",
        type=_positive,
        default=100,
        help="print a line every N requests, once the monitor has seen them (default 100)",
    )
    stream.add_argument("--seed", type=int, default=0, help="seed of the row draws (default 0)")
    args = parser.parse_args(argv)
    if not 0 <= args.feature < 20:
        parser.error(f"--feature must be 0-19 (the model has 20 input columns), not {args.feature}")
    if args.shift == 0:
        parser.error("--shift 0 cannot drift: give a number of standard deviations, e.g. 0.5")
    if args.url and (args.model_repository or args.window_rows or args.evaluate_every_rows):
        parser.error(
            "--model-repository, --window-rows and --evaluate-every-rows configure a server this "
            "script starts: leave them out with --url (set them on your inferd serve instead)"
        )
    if not args.url and (args.grpc_url or args.metrics_url):
        parser.error("--grpc-url and --metrics-url go with --url")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        with _server(args) as endpoints:
            return replay(args, endpoints)
    except (ReplayError, ServerStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
