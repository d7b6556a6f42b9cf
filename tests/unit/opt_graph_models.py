"""Small models for the graph, precision, OpenVINO and export candidates' tests, and a helper
that serves a candidate through inferd's own backend (not a test module)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from inferd.backends.base import LoadContext
from inferd.backends.registry import default_registry
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec
from inferd.errors import InferdError
from inferd.repository.autocomplete import complete_config
from inferd.repository.normalize import normalize_and_validate
from inferd.tools.optimize.candidate import OPENVINO_PLATFORM, Candidate

Array = np.ndarray[Any, Any]


def rng(*salt: object) -> np.random.Generator:
    """A generator of its own for each use, seeded by ``salt``: the weights and data a test sees
    do not depend on which tests ran before it in the same process."""
    return np.random.default_rng(zlib.crc32(repr(salt).encode()))


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any]) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _weight(name: str, *shape: int, scale: float = 0.3) -> Any:
    return numpy_helper.from_array(
        (rng("weight", name, shape).standard_normal(shape) * scale).astype(np.float32), name
    )


def save(model: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def mlp(width: int = 32) -> Any:
    """x [N, width] -> MatMul, Add, Relu, MatMul, Softmax -> probs [N, 10]."""
    return _model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Add", ["h", "b1"], ["hb"]),
            helper.make_node("Relu", ["hb"], ["a"]),
            helper.make_node("MatMul", ["a", "w2"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])],
        [_weight("w1", width, 64), _weight("b1", 64), _weight("w2", 64, 10)],
    )


def conv_net() -> Any:
    """image [N, 1, 8, 8] -> Conv, Relu, Conv, Relu, Flatten, Gemm -> scores [N, 10]."""
    return _model(
        [
            helper.make_node("Conv", ["image", "k1", "c1"], ["y1"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["y1"], ["r1"]),
            helper.make_node("Conv", ["r1", "k2", "c2"], ["y2"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["y2"], ["r2"]),
            helper.make_node("Flatten", ["r2"], ["flat"]),
            helper.make_node("Gemm", ["flat", "wf", "bf"], ["scores"]),
        ],
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 10])],
        [
            _weight("k1", 16, 1, 3, 3),
            _weight("c1", 16),
            _weight("k2", 16, 16, 3, 3, scale=0.1),
            _weight("c2", 16),
            _weight("wf", 16 * 8 * 8, 10, scale=0.05),
            _weight("bf", 10),
        ],
    )


def attention_block(heads: int = 2, head_size: int = 4, seq: int = 5, split: int = -1) -> Any:
    """One self-attention block as exporters write it: Q, K, V projections reshaped to
    ``[N, seq, split, head_size]`` (``split`` -1: the head count left to the reshape), softmax
    of the scaled Q·Kᵀ, ·V, then a layer norm."""
    hidden = heads * head_size
    shape = numpy_helper.from_array(np.array([0, seq, split, head_size], np.int64), "split")
    merge = numpy_helper.from_array(np.array([0, seq, hidden], np.int64), "merge")
    scale = numpy_helper.from_array(np.array(head_size**-0.5, np.float32), "scale")
    nodes = []
    for part in ("q", "k", "v"):
        nodes += [
            helper.make_node("MatMul", ["x", f"w{part}"], [f"{part}0"]),
            helper.make_node("Reshape", [f"{part}0", "split"], [f"{part}1"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["q1"], ["q2"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k1"], ["k2"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v1"], ["v2"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q2", "k2"], ["qk"]),
        helper.make_node("Mul", ["qk", "scale"], ["qks"]),
        helper.make_node("Softmax", ["qks"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v2"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx2"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx2", "merge"], ["ctx3"]),
        helper.make_node("LayerNormalization", ["ctx3", "gamma", "beta"], ["y"], axis=-1),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", seq, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", seq, hidden])],
        [
            _weight("wq", hidden, hidden),
            _weight("wk", hidden, hidden),
            _weight("wv", hidden, hidden),
            shape,
            merge,
            scale,
            numpy_helper.from_array(np.ones(hidden, np.float32), "gamma"),
            numpy_helper.from_array(np.zeros(hidden, np.float32), "beta"),
        ],
    )


BERT_HEADS = 4
BERT_HIDDEN = 32
BERT_LAYERS = 2
BERT_SEQ = 16


def tiny_bert(path: Path) -> Path:
    """A 2-layer, 4-head BERT encoder (random weights) exported to ONNX as exporters write
    sentence encoders: ``input_ids`` and ``attention_mask`` in, ``last_hidden_state`` out."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=BERT_HIDDEN,
        num_hidden_layers=BERT_LAYERS,
        num_attention_heads=BERT_HEADS,
        intermediate_size=64,
        max_position_embeddings=BERT_SEQ,
        attn_implementation="eager",
    )
    bert = BertModel(config, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden: torch.Tensor = self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]
            return hidden

    model = Encoder().eval()
    ids, mask = bert_inputs(2).values()
    path.parent.mkdir(parents=True, exist_ok=True)
    import warnings

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter is deprecated
        torch.onnx.export(
            model,
            (torch.from_numpy(ids), torch.from_numpy(mask)),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch"} for n in ("input_ids", "attention_mask")},
            opset_version=17,
            dynamo=False,
        )
    return path


def bert_inputs(rows: int) -> dict[str, Array]:
    ids = rng("bert_inputs", rows).integers(1, 100, (rows, BERT_SEQ)).astype(np.int64)
    mask = np.ones((rows, BERT_SEQ), np.int64)
    for row in range(rows):
        mask[row, BERT_SEQ - 1 - (row % 5) :] = 0  # padded tails of different lengths
    return {"input_ids": ids, "attention_mask": mask}


class Rows:
    """A calibration data set in the shape the optimizer's Dataset has."""

    def __init__(self, inputs: Mapping[str, Array]) -> None:
        self.inputs = dict(inputs)

    @property
    def rows(self) -> int:
        return len(next(iter(self.inputs.values())))

    def batches(self, size: int) -> Iterator[dict[str, Array]]:
        for start in range(0, self.rows, size):
            yield {k: v[start : start + size] for k, v in self.inputs.items()}


def serve(candidate: Candidate, tmp_path: Path, inputs: Mapping[str, Array]) -> dict[str, Array]:
    """Put the candidate in a model folder as a repository would, load it with inferd's own
    backend (config auto-completed, ``parameters`` from the candidate) and run one request."""
    model_dir = tmp_path / "served" / candidate.name
    version = model_dir / "1"
    version.mkdir(parents=True, exist_ok=True)
    for file in candidate.path.parent.iterdir():
        (version / file.name).write_bytes(file.read_bytes())
    if candidate.platform == OPENVINO_PLATFORM:
        config = f'backend: "openvino"\ndefault_model_filename: "{candidate.path.name}"\n'
    else:
        config = f'platform: "{candidate.platform}"\n'
    config += "max_batch_size: 16\n" + "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
        for k, v in candidate.parameters.items()
    )
    registry = default_registry(load_entry_points=False)
    proto = parse_pbtxt(config, str(model_dir / "config.pbtxt"))
    complete_config(proto, model_dir, [1], registry, auto_complete=True)
    normalize_and_validate(proto, model_dir)
    spec = spec_from_proto(proto)
    backend = registry.for_spec(spec)
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=version)
    loaded = backend.load(ctx)
    instance = loaded.create_instance(InstanceGroupSpec(name="g", kind="KIND_CPU", count=1), 0)
    try:
        result = instance.execute([InferRequest(model_name=spec.name, inputs=dict(inputs))])[0]
    finally:
        instance.close()
        loaded.close()
    assert not isinstance(result, InferdError), result
    outputs: dict[str, Array] = dict(result)
    return outputs
