"""The text-encoder layer on a tiny encoder (an embedding table as ONNX) and a word-level
tokenizer: what each option does, padding to the batch's longest input, and bad inputs failing
only their own request. No PyTorch needed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from inferd.backends.base import LoadContext, ModelInstance, Result
from inferd.backends.registry import default_registry
from inferd.backends.text_encoder import TextEncoderInstance, load_text_encoder
from inferd.codecs.model_config import spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec
from inferd.errors import ConfigError, InvalidArgumentError
from inferd.repository.config import read_model_config
from tests.helpers.models import finish

tokenizers = pytest.importorskip("tokenizers")

VOCAB = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3, "b": 4, "c": 5, "d": 6}
DIM = 4
# row i of the table is the hidden state of token i
TABLE = np.arange(len(VOCAB) * DIM, dtype=np.float32).reshape(len(VOCAB), DIM) - 10.0

CONFIG = """
name: "tiny"
backend: "{backend}"
default_model_filename: "model.onnx"
max_batch_size: 8
input [ {{ name: "text" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [
  {{ name: "embedding" data_type: TYPE_FP32 dims: [ {dim} ] }},
  {{ name: "token_count" data_type: TYPE_INT64 dims: [ 1 ] }}
]
parameters {{ key: "tokenizer" value {{ string_value: "tokenizer.json" }} }}
parameters {{ key: "encoder_inputs" value {{ string_value: "input_ids,attention_mask" }} }}
parameters {{ key: "encoder_output" value {{ string_value: "hidden" }} }}
{extra}
"""


def _encoder() -> bytes:
    """``hidden[b, s] = TABLE[input_ids[b, s]]``; the mask is an input the graph ignores."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["hidden"], axis=0)],
        "tiny_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"]),
        ],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["b", "s", DIM])],
        [numpy_helper.from_array(TABLE, "table")],
    )
    return finish(graph)


def _tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tokenizer = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    tokenizer.enable_padding(length=16)  # the server must switch this off
    tokenizer.save(str(path))


class Recorder:
    """The real onnxruntime instance, noting the shape of every batch it is given."""

    def __init__(self, inner: ModelInstance) -> None:
        self.inner = inner
        self.shapes: list[tuple[int, ...]] = []

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        self.shapes += [r.inputs["input_ids"].shape for r in requests]
        return self.inner.execute(requests)

    def close(self) -> None:
        self.inner.close()


def _instance(
    tmp_path: Path, extra: str = "", backend: str = "onnxruntime"
) -> tuple[TextEncoderInstance, Recorder]:
    model_dir = tmp_path / "tiny"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.onnx").write_bytes(_encoder())
    _tokenizer(model_dir / "tokenizer.json")
    (model_dir / "config.pbtxt").write_text(CONFIG.format(dim=DIM, extra=extra, backend=backend))
    spec = spec_from_proto(read_model_config(model_dir))
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    model = load_text_encoder(default_registry().get(backend), ctx, model_dir / "tokenizer.json")
    instance = model.create_instance(InstanceGroupSpec("tiny", "KIND_CPU", 1), 0)
    recorder = Recorder(instance._inner)
    instance._inner = recorder
    return instance, recorder


def _request(*texts: str) -> InferRequest:
    array = np.empty((len(texts), 1), dtype=object)
    array[:, 0] = [t.encode() for t in texts]
    return InferRequest("tiny", {"text": array})


def _mean(ids: list[int]) -> np.ndarray[Any, Any]:
    rows: np.ndarray[Any, Any] = TABLE[ids].mean(axis=0)
    return rows


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_mean_pooling_ignores_the_padding_of_a_batch_padded_to_its_longest(
    tmp_path: Path, backend: str
) -> None:
    if backend == "openvino":
        pytest.importorskip("openvino")
    instance, recorder = _instance(
        tmp_path, 'parameters { key: "normalize" value { string_value: "false" } }', backend
    )
    first, second = instance.execute([_request("a b c d", "a"), _request("b")])
    assert recorder.shapes == [(3, 6)]  # one run, padded to "[CLS] a b c d [SEP]", not to 16
    assert not isinstance(first, Exception)
    assert not isinstance(second, Exception)
    np.testing.assert_allclose(first["embedding"][0], _mean([1, 3, 4, 5, 6, 2]), rtol=1e-6)
    np.testing.assert_allclose(first["embedding"][1], _mean([1, 3, 2]), rtol=1e-6)
    np.testing.assert_allclose(second["embedding"][0], _mean([1, 4, 2]), rtol=1e-6)
    assert first["token_count"].tolist() == [[6], [3]]
    assert first["token_count"].dtype == np.int64


def test_cls_pooling_and_normalisation(tmp_path: Path) -> None:
    instance, _ = _instance(tmp_path, 'parameters { key: "pooling" value { string_value: "cls" } }')
    (result,) = instance.execute([_request("c d")])
    assert not isinstance(result, Exception)
    want = TABLE[1] / np.linalg.norm(TABLE[1])
    np.testing.assert_allclose(result["embedding"][0], want, rtol=1e-6)


def test_a_bad_request_fails_alone(tmp_path: Path) -> None:
    instance, recorder = _instance(
        tmp_path, 'parameters { key: "max_length" value { string_value: "4" } }'
    )
    good, long, bad = instance.execute(
        [
            _request("a b"),
            _request("a b c"),
            InferRequest("tiny", {"text": np.array([[b"\xff"]], dtype=object)}),
        ]
    )
    assert not isinstance(good, Exception)
    assert isinstance(long, InvalidArgumentError)
    assert "the input has 5 tokens, more than this model's max_length of 4" in str(long)
    assert isinstance(bad, InvalidArgumentError)
    assert "UTF-8" in str(bad)
    assert recorder.shapes == [(1, 4)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('parameters { key: "normalize" value { string_value: "sometimes" } }', "'normalize'"),
        ('parameters { key: "max_length" value { string_value: "0" } }', "'max_length'"),
        ('parameters { key: "encoder_inputs" value { string_value: "x" } }', "'encoder_inputs'"),
    ],
)
def test_unreadable_parameters_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    # a later parameter of the same key wins in the parsed map
    with pytest.raises(ConfigError, match=message):
        _instance(tmp_path, extra)


def test_a_batch_of_mixed_lengths_runs_as_groups_of_similar_length(tmp_path: Path) -> None:
    instance, recorder = _instance(
        tmp_path, 'parameters { key: "normalize" value { string_value: "false" } }'
    )
    long_text = " ".join(["a", "b", "c", "d"] * 3)  # 14 tokens with [CLS] and [SEP]
    texts = [long_text if i % 2 else "abcd"[i // 2] for i in range(8)]  # 3 tokens, 14, 3…
    results = instance.execute([_request(t) for t in texts])
    # one run padded to 14 would be 112 tokens for 68 real ones: two runs, 12 + 56
    assert sorted(recorder.shapes) == [(4, 3), (4, 14)]
    for text, result in zip(texts, results, strict=True):
        assert not isinstance(result, Exception)
        ids = [1, *(VOCAB[w] for w in text.split()), 2]
        np.testing.assert_allclose(result["embedding"][0], _mean(ids), rtol=1e-6)
        assert result["token_count"].tolist() == [[len(ids)]]


def test_a_batch_of_similar_lengths_runs_once(tmp_path: Path) -> None:
    instance, recorder = _instance(tmp_path)
    # 4, 5, 4, 5, 4, 5 tokens: 30 padded for 27 real, not worth a second run
    instance.execute([_request("a b", "a b c"), _request("d c"), _request("c d a", "b a", "a a a")])
    assert recorder.shapes == [(6, 5)]


def test_a_run_holds_at_most_512_tokens(tmp_path: Path) -> None:
    instance, recorder = _instance(
        tmp_path, 'parameters { key: "normalize" value { string_value: "false" } }'
    )
    texts = [" ".join("abcd"[(i + j) % 4] for j in range(98)) for i in range(8)]  # 100 tokens
    results = instance.execute([_request(*texts[:3]), _request(*texts[3:])])
    assert recorder.shapes == [(5, 100), (3, 100)]  # not one run of 800 tokens
    embeddings = np.concatenate([r["embedding"] for r in results if not isinstance(r, Exception)])
    for text, embedding in zip(texts, embeddings, strict=True):
        ids = [1, *(VOCAB[w] for w in text.split()), 2]
        np.testing.assert_allclose(embedding, _mean(ids), rtol=1e-6)
