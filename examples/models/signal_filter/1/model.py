"""signal_filter: an exponential moving average over a signal streamed in chunks.

The sequence batcher gives every request the filter's last value as FILTER_IN (0 on the first
chunk of a sequence) and START (1 on the first chunk); the model returns the new last value as
FILTER_OUT, which the server keeps for the sequence's next chunk.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.alpha = float(config["parameters"]["ALPHA"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            chunk = pb_utils.get_input_tensor_by_name(request, "CHUNK").as_numpy()
            last = float(pb_utils.get_input_tensor_by_name(request, "FILTER_IN").as_numpy()[0])
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy()[0])
            out = np.empty(chunk.shape, dtype=np.float32)
            for i, x in enumerate(chunk):
                # the first sample of a signal starts the filter at its own value
                last = float(x) if (start and i == 0) else last + self.alpha * (float(x) - last)
                out[i] = last
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("SMOOTHED", out),
                        pb_utils.Tensor("FILTER_OUT", np.array([last], dtype=np.float32)),
                    ]
                )
            )
        return responses
