"""The ``llm`` backend's loading and requests, in process: its parameters (unknown, wrong and
conflicting ones refused by name), files confined to the version folder, one bad request in a
batch failing alone, a request with no stream answered whole, statistics."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.base import LoadContext
from inferd.backends.llm.runtime import LlmLoadedModel
from inferd.backends.registry import default_registry
from inferd.codecs.model_config import spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec
from inferd.errors import ConfigError, InferdError, InvalidArgumentError
from inferd.repository.config import read_model_config
from tests.helpers.tiny_llama import write_tiny_llama

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

CONFIG = """
name: "tiny"
backend: "llm"
max_batch_size: 0
model_transaction_policy {{ decoupled: {decoupled} }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }},
  {{ name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true }}
]
output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }} ]
{params}
"""


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("llm") / "hf", seed=9)


def _folder(tmp_path: Path, weights: Path, params: dict[str, str], decoupled: bool = True) -> Path:
    model_dir = tmp_path / "tiny"
    version = model_dir / "1"
    version.mkdir(parents=True)
    for item in weights.iterdir():
        (version / item.name).write_bytes(item.read_bytes())
    text = "\n".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}' for k, v in params.items()
    )
    (model_dir / "config.pbtxt").write_text(
        CONFIG.format(decoupled=str(decoupled).lower(), params=text)
    )
    return model_dir


def _load(model_dir: Path) -> LlmLoadedModel:
    spec = spec_from_proto(read_model_config(model_dir))
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    loaded: LlmLoadedModel = default_registry().get("llm").load(ctx)  # type: ignore[assignment]
    return loaded


@pytest.fixture
def loaded(tmp_path: Path, weights: Path) -> Iterator[LlmLoadedModel]:
    model = _load(_folder(tmp_path, weights, {"max_model_len": "64", "kv_cache_blocks": "16"}))
    try:
        yield model
    finally:
        model.close()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_batch": "4"}, "unknown parameter 'max_batch' for backend 'llm'"),
        ({"dtype": "int8"}, "parameter 'dtype' must be one of float32"),
        ({"device": "tpu"}, "parameter 'device' must be cpu, cuda or cuda:N"),
        ({"kv_cache_bytes": "1000000", "kv_cache_blocks": "4"}, "not both"),
        ({"kv_cache_bytes": "10"}, "kv_cache_bytes 10 holds no block"),
        ({"max_running": "0"}, "parameter 'max_running' must be an integer >= 1"),
        ({"max_model_len": "100000"}, "beyond the model's max_position_embeddings"),
        ({"max_running": "8", "max_step_tokens": "4"}, "must be at least max_running"),
        ({"enable_prefix_caching": "maybe"}, "'enable_prefix_caching' must be a boolean"),
    ],
)
def test_parameters_are_checked(
    tmp_path: Path, weights: Path, params: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(_folder(tmp_path, weights, params))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_a_kind_gpu_group_asks_for_cuda(tmp_path: Path, weights: Path) -> None:
    model_dir = _folder(tmp_path, weights, {})
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + "instance_group [{ kind: KIND_GPU gpus: [ 1 ] }]\n")
    with pytest.raises(ConfigError, match="'device' is 'cuda:1' but no CUDA device"):
        _load(model_dir)


def test_a_model_that_is_not_decoupled_is_refused(tmp_path: Path, weights: Path) -> None:
    with pytest.raises(ConfigError, match="decoupled: true"):
        _load(_folder(tmp_path, weights, {}, decoupled=False))


def test_files_must_stay_inside_the_version_folder(tmp_path: Path, weights: Path) -> None:
    model_dir = _folder(tmp_path, weights, {})
    tokenizer = model_dir / "1" / "tokenizer.json"
    outside = tmp_path / "elsewhere.json"
    tokenizer.rename(outside)
    tokenizer.symlink_to(outside)
    with pytest.raises(ConfigError, match=r"tokenizer tokenizer\.json resolves outside"):
        _load(model_dir)


def _request(prompt: Any, **extra: Any) -> InferRequest:
    inputs = {"text_input": np.array([prompt], dtype=object)}
    for name, value in extra.items():
        inputs[name] = np.array([value], dtype=object if isinstance(value, bytes) else None)
    return InferRequest("tiny", inputs)


def test_a_bad_request_fails_alone_and_one_without_a_stream_is_answered_whole(
    loaded: LlmLoadedModel,
) -> None:
    instance = loaded.create_instance(InstanceGroupSpec("tiny", "KIND_CPU", 1), 0)
    sampling = json.dumps({"temperature": 0, "max_tokens": 6, "ignore_eos": True}).encode()
    results = instance.execute(
        [
            _request(b"hello world", sampling_parameters=sampling),
            _request(b"hello", sampling_parameters=b'{"top_k": "many"}'),
            _request(b"\xff\xfe"),
            _request(b"hello " * 80),
            _request(b"hello world", sampling_parameters=sampling, exclude_input_in_output=True),
        ]
    )
    assert isinstance(results[0], dict)
    whole = results[0]["text_output"][0].decode()
    assert isinstance(results[1], InvalidArgumentError)
    assert "'top_k'" in str(results[1])
    assert isinstance(results[2], InvalidArgumentError)
    assert "not valid UTF-8" in str(results[2])
    assert isinstance(results[3], InvalidArgumentError)
    assert "max_model_len is 64" in str(results[3])
    assert isinstance(results[4], dict)
    generated = results[4]["text_output"][0].decode()
    assert whole == "hello world" + generated
    stats = loaded.statistics()
    assert stats.finished_total == 2
    assert stats.generated_tokens_total == 12
    assert stats.kv_blocks_used == 0
    assert stats.kv_blocks_total == 16


def test_unloading_fails_what_is_still_open(loaded: LlmLoadedModel) -> None:
    from inferd.backends.llm.engine import Generation
    from inferd.backends.llm.params import SamplingParams

    got: list[tuple[str | None, InferdError | None, bool]] = []
    loaded.engine.submit(
        Generation(
            [5, 6, 7],
            SamplingParams(max_tokens=50, ignore_eos=True),
            lambda text, error, final: got.append((text, error, final)),
        )
    )
    loaded.close()
    assert got
    assert got[-1][2] is True


def test_a_client_that_does_not_read_holds_up_no_other_stream(loaded: LlmLoadedModel) -> None:
    from inferd.core.streaming import ResponseSink, ResponseTiming, StreamedResponse

    instance = loaded.create_instance(InstanceGroupSpec("tiny", "KIND_CPU", 1), 0)
    release = threading.Event()
    received: dict[str, list[StreamedResponse]] = {"slow": [], "fast": []}
    ended = {name: threading.Event() for name in received}

    def deliver_to(name: str) -> Any:
        def deliver(item: StreamedResponse | None, timing: ResponseTiming) -> None:
            if name == "slow":
                release.wait(60)  # a client whose window is full: the send waits
            if item is not None:
                received[name].append(item)
                if item.final:
                    ended[name].set()

        return deliver

    sampling = json.dumps({"temperature": 0, "max_tokens": 30, "ignore_eos": True}).encode()
    requests = []
    for name in ("slow", "fast"):
        request = _request(
            b"hello world", sampling_parameters=sampling, stream=True, exclude_input_in_output=True
        )
        request.sink = ResponseSink(deliver_to(name))
        requests.append(request)
    assert instance.execute(requests) == [{}, {}]
    assert ended["fast"].wait(60), "the fast stream waited for the slow client"
    assert not ended["slow"].is_set()
    release.set()
    assert ended["slow"].wait(60)
    texts = {
        name: "".join(i.outputs["text_output"][0].decode() for i in items if i.outputs)
        for name, items in received.items()
    }
    assert texts["slow"] == texts["fast"]  # same prompt, greedy: the same text, none lost
    assert len(received["slow"]) < len(received["fast"])  # its deltas were joined while it waited


@pytest.mark.parametrize(("flag", "reuses"), [(None, True), ("true", True), ("false", False)])
def test_enable_prefix_caching_is_honoured(
    tmp_path: Path, weights: Path, flag: str | None, reuses: bool
) -> None:
    params = {"max_model_len": "64", "kv_cache_blocks": "16", "block_tokens": "4"}
    if flag is not None:
        params["enable_prefix_caching"] = flag
    model = _load(_folder(tmp_path, weights, params))
    try:
        instance = model.create_instance(InstanceGroupSpec("tiny", "KIND_CPU", 1), 0)
        sampling = json.dumps({"temperature": 0, "max_tokens": 3, "ignore_eos": True}).encode()
        prompt = b"hello world, hello server. " * 2
        first, second = (
            instance.execute([_request(prompt, sampling_parameters=sampling)])[0] for _ in range(2)
        )
        stats = model.statistics()
    finally:
        model.close()
    assert isinstance(first, dict)
    assert isinstance(second, dict)
    assert first["text_output"][0] == second["text_output"][0]
    assert (stats.prefix_cache_hit_tokens_total > 0) is reuses
    assert (stats.prefix_cache_queried_tokens_total > 0) is reuses
    assert stats.kv_blocks_used == 0
