"""Stream the responses of the decoupled example model `repeat_int32` over gRPC.

inferd serve --model-repository examples/models
python examples/clients/repeat_stream.py --url localhost:8001
"""

from __future__ import annotations

import argparse
import queue

import numpy as np
import tritonclient.grpc as grpcclient


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="localhost:8001")
    parser.add_argument("--count", type=int, default=5)
    args = parser.parse_args()
    data = {
        "IN": np.arange(args.count, dtype=np.int32),
        "DELAY": np.full(args.count, 100_000, dtype=np.uint32),  # 0.1 s between responses
        "WAIT": np.array([0], dtype=np.uint32),
    }
    inputs = []
    for name, array in data.items():
        item = grpcclient.InferInput(name, list(array.shape), "INT32" if name == "IN" else "UINT32")
        item.set_data_from_numpy(array)
        inputs.append(item)
    responses: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(args.url) as client:
        client.start_stream(callback=lambda result, error: responses.put(error or result))
        client.async_stream_infer("repeat_int32", inputs, enable_empty_final_response=True)
        while True:
            result = responses.get(timeout=30)
            if isinstance(result, Exception):
                raise result
            if result.get_response().parameters["triton_final_response"].bool_param:
                print("final")
                break
            print("OUT", result.as_numpy("OUT")[0], "IDX", result.as_numpy("IDX")[0])
        client.stop_stream()


if __name__ == "__main__":
    main()
