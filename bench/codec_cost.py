"""What the codecs cost per request, each protocol on its own, with no server around them.

    .venv/bin/python bench/codec_cost.py [--width 64] [--outputs 10] [--seconds 1]

Builds the request a client sends for a model with one FP32 input of ``width`` values and one
FP32 output of ``outputs`` values (the bench's small MLP by default), the way tritonclient
encodes it (HTTP JSON, HTTP binary, gRPC), then times in a loop: decoding the request bytes into
an ``InferRequest`` and encoding the ``InferResponse`` into what the front end writes (for gRPC
including protobuf parsing and serialising, as grpcio does around the servicer). It prints
microseconds per request for each step: the part of the server's cost that is inferd's own
codecs, to set beside the whole-server figures of ``bench/run.py``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2

from inferd.codecs import v2_grpc, v2_http
from inferd.core.inference import InferResponse


def _per_call_us(fn: Callable[[], Any], seconds: float) -> float:
    for _ in range(200):
        fn()
    best = float("inf")
    for _ in range(3):  # best of three windows: the least disturbed
        calls = 0
        start = time.perf_counter()
        deadline = start + seconds / 3
        while True:
            for _ in range(100):
                fn()
            calls += 100
            now = time.perf_counter()
            if now >= deadline:
                break
        best = min(best, (now - start) / calls * 1e6)
    return best


def _http_body(data: np.ndarray[Any, Any], binary: bool) -> tuple[bytes, int | None]:
    tensor = httpclient.InferInput("input", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data, binary_data=binary)
    wanted = httpclient.InferRequestedOutput("output", binary_data=binary)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        [tensor], outputs=[wanted]
    )
    return body, json_size


def _grpc_bytes(data: np.ndarray[Any, Any]) -> bytes:
    msg = service_pb2.ModelInferRequest(model_name="mlp")
    tensor = msg.inputs.add(name="input", datatype="FP32", shape=list(data.shape))
    del tensor
    msg.outputs.add(name="output")
    msg.raw_input_contents.append(data.tobytes())
    return bytes(msg.SerializeToString())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=64, help="input values (default 64)")
    parser.add_argument("--outputs", type=int, default=10, help="output values (default 10)")
    parser.add_argument("--seconds", type=float, default=1.0, help="time per figure (default 1)")
    args = parser.parse_args()

    data = np.random.default_rng(0).random((1, args.width), dtype=np.float32)
    result = np.random.default_rng(1).random((1, args.outputs), dtype=np.float32)
    rows: list[tuple[str, str, float]] = []

    for label, binary in (("HTTP JSON", False), ("HTTP binary", True)):
        body, json_size = _http_body(data, binary)
        request = v2_http.decode_infer_request("mlp", "", body, json_size)
        response = InferResponse("mlp", "1", {"output": result})

        def decode(body: bytes = body, json_size: int | None = json_size) -> Any:
            return v2_http.decode_infer_request("mlp", "", body, json_size)

        def encode(response: InferResponse = response, request: Any = request) -> Any:
            header, blobs = v2_http.encode_infer_response(response, request)
            return b"".join((header, *blobs))

        rows.append((label, "decode request", _per_call_us(decode, args.seconds)))
        rows.append((label, "encode response", _per_call_us(encode, args.seconds)))

    raw = _grpc_bytes(data)
    response = InferResponse("mlp", "1", {"output": result})
    parse = service_pb2.ModelInferRequest.FromString

    def grpc_decode() -> Any:
        return v2_grpc.decode_infer_request(parse(raw))

    def grpc_encode() -> Any:
        return v2_grpc.encode_infer_response(response).SerializeToString()

    rows.append(("gRPC", "parse + decode request", _per_call_us(grpc_decode, args.seconds)))
    rows.append(("gRPC", "encode + serialise response", _per_call_us(grpc_encode, args.seconds)))

    print(f"codec cost per request: FP32 [1, {args.width}] in, FP32 [1, {args.outputs}] out")
    print(f"{'protocol':<12} {'step':<30} {'µs':>7}")
    for protocol, step, us in rows:
        print(f"{protocol:<12} {step:<30} {us:7.2f}")


if __name__ == "__main__":
    main()
