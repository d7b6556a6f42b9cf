"""The canary example end to end: a digits model retrained on corrupted labels is rolled back
by the server itself, from the disagreement of its answers with the primary's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_the_worse_digits_model_is_rolled_back(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "inferd.examples.canary_digits", "--repository", str(tmp_path),
         "--requests", "300"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    accuracy = re.search(r"version 1 is right on ([\d.]+)%.*version 2 on ([\d.]+)%", out)
    assert accuracy is not None, out
    assert float(accuracy.group(1)) > 95.0
    assert float(accuracy.group(2)) < 80.0
    assert "stage 1, 10% to version 2, running: started" in out
    rolled = re.search(r"rolled_back: disagreement ([\d.]+)% \((\d+) of (\d+) compared\)", out)
    assert rolled is not None, out
    assert float(rolled.group(1)) > 10.0
    assert int(rolled.group(3)) == 20
    assert "canary: rolled_back" in out
    v2 = re.search(r"v2: answered (\d+) requests", out)
    assert v2 is not None
    # the 20th comparison rolled it back (one more answer may have been on its way)
    assert 20 <= int(v2.group(1)) <= 22
    assert (tmp_path / "digits_canary" / "rollout.yaml").is_file()
