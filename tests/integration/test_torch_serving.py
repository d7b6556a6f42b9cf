"""TorchScript and torch.export models served end to end: repository manager + engine, and HTTP
through the embedded server with tritonclient."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.engine import Engine
from inferd.errors import InvalidArgumentError
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from inferd.server.embedded import InferenceServer

torch = pytest.importorskip("torch")
httpclient = pytest.importorskip("tritonclient.http")


class Scale(torch.nn.Module):
    """OUTPUT__0 = INPUT__0 * INPUT__1; OUTPUT__1 = rows in the batch the module ran."""

    def forward(self, x: torch.Tensor, factor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.full((x.shape[0], 1), x.shape[0], dtype=torch.int64)
        return x * factor, rows


SCALE_CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 16
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT__1" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
dynamic_batching { max_queue_delay_microseconds: 200000 }
"""


class Softmax(torch.nn.Module):
    def forward(self, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"probabilities": torch.softmax(logits, dim=1)}


def _write_repo(repo: Path) -> Path:
    scale = repo / "scale"
    (scale / "1").mkdir(parents=True)
    torch.jit.save(torch.jit.script(Scale()), str(scale / "1" / "model.pt"))
    (scale / "config.pbtxt").write_text(SCALE_CONFIG)
    exported = repo / "softmax"  # no config.pbtxt: completed from the exported program
    (exported / "1").mkdir(parents=True)
    batch = torch.export.Dim("batch", max=64)
    program = torch.export.export(Softmax(), (torch.ones(2, 3),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(exported / "1" / "model.pt2"))
    return repo


def _scale_request(rows: int, factor: float) -> InferRequest:
    x = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
    f = np.full((rows, 1), factor, dtype=np.float32)
    return InferRequest("scale", {"INPUT__0": x, "INPUT__1": f})


async def test_engine_serves_torch_models_and_batches_requests(tmp_path: Path) -> None:
    repo = _write_repo(tmp_path)
    manager = RepositoryManager(
        [repo], default_registry(), mode=ControlMode.NONE, options=LoadOptions()
    )
    engine = Engine(manager, server_version="test")
    assert await manager.startup() == {}
    try:
        sizes = (1, 2, 3, 1)
        responses = await asyncio.gather(
            *(engine.infer(_scale_request(n, float(i + 1))) for i, n in enumerate(sizes))
        )
        for i, (n, response) in enumerate(zip(sizes, responses, strict=True)):
            want = np.arange(4 * n, dtype=np.float32).reshape(n, 4) * (i + 1)
            np.testing.assert_array_equal(response.outputs["OUTPUT__0"], want)
        # the dynamic batcher stacked concurrent requests into fewer runs than requests
        assert max(int(r.outputs["OUTPUT__1"][0, 0]) for r in responses) > max(sizes)

        with pytest.raises(InvalidArgumentError, match="unexpected shape"):
            await engine.infer(
                InferRequest(
                    "scale",
                    {
                        "INPUT__0": np.ones((1, 5), np.float32),
                        "INPUT__1": np.ones((1, 1), np.float32),
                    },
                )
            )

        spec = engine.model_config("softmax")
        assert (spec.backend, spec.platform, spec.max_batch_size) == ("pytorch", "torch_export", 4)
        logits = np.array([[0.0, 0.0, np.log(2.0)]], dtype=np.float32)
        response = await engine.infer(InferRequest("softmax", {"logits": logits}))
        np.testing.assert_allclose(response.outputs["probabilities"], [[0.25, 0.25, 0.5]])
    finally:
        await manager.close()


def test_http_with_tritonclient(tmp_path: Path) -> None:
    repo = _write_repo(tmp_path)
    with InferenceServer(repo, http_port=0) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.ports['http']}")
        try:
            assert client.is_model_ready("scale")
            metadata = client.get_model_metadata("scale")
            assert metadata["platform"] == "pytorch_libtorch"
            assert [i["name"] for i in metadata["inputs"]] == ["INPUT__0", "INPUT__1"]

            x = np.arange(8, dtype=np.float32).reshape(2, 4)
            f = np.full((2, 1), 0.5, dtype=np.float32)
            inputs = [
                httpclient.InferInput("INPUT__0", [2, 4], "FP32"),
                httpclient.InferInput("INPUT__1", [2, 1], "FP32"),
            ]
            inputs[0].set_data_from_numpy(x, binary_data=True)  # read-only on the server side
            inputs[1].set_data_from_numpy(f, binary_data=False)
            result = client.infer("scale", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), x * 0.5)

            bad = [
                httpclient.InferInput("INPUT__0", [1, 4], "FP64"),
                httpclient.InferInput("INPUT__1", [1, 1], "FP32"),
            ]
            bad[0].set_data_from_numpy(np.ones((1, 4), np.float64))
            bad[1].set_data_from_numpy(np.ones((1, 1), np.float32))
            with pytest.raises(Exception, match="unexpected datatype"):
                client.infer("scale", bad)

            # the in-process path of the same server
            out = server.infer("scale", {"INPUT__0": x, "INPUT__1": f})
            np.testing.assert_array_equal(out["OUTPUT__0"], x * 0.5)
        finally:
            client.close()
