"""LitServe server for the pure-Python model of bench/python_throughput.py.

    python litserve_features.py PORT WORKERS MAX_BATCH_SIZE BATCH_TIMEOUT_S

``LitServer(accelerator="cpu", workers_per_device=WORKERS)``: LitServe's worker processes, fed
through its request/response queues (its documented way to use several cores). It takes the
KServe v2 JSON body on POST /predict and answers v2-style JSON. With MAX_BATCH_SIZE > 1 the LitAPI
batches (``max_batch_size``, ``batch_timeout``); ``batch`` stacks the rows, ``unbatch`` splits.
"""

import sys

import litserve as ls
import numpy as np
from py_features import score


class FeaturesAPI(ls.LitAPI):
    def setup(self, device):
        pass

    def decode_request(self, request):
        (tensor,) = request["inputs"]
        return np.asarray(tensor["data"], dtype=np.float32).reshape(tensor["shape"])

    def batch(self, inputs):
        return np.concatenate(inputs)

    def predict(self, x):
        return score(x)

    def unbatch(self, output):
        return [output[i : i + 1] for i in range(len(output))]

    def encode_response(self, output):
        return {
            "outputs": [
                {
                    "name": "output",
                    "shape": list(output.shape),
                    "datatype": "FP32",
                    "data": output.ravel().tolist(),
                }
            ]
        }


if __name__ == "__main__":
    port, workers = int(sys.argv[1]), int(sys.argv[2])
    max_batch, timeout = int(sys.argv[3]), float(sys.argv[4])
    kwargs = {"max_batch_size": max_batch, "batch_timeout": timeout} if max_batch > 1 else {}
    server = ls.LitServer(FeaturesAPI(**kwargs), accelerator="cpu", workers_per_device=workers)
    server.run(host="127.0.0.1", port=port, generate_client_file=False)
