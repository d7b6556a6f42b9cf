"""A decoupled text model for the tests of /v1: it answers with the words of its prompt.

* streamed (``stream`` true): one response per word, each `` word``; otherwise one response
  holding them all;
* a prompt that starts with ``params:`` is answered with the ``sampling_parameters`` it got (its
  ``stop`` sequences reversed);
* a prompt that starts with ``slow:`` is answered with ``tick`` forever, one every 20 ms, until
  the request is cancelled; the model then writes ``<marker_dir>/<request id>`` and stops.
  It writes ``<marker_dir>/<request id>.started`` when it starts such a request.
"""

import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.marker_dir = config["parameters"]["marker_dir"]["string_value"]

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.answer, args=(request,), daemon=True).start()
        return None

    def answer(self, request):
        sender = request.get_response_sender()
        prompt = _scalar(request, "text_input", b"").decode()
        stream = bool(_scalar(request, "stream", False))
        sampling = _scalar(request, "sampling_parameters", b"{}").decode()

        def send(text):
            out = pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object))
            sender.send(pb_utils.InferenceResponse([out]))

        if prompt.startswith("params:"):
            params = json.loads(sampling)
            if "stop" in params:  # reversed, so the answer does not hold a stop sequence
                params["stop"] = [stop[::-1] for stop in params["stop"]]
            send(json.dumps(params, sort_keys=True))
        elif prompt.startswith("slow:"):
            marker = os.path.join(self.marker_dir, request.request_id())
            with open(marker + ".started", "w"):
                pass
            for index in range(100000):
                if sender.is_cancelled():
                    with open(marker, "w") as f:
                        f.write(str(index))
                    break
                send(" tick")
                time.sleep(0.02)
        elif stream:
            for word in prompt.split():
                send(" " + word)
        else:
            send("".join(" " + word for word in prompt.split()))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
