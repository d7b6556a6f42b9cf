"""``inferd serve``'s payload log and tracing flags: what they make of the server configuration,
and the one-line refusals of what would do nothing or cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.cli.main import build_parser
from inferd.cli.serve import config_from_args
from inferd.errors import InferdError
from inferd.monitoring.payload_log import PayloadLogSettings
from inferd.monitoring.tracing import TraceSettings
from inferd.server.config import ServerConfig


def config(*flags: str) -> ServerConfig:
    args = build_parser().parse_args(["serve", "--model-repository", "models", *flags])
    return config_from_args(args)


def test_nothing_asked_nothing_built() -> None:
    cfg = config()
    assert cfg.payload_log is None
    assert cfg.tracing is None


def test_every_payload_log_flag_reaches_the_settings(tmp_path: Path) -> None:
    cfg = config(
        f"--payload-log={tmp_path}",
        "--payload-log-rate=0.1",
        "--payload-log-rate=fraud=1",
        "--payload-log-models=fraud,simple",
        "--payload-log-models=digits",
        "--payload-log-redact=ssn,card",
        "--payload-log-format=parquet",
        "--payload-log-rotate-bytes=4096",
        "--payload-log-rotate-secs=0",
        "--payload-log-queue-size=7",
        "--payload-log-queue-bytes=1000",
        "--payload-log-max-bytes=8192",
        "--payload-log-max-age=12h",
    )
    assert cfg.payload_log == PayloadLogSettings(
        directory=tmp_path,
        rate=0.1,
        model_rates={"fraud": 1.0},
        models=frozenset({"fraud", "simple", "digits"}),
        redact=frozenset({"ssn", "card"}),
        format="parquet",
        rotate_bytes=4096,
        rotate_secs=0.0,
        queue_requests=7,
        queue_bytes=1000,
        max_bytes=8192,
        max_age_secs=12 * 3600.0,
    )


def test_the_trace_flags_reach_the_settings(tmp_path: Path) -> None:
    cfg = config(
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=10",
        f"--trace-config=opentelemetry,file={tmp_path / 'spans.jsonl'}",
    )
    assert cfg.tracing == TraceSettings(rate=10, file=tmp_path / "spans.jsonl")


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--payload-log-format=parquet"], "--payload-log-format needs --payload-log DIR"),
        (["--payload-log-redact=x"], "--payload-log-redact needs --payload-log DIR"),
        (["--payload-log-max-bytes=0"], "--payload-log-max-bytes needs --payload-log DIR"),
        (["--payload-log-max-age=7d"], "--payload-log-max-age needs --payload-log DIR"),
        (["--payload-log=/tmp/x", "--payload-log-max-bytes=-1"], "max-bytes must be >= 0"),
        (["--payload-log=/tmp/x", "--payload-log-max-bytes=4096"], "less than one file"),
        (["--payload-log=/tmp/x", "--payload-log-max-age=-1h"], "max-age .* must be >= 0"),
        (["--payload-log=/tmp/x", "--payload-log-max-age=weekly"], "is not a duration"),
        (["--payload-log=/tmp/x", "--payload-log-rotate-bytes=10"], "at least 1024"),
        (["--payload-log=/tmp/x", "--payload-log-queue-size=0"], "must be >= 1"),
        (["--payload-log=/tmp/x", "--payload-log-rotate-secs=-1"], "must be >= 0"),
        (["--trace-config=rate=5"], "level=TIMESTAMPS"),
        (
            ["--trace-config=level=TIMESTAMPS", "--trace-config=opentelemetry,file=/nope/x"],
            "does not exist",
        ),
    ],
)
def test_refusals(flags: list[str], words: str) -> None:
    with pytest.raises(InferdError, match=words):
        config(*flags)
