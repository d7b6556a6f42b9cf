"""``/v1/embeddings`` and the embedding model's v2 API on a real ``inferd serve`` process: the
official ``openai`` SDK (float and base64, dimensions, token arrays, usage), ``tritonclient``
with a BYTES input getting the same server-side tokenisation, OpenAI's error shape for every
refusal, and a 1 MB input tokenised off the event loop."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import raw_request
from tests.helpers.embeddings import MODEL

openai = pytest.importorskip("openai")

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Short.", "An inference server."]


@pytest.fixture(scope="module")
def server(embedding_repo: Path) -> Iterator[ServerProcess]:
    with running_server([embedding_repo], ["--openai-max-body-size", "8388608"]) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> object:
    return openai.OpenAI(base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def v2_embeddings(server: ServerProcess) -> np.ndarray:
    """The texts' embeddings through tritonclient's HTTP client (one BYTES input)."""
    triton = httpclient.InferenceServerClient(server.http_url)
    text = httpclient.InferInput("text", [len(TEXTS), 1], "BYTES")
    text.set_data_from_numpy(np.array([[t.encode()] for t in TEXTS], dtype=object))
    result = triton.infer(MODEL, [text])
    assert result.as_numpy("token_count").ravel().tolist() == [12, 4, 6]
    embedding: np.ndarray = result.as_numpy("embedding")
    return embedding


def test_tritonclient_grpc_and_http_get_the_same_embedding(
    server: ServerProcess, v2_embeddings: np.ndarray
) -> None:
    triton = grpcclient.InferenceServerClient(server.grpc_url)
    text = grpcclient.InferInput("text", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[TEXTS[1].encode()]], dtype=object))
    result = triton.infer(MODEL, [text], outputs=[grpcclient.InferRequestedOutput("embedding")])
    np.testing.assert_allclose(result.as_numpy("embedding")[0], v2_embeddings[1], atol=1e-6)
    assert result.as_numpy("token_count") is None  # only what was asked for


def test_the_embedding_model_is_listed(client: object) -> None:
    ids = [m.id for m in client.models.list()]  # type: ignore[attr-defined]
    assert MODEL in ids


def test_openai_sdk_floats_match_the_v2_answer(client: object, v2_embeddings: np.ndarray) -> None:
    response = client.embeddings.create(model=MODEL, input=TEXTS)  # type: ignore[attr-defined]
    assert response.object == "list"
    assert response.model == MODEL
    assert [d.index for d in response.data] == [0, 1, 2]
    got = np.array([d.embedding for d in response.data], dtype=np.float32)
    np.testing.assert_allclose(got, v2_embeddings, atol=1e-6)
    assert response.usage.prompt_tokens == 22
    assert response.usage.total_tokens == 22


def test_openai_sdk_base64_and_a_single_string(client: object, v2_embeddings: np.ndarray) -> None:
    # the SDK decodes base64 itself when it asked for it implicitly; ask explicitly to see bytes
    raw = client.embeddings.with_raw_response.create(  # type: ignore[attr-defined]
        model=MODEL, input=TEXTS[0], encoding_format="base64"
    )
    body = raw.http_response.json()
    vector = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, v2_embeddings[0], atol=1e-6)
    assert body["usage"] == {"prompt_tokens": 12, "total_tokens": 12}
    decoded = client.embeddings.create(model=MODEL, input=TEXTS[0])  # type: ignore[attr-defined]
    np.testing.assert_allclose(decoded.data[0].embedding, v2_embeddings[0], atol=1e-6)


def test_openai_sdk_dimensions_truncate_and_renormalise(
    client: object, v2_embeddings: np.ndarray
) -> None:
    response = client.embeddings.create(  # type: ignore[attr-defined]
        model=MODEL, input=TEXTS, dimensions=64
    )
    got = np.array([d.embedding for d in response.data], dtype=np.float32)
    want = v2_embeddings[:, :64] / np.linalg.norm(v2_embeddings[:, :64], axis=1, keepdims=True)
    assert got.shape == (3, 64)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_openai_sdk_token_arrays(client: object, v2_embeddings: np.ndarray) -> None:
    ids = [101, 2460, 1012, 102]  # [CLS] short . [SEP]
    one = client.embeddings.create(model=MODEL, input=ids)  # type: ignore[attr-defined]
    two = client.embeddings.create(model=MODEL, input=[ids, ids[:3]])  # type: ignore[attr-defined]
    np.testing.assert_allclose(one.data[0].embedding, v2_embeddings[1], atol=1e-6)
    assert len(two.data) == 2
    assert one.usage.prompt_tokens == 4
    assert two.usage.prompt_tokens == 7


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        ({"model": MODEL}, 400, "input", "'input' is required"),
        ({"model": MODEL, "input": []}, 400, "input", "must not be empty"),
        ({"model": MODEL, "input": [""]}, 400, "input", "input 0 is an empty string"),
        ({"model": MODEL, "input": ["a", 3.5]}, 400, "input", "input 1 must be"),
        ({"model": MODEL, "input": ["x"] * 2049}, 400, "input", "limit of 2048"),
        (
            {"model": MODEL, "input": ["ok", "word " * 300]},
            400,
            "input",
            "input 1 has 302 tokens, more than this model's max_length of 256",
        ),
        ({"model": MODEL, "input": [[101, 999999]]}, 400, "input", "outside the vocabulary"),
        (
            {"model": MODEL, "input": "x", "encoding_format": "hex"},
            400,
            "encoding_format",
            "'float' or 'base64'",
        ),
        ({"model": MODEL, "input": "x", "dimensions": 0}, 400, "dimensions", "from 1 to 384"),
        ({"model": MODEL, "input": "x", "dimensions": 385}, 400, "dimensions", "from 1 to 384"),
        ({"model": MODEL, "input": "x", "temperature": 1}, 400, "temperature", "unrecognized"),
        ({"model": "nope", "input": "x"}, 404, "model", "'nope' does not exist"),
        ({"input": "x"}, 400, "model", "'model' must be"),
    ],
)
def test_refusals_in_openai_shape(
    server: ServerProcess, body: dict[str, object], status: int, param: str, words: str
) -> None:
    import json

    reply = raw_request(
        server.http_url,
        "POST",
        "/v1/embeddings",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    assert reply.status == status, reply.body
    error = reply.json()["error"]
    assert error["param"] == param
    assert words in error["message"]
    assert error["type"] == ("invalid_request_error" if status == 400 else "not_found_error")


def test_the_sdk_raises_its_own_exceptions(client: object) -> None:
    with pytest.raises(openai.BadRequestError, match="max_length of 256") as refused:
        client.embeddings.create(model=MODEL, input="word " * 300)  # type: ignore[attr-defined]
    assert refused.value.code == "context_length_exceeded"
    assert refused.value.param == "input"
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="nope", input="x")  # type: ignore[attr-defined]


def test_a_1mb_input_is_tokenised_off_the_event_loop(server: ServerProcess) -> None:
    """While the server tokenises four 1 MB texts (refused afterwards: too many tokens), the
    health endpoint keeps answering: no answer waits for a large share of the tokenising."""
    big = ("lorem ipsum dolor sit amet " * 40000)[: 1 << 20]
    triton = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
    text = httpclient.InferInput("text", [4, 1], "BYTES")
    text.set_data_from_numpy(np.array([[big.encode()]] * 4, dtype=object))
    outcome: list[BaseException] = []

    def infer() -> None:
        try:
            triton.infer(MODEL, [text])
        except Exception as exc:
            outcome.append(exc)

    worker = threading.Thread(target=infer)
    started = time.monotonic()
    worker.start()
    waits: list[float] = []
    while worker.is_alive():
        sent = time.monotonic()
        assert raw_request(server.http_url, "GET", "/v2/health/live").status == 200
        waits.append(time.monotonic() - sent)
    worker.join()
    took = time.monotonic() - started
    assert outcome, "the 1 MB texts should be refused"
    assert "max_length" in str(outcome[0])
    assert len(waits) >= 3
    # tokenising on the loop would hold a health answer for most of the request's time
    assert max(waits) < took / 2
