"""A Python model of a sequence sees ``request.correlation_id()`` and ``request.flags()``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

CONFIG = """
name: "seq_meta"
backend: "python"
max_batch_size: 0
sequence_batching { max_sequence_idle_microseconds: 60000000 }
input [ { name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [
  { name: "CORRID", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "KIND", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "FLAGS", data_type: TYPE_UINT32, dims: [ 1 ] }
]
"""

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = request.correlation_id()
            flags = request.flags()
            assert flags & ~(pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
                             | pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END) == 0
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("CORRID", np.array([str(corrid).encode()], dtype=object)),
                pb_utils.Tensor("KIND", np.array([type(corrid).__name__.encode()], dtype=object)),
                pb_utils.Tensor("FLAGS", np.array([flags], dtype=np.uint32)),
            ]))
        return responses
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("seq_meta") / "models"
    (repo / "seq_meta" / "1").mkdir(parents=True)
    (repo / "seq_meta" / "config.pbtxt").write_text(CONFIG)
    (repo / "seq_meta" / "1" / "model.py").write_text(MODEL)
    with running_server([repo]) as proc:
        yield proc


def _answer(result: Any) -> tuple[str, str, int]:
    corrid = result.as_numpy("CORRID")[0]
    kind = result.as_numpy("KIND")[0]
    return corrid.decode(), kind.decode(), int(result.as_numpy("FLAGS")[0])


@pytest.mark.parametrize("sequence_id", [1_234_567_890_123, "utterance-7"])
def test_correlation_id_and_flags_over_grpc(server: ServerProcess, sequence_id: Any) -> None:
    item = grpcclient.InferInput("INPUT", [1], "INT32")
    item.set_data_from_numpy(np.array([1], dtype=np.int32))
    answers = []
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for start, end in ((True, False), (False, False), (False, True)):
            result = client.infer(
                "seq_meta",
                [item],
                sequence_id=sequence_id,
                sequence_start=start,
                sequence_end=end,
            )
            answers.append(_answer(result))
    kind = "int" if isinstance(sequence_id, int) else "str"
    assert answers == [
        (str(sequence_id), kind, 1),
        (str(sequence_id), kind, 0),
        (str(sequence_id), kind, 2),
    ]


def test_one_request_sequence_over_http(server: ServerProcess) -> None:
    item = httpclient.InferInput("INPUT", [1], "INT32")
    item.set_data_from_numpy(np.array([1], dtype=np.int32))
    with httpclient.InferenceServerClient(server.http_url) as client:
        result = client.infer(
            "seq_meta", [item], sequence_id=42, sequence_start=True, sequence_end=True
        )
    assert _answer(result) == ("42", "int", 3)
