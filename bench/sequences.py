"""Sequence batching throughput: 32 sequences with the ``oldest`` strategy vs dynamic batching.

    flock /tmp/bench.lock .venv/bin/python bench/sequences.py [--seconds 6] [--sequences 32]
                                                               [--rounds 2]

One ONNX model (an MLP, 64 -> 256 -> 64 FP32, plus a running state: ``STATE_OUT = 0.5 *
STATE_IN + OUTPUT``) is served twice by one ``inferd serve`` process, ``max_batch_size`` 32, two
CPU instances each:

- ``mlp_stateless``: ``dynamic_batching { max_queue_delay_microseconds: 500 }``; the client
  sends ``STATE_IN`` itself (zeros), so the model computes exactly what the sequence model does;
- ``mlp_sequence``: ``sequence_batching { oldest { max_candidate_sequences: 32,
  max_queue_delay_microseconds: 500 } }`` with ``STATE_IN`` / ``STATE_OUT`` as implicit state
  kept by the server, and START / END / CORRID control inputs filled by the server.

One asyncio client process (``tritonclient.grpc.aio``) keeps ``--sequences`` callers busy: for
the sequence model each caller sends sequences of 20 requests (START on the first, END on the
last, a fresh id each time); for the stateless model the same callers send the same requests
without sequence parameters. The two models are measured alternately, ``--rounds`` times, 1 s of
warm-up then ``--seconds`` each; the script prints requests/s per round, the best round of each,
and the ratio sequence / stateless. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tritonclient.grpc.aio as grpcaio
from onnx import TensorProto, helper, numpy_helper

from inferd.testing import running_server

WIDTH, HIDDEN, MAX_BATCH, LENGTH = 64, 256, 32, 20

_IO = (
    f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {WIDTH} ] }}STATE_IN ]\n'
    f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {WIDTH} ] }}STATE_OUT ]\n'
    "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
)

STATELESS = (
    f'name: "mlp_stateless"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {MAX_BATCH}\n'
    "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
    + _IO.replace(
        "STATE_IN", f',\n  {{ name: "STATE_IN" data_type: TYPE_FP32 dims: [ {WIDTH} ] }}'
    ).replace("STATE_OUT", f',\n  {{ name: "STATE_OUT" data_type: TYPE_FP32 dims: [ {WIDTH} ] }}')
)

SEQUENCE = (
    f'name: "mlp_sequence"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {MAX_BATCH}\n'
    "sequence_batching {\n"
    "  oldest { max_candidate_sequences: 32 max_queue_delay_microseconds: 500 }\n"
    "  control_input [\n"
    '    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },'
    '\n    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },'
    '\n    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }'
    "\n  ]\n"
    f'  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 '
    f"dims: [ {WIDTH} ] }} ]\n}}\n" + _IO.replace("STATE_IN", "").replace("STATE_OUT", "")
)


def _graph(with_controls: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.normal(0, 0.1, (WIDTH, HIDDEN))).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.normal(0, 0.1, (HIDDEN, WIDTH))).astype(np.float32), "w2")
    half = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")
    row = ["batch", WIDTH]
    inputs = [
        helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, row),
        helper.make_tensor_value_info("STATE_IN", TensorProto.FLOAT, row),
    ]
    nodes = [
        helper.make_node("MatMul", ["INPUT", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["OUTPUT"]),
        helper.make_node("Mul", ["STATE_IN", "half"], ["decayed"]),
        helper.make_node("Add", ["decayed", "OUTPUT"], ["STATE_OUT"]),
    ]
    if with_controls:  # the controls are fed but unused: the compute is the stateless model's
        for name in ("START", "END"):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 1]))
        inputs.append(helper.make_tensor_value_info("CORRID", TensorProto.UINT64, ["batch", 1]))
    outputs = [
        helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, row),
        helper.make_tensor_value_info("STATE_OUT", TensorProto.FLOAT, row),
    ]
    graph = helper.make_graph(nodes, "mlp", inputs, outputs, initializer=[w1, w2, half])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def build_repository(root: Path) -> None:
    for name, config, controls in (
        ("mlp_stateless", STATELESS, False),
        ("mlp_sequence", SEQUENCE, True),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        onnx.save(_graph(controls), str(root / name / "1" / "model.onnx"))


async def _drive(url: str, model: str, callers: int, seconds: float) -> float:
    """Requests per second completed by ``callers`` concurrent callers after 1 s of warm-up."""
    client = grpcaio.InferenceServerClient(url)
    data = np.random.default_rng(1).normal(0, 1, (1, WIDTH)).astype(np.float32)
    zeros = np.zeros((1, WIDTH), dtype=np.float32)
    ids = itertools.count(1)
    counted = 0
    counting = False
    stop = False

    def inputs(stateless: bool) -> list[Any]:
        made = [grpcaio.InferInput("INPUT", [1, WIDTH], "FP32")]
        made[0].set_data_from_numpy(data)
        if stateless:
            made.append(grpcaio.InferInput("STATE_IN", [1, WIDTH], "FP32"))
            made[1].set_data_from_numpy(zeros)
        return made

    async def caller() -> None:
        nonlocal counted
        stateless = model == "mlp_stateless"
        while not stop:
            sequence_id = next(ids)
            for step in range(LENGTH):
                if stop:
                    break
                kwargs: dict[str, Any] = {}
                if not stateless:
                    kwargs = {
                        "sequence_id": sequence_id,
                        "sequence_start": step == 0,
                        "sequence_end": step == LENGTH - 1 or stop,
                    }
                await client.infer(model, inputs(stateless), **kwargs)
                if counting:
                    counted += 1

    tasks = [asyncio.create_task(caller()) for _ in range(callers)]
    await asyncio.sleep(1.0)
    counting, started = True, time.perf_counter()
    await asyncio.sleep(seconds)
    counting, elapsed = False, time.perf_counter() - started
    stop = True
    await asyncio.gather(*tasks)
    await client.close()
    return counted / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--sequences", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inferd-bench-seq-") as scratch:
        repo = Path(scratch)
        build_repository(repo)
        with running_server([repo]) as server:
            results: dict[str, list[float]] = {"mlp_stateless": [], "mlp_sequence": []}
            for round_ in range(1, args.rounds + 1):
                for model in results:
                    rate = asyncio.run(_drive(server.grpc_url, model, args.sequences, args.seconds))
                    results[model].append(rate)
                    print(f"round {round_}  {model:<14} {rate:8.0f} req/s", flush=True)
    best = {model: max(rates) for model, rates in results.items()}
    ratio = best["mlp_sequence"] / best["mlp_stateless"]
    print(
        f"\n{args.sequences} callers, best of {args.rounds} rounds of {args.seconds:.0f} s:\n"
        f"  stateless, dynamic batching : {best['mlp_stateless']:8.0f} req/s\n"
        f"  sequences, oldest + state   : {best['mlp_sequence']:8.0f} req/s\n"
        f"  ratio sequence / stateless  : {ratio:8.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
