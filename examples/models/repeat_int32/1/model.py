"""repeat_int32: one response per element of IN, from a thread of the model's own."""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self.repeat, args=(request,), daemon=True)
            thread.start()
            self.threads.append(thread)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None  # decoupled: the responses go through the response sender

    def repeat(self, request):
        sender = request.get_response_sender()
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
        wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
        if len(delays) != len(values):
            error = pb_utils.TritonError(
                f"DELAY has {len(delays)} elements but IN has {len(values)}",
                pb_utils.TritonError.INVALID_ARG,
            )
            sender.send(pb_utils.InferenceResponse(error=error),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        for index, (value, delay) in enumerate(zip(values, delays)):
            time.sleep(int(delay) / 1e6)
            if sender.is_cancelled():
                break
            out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
            idx = pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32))
            sender.send(pb_utils.InferenceResponse([out, idx]))
        else:
            time.sleep(int(wait[0]) / 1e6)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=5)
