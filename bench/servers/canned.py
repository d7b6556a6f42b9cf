"""A canned-response v2 server: the network stacks' own minimum on this machine.

    python bench/servers/canned.py MODEL_DIR --http-port 18300 --grpc-port 18301

It runs the stacks inferd runs, set up the way inferd sets them up, with nothing behind them:
inferd's own HTTP/1.1 edge (httptools' parser, ``TCP_NODELAY``) on uvloop serving a raw ASGI 3
app, and
grpc.aio with inferd's channel options, in one process on one event loop. Every reply is bytes
computed once at start-up from MODEL_DIR's ``config.pbtxt`` (a Triton model directory): the
model's metadata and configuration, and one inference reply for a batch-1 request (fixed
output values of the configured shape and type), in the three forms perf_analyzer reads:

- HTTP with binary tensors (the request carries ``Inference-Header-Content-Length``),
- HTTP JSON (any other request),
- gRPC ``ModelInferResponse``, serialised once; requests are not parsed.

Request bodies are read to the end and dropped. No inferd code runs per request beyond its HTTP
edge: inferd is otherwise imported at start-up only for its gRPC channel options, so both servers
use the same ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import uvloop
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2, service_pb2

SERVICE = "inference.GRPCInferenceService"
JSON = b"application/json"
# config enum name -> (v2 datatype, numpy dtype)
TYPES = {"TYPE_FP32": ("FP32", np.float32), "TYPE_INT64": ("INT64", np.int64)}


@dataclass(frozen=True)
class Reply:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def _json_reply(value: Any, status: int = 200) -> Reply:
    body = json.dumps(value, separators=(",", ":")).encode()
    return Reply(status, [(b"content-type", JSON), (b"content-length", b"%d" % len(body))], body)


@dataclass(frozen=True)
class Canned:
    """Every answer, precomputed."""

    name: str
    config: Any  # model_config_pb2.ModelConfig
    outputs: list[tuple[str, str, list[int], np.ndarray]]  # name, datatype, shape, values

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> Canned:
        config = text_format.Parse(
            (model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
        )
        batch = [1] if config.max_batch_size > 0 else []
        outputs = []
        for out in config.output:
            datatype, dtype = TYPES[model_config_pb2.DataType.Name(out.data_type)]
            shape = batch + list(out.dims)
            values = np.linspace(-1, 1, int(np.prod(shape))).astype(dtype).reshape(shape)
            outputs.append((out.name, datatype, shape, values))
        return cls(config.name or model_dir.name, config, outputs)

    def _tensors(self, tensors: Any) -> list[dict[str, Any]]:
        batch = [-1] if self.config.max_batch_size > 0 else []
        return [
            {
                "name": t.name,
                "datatype": TYPES[model_config_pb2.DataType.Name(t.data_type)][0],
                "shape": batch + list(t.dims),
            }
            for t in tensors
        ]

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": ["1"],
            "platform": "onnxruntime_onnx",
            "inputs": self._tensors(self.config.input),
            "outputs": self._tensors(self.config.output),
        }

    def http_routes(self) -> dict[tuple[str, str], Reply]:
        model = f"/v2/models/{self.name}"
        empty = Reply(200, [(b"content-length", b"0")], b"")
        config = json_format.MessageToDict(self.config, preserving_proto_field_name=True)
        for tensor in (*config.get("input", []), *config.get("output", [])):
            tensor["dims"] = [int(d) for d in tensor["dims"]]  # int64 renders as strings
        return {
            ("GET", "/v2/health/live"): empty,
            ("GET", "/v2/health/ready"): empty,
            ("GET", "/v2"): _json_reply({"name": "canned", "version": "0", "extensions": []}),
            ("GET", model): _json_reply(self.metadata()),
            ("GET", f"{model}/ready"): empty,
            ("GET", f"{model}/config"): _json_reply(config),
        }

    def http_infer(self, binary: bool) -> Reply:
        head: dict[str, Any] = {"model_name": self.name, "model_version": "1", "outputs": []}
        blobs = []
        for name, datatype, shape, values in self.outputs:
            entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
            if binary:
                blob = values.astype(values.dtype.newbyteorder("<")).tobytes()
                entry["parameters"] = {"binary_data_size": len(blob)}
                blobs.append(blob)
            else:
                entry["data"] = values.ravel().tolist()
            head["outputs"].append(entry)
        if not binary:
            return _json_reply(head)
        header = json.dumps(head, separators=(",", ":")).encode()
        body = header + b"".join(blobs)
        headers = [
            (b"content-type", b"application/octet-stream"),
            (b"inference-header-content-length", b"%d" % len(header)),
            (b"content-length", b"%d" % len(body)),
        ]
        return Reply(200, headers, body)

    def grpc_replies(self) -> dict[str, bytes]:
        """Serialised replies by RPC name (requests are never parsed)."""
        infer = service_pb2.ModelInferResponse(model_name=self.name, model_version="1")
        for name, datatype, shape, values in self.outputs:
            infer.outputs.add(name=name, datatype=datatype, shape=shape)
            infer.raw_output_contents.append(
                values.astype(values.dtype.newbyteorder("<")).tobytes()
            )
        meta = self.metadata()
        metadata = service_pb2.ModelMetadataResponse(
            name=meta["name"], versions=meta["versions"], platform=meta["platform"]
        )
        for kind in ("inputs", "outputs"):
            for t in meta[kind]:
                getattr(metadata, kind).add(
                    name=t["name"], datatype=t["datatype"], shape=t["shape"]
                )
        replies = {
            "ModelInfer": infer,
            "ModelMetadata": metadata,
            "ModelConfig": service_pb2.ModelConfigResponse(config=self.config),
            "ServerLive": service_pb2.ServerLiveResponse(live=True),
            "ServerReady": service_pb2.ServerReadyResponse(ready=True),
            "ModelReady": service_pb2.ModelReadyResponse(ready=True),
            "ServerMetadata": service_pb2.ServerMetadataResponse(name="canned", version="0"),
        }
        return {rpc: reply.SerializeToString() for rpc, reply in replies.items()}


class CannedApp:
    """A raw ASGI 3 app answering from precomputed replies."""

    def __init__(self, canned: Canned) -> None:
        self.routes = canned.http_routes()
        model = f"/v2/models/{canned.name}"
        self.infer_paths = {f"{model}/infer", f"{model}/versions/1/infer"}
        self.binary = canned.http_infer(binary=True)
        self.json = canned.http_infer(binary=False)
        self.not_found = _json_reply({"error": "not found"}, 404)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if method == "POST" and path in self.infer_paths:
            binary = False
            for name, _ in scope["headers"]:
                if name == b"inference-header-content-length":
                    binary = True
                    break
            more = True
            while more:  # read the request to its end, keep nothing
                more = (await receive()).get("more_body", False)
            reply = self.binary if binary else self.json
        else:
            reply = self.routes.get((method, path), self.not_found)
        start = {"type": "http.response.start", "status": reply.status, "headers": reply.headers}
        await send(start)
        await send({"type": "http.response.body", "body": reply.body})


def grpc_handler(replies: dict[str, bytes]) -> grpc.GenericRpcHandler:
    def answer(reply: bytes) -> Any:
        async def rpc(request: bytes, context: Any) -> bytes:
            return reply

        # no (de)serialisers: the request stays bytes and the reply goes out as it is
        return grpc.unary_unary_rpc_method_handler(rpc)

    return grpc.method_handlers_generic_handler(
        SERVICE, {rpc: answer(reply) for rpc, reply in replies.items()}
    )


async def serve(canned: Canned, host: str, http_port: int, grpc_port: int) -> None:
    from inferd.frontends.grpc.server import server_options  # start-up only
    from inferd.frontends.http.server import start_http_server

    http, _ = await start_http_server(CannedApp(canned), host, http_port)
    rpc = grpc.aio.server(options=server_options())
    rpc.add_generic_rpc_handlers((grpc_handler(canned.grpc_replies()),))
    if rpc.add_insecure_port(f"{host}:{grpc_port}") == 0:
        raise SystemExit(f"cannot bind the gRPC port {grpc_port}")
    await rpc.start()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"canned {canned.name}: HTTP {host}:{http_port}, gRPC {host}:{grpc_port}", flush=True)
    await stop.wait()
    await rpc.stop(1)
    await http.stop(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path, help="a Triton model directory (config.pbtxt)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=18300)
    parser.add_argument("--grpc-port", type=int, default=18301)
    args = parser.parse_args()
    canned = Canned.from_model_dir(args.model_dir)
    uvloop.run(serve(canned, args.host, args.http_port, args.grpc_port))


if __name__ == "__main__":
    main()
