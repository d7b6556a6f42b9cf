"""A BYTES output asked for as JSON (``binary_data`` false) whose elements are not UTF-8: refused
naming the output, never silently sent in binary; JSON by default still falls back to binary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

NOT_UTF8 = np.array([[b"ok", b"\xff\xfe"]], dtype=object)


@pytest.fixture(scope="module")
def server(example_repo: Path) -> Iterator[ServerProcess]:
    args = ["--model-control-mode", "explicit", "--load-model", "simple_identity"]
    with running_server([example_repo], args) as proc:
        yield proc


def _input() -> httpclient.InferInput:
    item = httpclient.InferInput("INPUT0", list(NOT_UTF8.shape), "BYTES")
    item.set_data_from_numpy(NOT_UTF8)
    return item


def test_json_asked_for_non_utf8_bytes_is_a_400_naming_the_output(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
        with pytest.raises(InferenceServerException) as refused:
            client.infer("simple_identity", [_input()], outputs=wanted)
        assert refused.value.status() == "400"
        assert "output 'OUTPUT0' was requested with 'binary_data' false" in str(refused.value)


def test_default_json_falls_back_to_binary(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        for wanted in (None, [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]):
            result = client.infer("simple_identity", [_input()], outputs=wanted)
            assert result.as_numpy("OUTPUT0").tolist() == NOT_UTF8.tolist()
