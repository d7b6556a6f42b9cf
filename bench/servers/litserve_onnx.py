"""A LitServe server whose LitAPI runs an ONNX file with onnxruntime.

    python litserve_onnx.py MODEL.onnx PORT MAX_BATCH_SIZE BATCH_TIMEOUT_S

It accepts the same KServe v2 JSON body as the other servers on POST /predict and answers with
v2-style JSON outputs. With MAX_BATCH_SIZE > 1, LitServe's own batching (``max_batch_size`` and
``batch_timeout`` on the LitAPI, as its docs recommend) gathers requests; ``batch`` stacks them and
``unbatch`` splits the outputs.
"""

import sys

import litserve as ls
import numpy as np
import onnxruntime as ort

DTYPES = {"FP32": np.float32, "INT64": np.int64, "INT32": np.int32, "FP64": np.float64}
V2_NAMES = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}


class OnnxAPI(ls.LitAPI):
    def __init__(self, path: str, **kwargs):
        super().__init__(**kwargs)
        self.path = path

    def setup(self, device):
        self.session = ort.InferenceSession(self.path, providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.session.get_outputs()]

    def decode_request(self, request):
        return {
            i["name"]: np.asarray(i["data"], dtype=DTYPES[i["datatype"]]).reshape(i["shape"])
            for i in request["inputs"]
        }

    def batch(self, inputs):
        return {name: np.concatenate([x[name] for x in inputs]) for name in inputs[0]}

    def predict(self, feeds):
        return self.session.run(self.outputs, feeds)

    def unbatch(self, output):
        return [[array[i : i + 1] for array in output] for i in range(len(output[0]))]

    def encode_response(self, output):
        return {
            "outputs": [
                {
                    "name": name,
                    "shape": list(array.shape),
                    "datatype": V2_NAMES.get(array.dtype, str(array.dtype)),
                    "data": array.ravel().tolist(),
                }
                for name, array in zip(self.outputs, output, strict=True)
            ]
        }


if __name__ == "__main__":
    path, port = sys.argv[1], int(sys.argv[2])
    max_batch, timeout = int(sys.argv[3]), float(sys.argv[4])
    kwargs = {"max_batch_size": max_batch, "batch_timeout": timeout} if max_batch > 1 else {}
    server = ls.LitServer(OnnxAPI(path, **kwargs), accelerator="cpu")
    server.run(host="127.0.0.1", port=port, generate_client_file=False)
