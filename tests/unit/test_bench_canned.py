"""The benchmark's canned-response server answers valid v2 replies, and its ratios are right.

bench/servers/canned.py is the baseline inferd's figures are divided by: perf_analyzer has to
accept its replies (binary-tensor HTTP, JSON HTTP, gRPC ModelInferResponse) exactly as it
accepts inferd's. These checks decode them with the official tritonclient.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def canned() -> ModuleType:
    return _load(BENCH / "servers" / "canned.py")


@pytest.fixture
def mlp(tmp_path: Path, canned: ModuleType) -> Any:
    models = _load(BENCH / "models.py")
    (tmp_path / "mlp").mkdir()
    (tmp_path / "mlp" / "config.pbtxt").write_text(models.config_text("mlp", batching=False))
    return canned.Canned.from_model_dir(tmp_path / "mlp")


async def _call(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]]) -> Any:
    bodies = [{"type": "http.request", "body": b"{}", "more_body": True}]
    bodies.append({"type": "http.request", "body": b"", "more_body": False})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return bodies.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    await app(scope, receive, send)
    start, body = sent
    assert not bodies or method == "GET"
    return start["status"], dict(start["headers"]), body["body"]


async def test_binary_reply_decodes_with_tritonclient(canned: ModuleType, mlp: Any) -> None:
    app = canned.CannedApp(mlp)
    request_headers = [(b"inference-header-content-length", b"2")]
    status, headers, body = await _call(app, "POST", "/v2/models/mlp/infer", request_headers)
    assert status == 200
    length = int(headers[b"inference-header-content-length"])
    assert int(headers[b"content-length"]) == len(body)
    result = httpclient.InferResult.from_response_body(body, header_length=length)
    assert result.as_numpy("output").shape == (1, 10)


async def test_json_reply_decodes_with_tritonclient(canned: ModuleType, mlp: Any) -> None:
    status, headers, body = await _call(canned.CannedApp(mlp), "POST", "/v2/models/mlp/infer", [])
    assert status == 200
    assert headers[b"content-type"] == b"application/json"
    assert httpclient.InferResult.from_response_body(body).as_numpy("output").shape == (1, 10)


async def test_config_and_metadata_are_what_perf_analyzer_reads(
    canned: ModuleType, mlp: Any
) -> None:
    app = canned.CannedApp(mlp)
    _, _, config = await _call(app, "GET", "/v2/models/mlp/config", [])
    assert json.loads(config)["max_batch_size"] == 64
    assert json.loads(config)["input"][0]["dims"] == [64]
    _, _, meta = await _call(app, "GET", "/v2/models/mlp", [])
    output = {"name": "output", "datatype": "FP32", "shape": [-1, 10]}
    assert json.loads(meta)["outputs"] == [output]
    status, _, _ = await _call(app, "GET", "/v2/models/other", [])
    assert status == 404


def test_grpc_reply_decodes_with_tritonclient(mlp: Any) -> None:
    replies = mlp.grpc_replies()
    response = service_pb2.ModelInferResponse.FromString(replies["ModelInfer"])
    assert grpcclient.InferResult(response).as_numpy("output").shape == (1, 10)
    config = service_pb2.ModelConfigResponse.FromString(replies["ModelConfig"]).config
    assert config.max_batch_size == 64


def test_ratios_to_the_canned_baseline() -> None:
    baseline = _load(BENCH / "baseline.py")

    def cell(server: str, client: str, c: int, thr: float, p50: float) -> Any:
        variant = "canned" if server == "canned" else "off"
        return SimpleNamespace(
            model="mlp", server=server, batching=variant, client=client, concurrency=c,
            throughput=thr, p50_us=p50,
        )  # fmt: skip

    http, grpc = baseline.HTTP_BINARY, baseline.GRPC
    cells = [
        cell("canned", http, 1, 5000, 100), cell("canned", grpc, 1, 2000, 200),
        cell("canned", http, 32, 10000, 900), cell("canned", grpc, 32, 4000, 2000),
        cell("inferd", http, 1, 2500, 300), cell("inferd", grpc, 1, 1000, 500),
        cell("inferd", http, 32, 3000, 9000), cell("inferd", grpc, 32, 1500, 20000),
    ]  # fmt: skip
    assert baseline.cell_ratios(cells[4], baseline.canned_cells(cells, "mlp")) == ("0.50", "3.00")
    rows = baseline.summary(cells, "mlp", 1, 32)
    canned_row = next(r for r in rows if r.startswith("| canned"))
    inferd_row = next(r for r in rows if r.startswith("| inferd"))
    assert canned_row.split(" | ")[2:] == ["0.10", "0.20", "2.00", "10000", "4000", "0.40 |"]
    assert inferd_row.split(" | ")[2:] == [
        "0.30 (3.00x)", "0.50 (2.50x)", "1.67", "3000 (0.30x)", "1500 (0.38x)", "0.50 |",
    ]  # fmt: skip
