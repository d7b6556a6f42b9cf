"""The smallest MLServer custom runtime that serves an ONNX file with onnxruntime.

MLServer ships no ONNX Runtime package, so this follows its custom-runtime guide: subclass
``MLModel``, build the session in ``load``, decode the v2 request with the codecs in ``predict``.
model-settings.json names it as ``"implementation": "mlserver_onnx.OnnxModel"`` and gives the file
as ``parameters.uri``. Adaptive batching (``max_batch_size`` / ``max_batch_time``) is MLServer's
own: it concatenates requests along the first dimension before ``predict`` and splits after.
"""

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class OnnxModel(MLModel):
    async def load(self) -> bool:
        path = await get_model_uri(self._settings)
        self._session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self._outputs = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        results = self._session.run(self._outputs, feeds)
        return InferenceResponse(
            model_name=self.name,
            outputs=[
                NumpyCodec.encode_output(name, array)
                for name, array in zip(self._outputs, results, strict=True)
            ],
        )
