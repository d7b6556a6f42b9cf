"""MLServer custom runtime for the pure-Python model of bench/python_throughput.py.

model-settings.json names it as ``"implementation": "mlserver_features.FeaturesModel"``; the
server's settings.json sets ``parallel_workers`` (MLServer's documented way to scale a Python
model over cores: each worker process loads the model, requests reach it through MLServer's
inference pool). With ``max_batch_size`` / ``max_batch_time`` MLServer's adaptive batching
concatenates requests along the first dimension before ``predict`` and splits the response.
"""

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from py_features import score


class FeaturesModel(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0])
        return InferenceResponse(
            model_name=self.name, outputs=[NumpyCodec.encode_output("output", score(x))]
        )
