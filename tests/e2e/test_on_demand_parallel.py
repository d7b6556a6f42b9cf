"""On-demand loads of different models run at the same time (``--model-load-thread-count``):
two cold models requested together load in overlapping intervals, within the memory budget."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Barrier

import pytest

from inferd.testing import ServerProcess, running_server
from tests.e2e.test_on_demand import _index, _infer_http, _metric, _metrics, table_model, write

pytestmark = pytest.mark.e2e

SLOW = ("m1", "m2")  # the names _infer_http knows the answers of
# thousands of warm-up runs inside each load: loads long enough to overlap on any machine
WARMUP = """
model_warmup [ {{
  name: "w" batch_size: 1 count: {count}
  inputs {{ key: "X" value: {{ data_type: TYPE_FP32 dims: [ 1, 16 ] zero_data: true }} }}
  inputs {{ key: "I" value: {{ data_type: TYPE_INT64 dims: [ 1 ] zero_data: true }} }}
}} ]
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("parallel_repo")
    for value, name in enumerate(SLOW, start=1):
        folder = write(root, name, table_model(float(value)))
        with (folder / "config.pbtxt").open("a") as f:
            f.write(WARMUP.format(count=20000))
    return root


@pytest.fixture(scope="module")
def sizes(repo: Path) -> dict[str, int]:
    """Each model's size measured loading one at a time, and the server's baseline."""
    args = ["--model-control-mode", "on-demand", "--model-memory-budget", "100%"]
    args += ["--model-load-thread-count", "1"]
    with running_server([repo], args) as proc:
        for name in SLOW:
            _infer_http(proc, name)
        index = _index(proc)
        found = {name: int(index[name]["memory_bytes"]) for name in SLOW}
        found["baseline"] = int(_metric(_metrics(proc), "inferd_model_memory_baseline_bytes"))
    return found


@pytest.fixture(scope="module")
def server(repo: Path, sizes: dict[str, int]) -> Iterator[ServerProcess]:
    # room for both models three times over: two loads at once hold their transient peaks
    # together, the loader keeps the measured resident set (not only the sizes) within the
    # budget, and a model over a quarter of the room would wait for the other's load to end
    budget = sizes["baseline"] + 3 * (sizes["m1"] + sizes["m2"])
    args = ["--model-control-mode", "on-demand", "--model-memory-budget", str(budget)]
    args += ["--model-load-thread-count", "2"]
    with running_server([repo], args) as proc:
        yield proc


def test_two_cold_models_load_at_the_same_time_within_the_budget(server: ServerProcess) -> None:
    barrier = Barrier(len(SLOW))

    def request(name: str) -> None:
        barrier.wait(timeout=60)
        _infer_http(server, name)  # checks the answer

    with ThreadPoolExecutor(len(SLOW)) as pool:
        list(pool.map(request, SLOW))
    log = server.log_path.read_text()
    starts = [line for line in log.splitlines() if "loading on demand" in line]
    assert len(starts) == 2, starts
    # the second load started while the first was under way
    assert any(", 2 loads under way," in line for line in starts), starts
    text = _metrics(server)
    budget = _metric(text, "inferd_model_memory_budget_bytes")
    baseline = _metric(text, "inferd_model_memory_baseline_bytes")
    resident = [_metric(text, "inferd_model_resident_bytes", f'{{model="{n}"}}') for n in SLOW]
    assert all(size > 0 for size in resident)
    assert baseline + sum(resident) <= budget
    assert _metric(text, "inferd_model_evictions_total") == 0
