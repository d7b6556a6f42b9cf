"""Small teachers for the distillation tests, built in a second (not a test module)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np


def digits_rows() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits as rows of 64 values in 0..1, and their labels."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    return images.astype(np.float32) / 16.0, labels.astype(np.int64)


def build_tiny_bert(folder: Path, sentences: list[str]) -> Path:
    """A 4-layer BERT with a word-level vocabulary of ``sentences``, saved as a Hugging Face
    folder. Its weights are random (drawn wide enough that sentences differ): a student learns
    whatever its teacher does."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    words = sorted({w for s in sentences for w in re.findall(r"[a-z]+|[^\sa-z]", s.lower())})
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {w: i for i, w in enumerate(special + words)}
    core = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    core.normalizer = normalizers.BertNormalizer(lowercase=True)
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    core.post_processor = processors.BertProcessing(
        ("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"])
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.1,
    )
    folder.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        bert = transformers.BertModel(config)
    transformers.utils.logging.disable_progress_bar()
    bert.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_digits_teacher(path: Path, images: np.ndarray, labels: np.ndarray) -> Path:
    """A small MLP trained on the digits for a second, saved as ONNX (input ``pixels``, output
    ``probabilities`` after a Softmax, dynamic batch)."""
    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        mlp = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.Adam(mlp.parameters(), lr=1e-2)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    for _ in range(150):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(mlp(x), y)
        torch.autograd.backward(loss)
        optimizer.step()
    model = nn.Sequential(mlp, nn.Softmax(dim=1)).eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (x[:2],),
            str(path),
            input_names=["pixels"],
            output_names=["probabilities"],
            dynamic_axes={"pixels": {0: "N"}, "probabilities": {0: "N"}},
            opset_version=17,
            dynamo=False,
        )
    return path
