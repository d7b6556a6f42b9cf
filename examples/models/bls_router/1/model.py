"""bls_router: runs the model named by MODEL on INPUT0 and INPUT1 and returns its outputs."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = pb_utils.get_input_tensor_by_name(request, "MODEL").as_numpy()[0]
            name = target.decode() if isinstance(target, bytes) else str(target)
            inputs = [
                pb_utils.Tensor(n, pb_utils.get_input_tensor_by_name(request, n).as_numpy()[None])
                for n in ("INPUT0", "INPUT1")
            ]
            call = pb_utils.InferenceRequest(
                model_name=name, requested_output_names=["OUTPUT0", "OUTPUT1"], inputs=inputs
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            outputs = [
                pb_utils.Tensor(n, pb_utils.get_output_tensor_by_name(answer, n).as_numpy()[0])
                for n in ("OUTPUT0", "OUTPUT1")
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
