"""Triton-style ``model.py`` for inferd's Python backend (bench/python_throughput.py).

The benchmark copies this file as ``<repo>/features/1/model.py`` and ``py_features.py`` next to
it (the version directory is on the worker's ``sys.path``, as in Triton). With dynamic batching
``execute`` gets several requests: it stacks their rows, scores them in one call and cuts the
result back per request, as a Triton Python model written for batching does.
"""

import numpy as np
import triton_python_backend_utils as pb_utils
from py_features import score


class TritonPythonModel:
    def execute(self, requests):
        rows = [pb_utils.get_input_tensor_by_name(r, "input").as_numpy() for r in requests]
        scores = score(np.concatenate(rows) if len(rows) > 1 else rows[0])
        responses, start = [], 0
        for x in rows:
            out = scores[start : start + len(x)]
            start += len(x)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("output", out)]))
        return responses
