"""digits_postprocess: the probabilities of the digits 0..9 -> the top digit's name and score."""

import numpy as np
import triton_python_backend_utils as pb_utils

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            scores = pb_utils.get_input_tensor_by_name(request, "probabilities").as_numpy()
            top = np.argmax(scores, axis=1)
            names = np.array([[NAMES[i].encode()] for i in top], dtype=np.object_)
            confidence = scores[np.arange(len(top)), top].reshape(-1, 1).astype(np.float32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("digit", names),
                        pb_utils.Tensor("confidence", confidence),
                    ]
                )
            )
        return responses
