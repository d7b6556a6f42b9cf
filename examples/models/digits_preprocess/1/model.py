"""digits_preprocess: 8x8 UINT8 images (0-255) -> 64 FP32 values (0-16) for `digits`."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

#: The `digits` model was trained on scikit-learn's load_digits, whose pixels run from 0 to 16.
DIGITS_MAX = 16.0


class TritonPythonModel:
    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        output_config = pb_utils.get_output_config_by_name(model_config, "input")
        self.output_dtype = pb_utils.triton_string_to_numpy(output_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "image").as_numpy()
            rows = image.reshape(image.shape[0], -1).astype(self.output_dtype)
            scaled = np.round(rows * (DIGITS_MAX / 255.0))
            out = pb_utils.Tensor("input", scaled.astype(self.output_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
