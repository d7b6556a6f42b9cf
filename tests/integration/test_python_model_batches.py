"""A failed batch of a Python model: the model's code runs again request by request only when
it blamed a request's content (``InvalidArgumentError``); any other exception fails every
request of the batch, each with its own error object, and the code is not run again.

The models count their runs in a file next to ``model.py`` (they run in worker processes).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.base import LoadContext
from inferd.backends.registry import default_registry
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec
from inferd.errors import InternalError, InvalidArgumentError
from inferd.repository.autocomplete import complete_config
from inferd.repository.normalize import normalize_and_validate

CONFIG = """
name: "{name}" backend: "python" max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Both fail on 13 (a fault of the model) and refuse negative values (the request's content).
TYPED = """
import os
from inferd.backends.python.api import Model
from inferd.errors import InvalidArgumentError

RUNS = os.path.join(os.path.dirname(__file__), "runs.txt")


class Counted(Model):
    def predict(self, inputs):
        x = inputs["IN"]
        with open(RUNS, "a") as runs:
            runs.write(f"{len(x)}\\n")
        if (x == 13).any():
            raise RuntimeError("the model broke")
        if (x < 0).any():
            raise InvalidArgumentError("negative values are refused")
        return {"OUT": x * 2}
"""

TRITON = """
import os
import triton_python_backend_utils as pb_utils
from inferd.errors import InvalidArgumentError

RUNS = os.path.join(os.path.dirname(__file__), "runs.txt")


class TritonPythonModel:
    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        with open(RUNS, "a") as runs:
            runs.write(f"{len(requests)}\\n")
        if any((x == 13).any() for x in xs):
            raise RuntimeError("the model broke")
        if any((x < 0).any() for x in xs):
            raise InvalidArgumentError("negative values are refused")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]) for x in xs]
"""

CPU = InstanceGroupSpec(name="g", kind="KIND_CPU", count=1)


class Counted:
    def __init__(self, root: Path, name: str, source: str) -> None:
        model_dir = root / name
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
        config_text = CONFIG.replace("{name}", name)
        (model_dir / "config.pbtxt").write_text(config_text)
        self.runs_file = model_dir / "1" / "runs.txt"
        registry = default_registry(load_entry_points=False)
        cfg = parse_pbtxt(config_text, str(model_dir / "config.pbtxt"))
        complete_config(cfg, model_dir, [1], registry, auto_complete=True)
        normalize_and_validate(cfg, model_dir)
        spec = spec_from_proto(cfg)
        ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
        self.model = registry.get("python").load(ctx)
        self.instance = self.model.create_instance(CPU, 0)

    def execute(self, *values: int) -> list[Any]:
        requests = [
            InferRequest("m", {"IN": np.array([[v]], np.int32)}, id=f"r{i}")
            for i, v in enumerate(values)
        ]
        self.runs_file.unlink(missing_ok=True)
        results: list[Any] = self.instance.execute(requests)
        return results

    def runs(self) -> list[int]:
        return [int(line) for line in self.runs_file.read_text().split()]

    def close(self) -> None:
        self.instance.close()
        self.model.close()


@pytest.fixture(scope="module", params=["typed", "triton"])
def counted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Counted]:
    source = TYPED if request.param == "typed" else TRITON
    made = Counted(tmp_path_factory.mktemp("python_batches"), request.param, source)
    try:
        yield made
    finally:
        made.close()


def test_a_fault_fails_the_batch_without_running_the_model_again(counted: Counted) -> None:
    results = counted.execute(1, 13, 2)
    assert counted.runs() == [3]
    assert all(isinstance(r, InternalError) for r in results), results
    assert all("RuntimeError: the model broke" in r.message for r in results)
    assert len({id(r) for r in results}) == 3


def test_a_request_at_fault_is_found_by_running_each_alone(counted: Counted) -> None:
    ok, bad, also_ok = counted.execute(1, -1, 2)
    assert counted.runs() == [3, 1, 1, 1]
    assert isinstance(bad, InvalidArgumentError), bad
    assert "negative values are refused" in bad.message
    assert ok["OUT"].tolist() == [[2]]
    assert also_ok["OUT"].tolist() == [[4]]


def test_a_batch_that_succeeds_runs_once(counted: Counted) -> None:
    results = counted.execute(1, 2, 3)
    assert counted.runs() == [3]
    assert [r["OUT"].tolist() for r in results] == [[[2]], [[4]], [[6]]]
