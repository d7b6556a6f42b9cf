"""Progress written to a pipe or a log: a few plain lines, never a bar redrawn at every step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inferd.examples.build import build_examples
from inferd.tools.batch.progress import LineProgress

pytestmark = pytest.mark.e2e

BAR_MARKS = ("\r", "━", "█", "\x1b[")


def _batch(example_repo: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    rows = np.arange(16_000, dtype=np.int32).reshape(1000, 16)
    np.savez(tmp_path / "rows.npz", INPUT0=rows, INPUT1=np.ones_like(rows))
    return subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "batch", "simple",
         "--model-repository", str(example_repo), "--input", str(tmp_path / "rows.npz"),
         "--output", str(tmp_path / "out"), "--shard-rows", "16", *extra],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_batch_progress_to_a_pipe_is_a_few_plain_lines(example_repo: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    done = _batch(example_repo, tmp_path, "--progress")  # 63 shards: 63 updates
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert not [mark for mark in BAR_MARKS if mark in done.stderr]
    assert 1 <= len(lines) <= 11, lines  # a line at every tenth of the rows at most
    assert all(line.startswith("rows ") for line in lines), lines
    assert lines[-1].startswith("rows 1,000/1,000 (100 %)")
    assert "1,000 rows written" in done.stdout


def test_batch_draws_no_progress_into_a_pipe_by_default(example_repo: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    done = _batch(example_repo, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_line_progress_writes_at_tenths_and_after_a_quiet_spell() -> None:
    now = [0.0]
    out: list[str] = []

    class Sink:
        def write(self, text: str) -> int:
            out.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    progress = LineProgress(Sink(), every_s=30.0, clock=lambda: now[0])  # type: ignore[arg-type]
    progress.start(1000, 0)
    for _ in range(99):  # 990 rows in steps of 10: a line at 100, 200, ... 900
        progress.advance(10, 0)
    assert "".join(out).count("\n") == 9
    now[0] = 31.0
    progress.advance(1, 1)  # no new tenth, but 31 s since the last line
    assert "".join(out).count("\n") == 10
    progress.advance(9, 0)
    progress.stop()  # the line at the last row already said it
    text = "".join(out)
    assert text.count("\n") == 11
    assert text.splitlines()[-1].startswith("rows 1,000/1,000 (100 %)")
    assert "1 bad" in text.splitlines()[-1]


def test_building_the_examples_into_a_log_prints_one_line_per_model(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    names = ("simple", "simple_int8", "simple_string")
    assert build_examples(tmp_path, progress=True, names=names) == list(names)
    out, err = capfd.readouterr()
    assert not [mark for mark in BAR_MARKS if mark in out + err]
    assert [line.split(":")[0] for line in (out + err).splitlines()] == list(names)
