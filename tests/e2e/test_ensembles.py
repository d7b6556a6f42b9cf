"""Ensembles end to end: ``inferd serve`` in explicit mode, driven by ``tritonclient``.

The server loads three ensembles by name and nothing else: their step models must come up with
them. A chain and a diamond of add/sub steps answer exactly; statistics and metrics count the
ensemble and its composing models as Triton does; a step's failure names the step and keeps its
class; a broken ensemble config is refused with the precise reason.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format, text_format
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import identity_model, write_add_sub, write_model

IO = """
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""


def add_sub_step(model: str, in0: str, in1: str, out0: str, out1: str) -> str:
    return f"""{{
      model_name: "{model}" model_version: -1
      input_map {{ key: "INPUT0" value: "{in0}" }} input_map {{ key: "INPUT1" value: "{in1}" }}
      output_map {{ key: "OUTPUT0" value: "{out0}" }}
      output_map {{ key: "OUTPUT1" value: "{out1}" }}
    }}"""


def ensemble_config(name: str, steps: list[str], io: str = IO, mbs: int = 8) -> str:
    return (
        f'name: "{name}" platform: "ensemble" max_batch_size: {mbs} {io} '
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}"
    )


def write_ensemble(repo: Path, name: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ensembles")
    write_add_sub(root, "adder")
    write_add_sub(root, "other_adder")
    # chain: (a+b, a-b) -> (2a, 2b)
    write_ensemble(
        root,
        "chain",
        ensemble_config(
            "chain",
            [
                add_sub_step("adder", "INPUT0", "INPUT1", "sum", "diff"),
                add_sub_step("adder", "sum", "diff", "OUTPUT0", "OUTPUT1"),
            ],
        ),
    )
    # diamond: two independent steps, then one reading both: (a+b) + (a-b), (a+b) - (a-b)
    write_ensemble(
        root,
        "diamond",
        ensemble_config(
            "diamond",
            [
                add_sub_step("adder", "INPUT0", "INPUT1", "s1", "unused1"),
                add_sub_step("other_adder", "INPUT0", "INPUT1", "unused2", "d2"),
                add_sub_step("adder", "s1", "d2", "OUTPUT0", "OUTPUT1"),
            ],
        ).replace(
            # the unused outputs are ensemble outputs too, so every tensor is read
            'output [\n  { name: "OUTPUT0"',
            'output [\n  { name: "unused1" data_type: TYPE_INT32 dims: [ 16 ] },\n'
            '  { name: "unused2" data_type: TYPE_INT32 dims: [ 16 ] },\n  { name: "OUTPUT0"',
        ),
    )
    # a step whose model takes exactly 4 elements behind an ensemble that takes any number
    write_model(
        root,
        "four",
        identity_model([("X", "Y", TensorProto.INT32)], [None, 4]),
        'name: "four" platform: "onnxruntime_onnx" max_batch_size: 8 '
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] } ] '
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ] } ]',
    )
    write_ensemble(
        root,
        "picky",
        'name: "picky" platform: "ensemble" max_batch_size: 8 '
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ] '
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ] '
        'ensemble_scheduling { step [ { model_name: "four" model_version: -1 '
        'input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } } ] }',
    )
    # broken: the second step reads a tensor nothing writes
    write_ensemble(
        root,
        "broken",
        ensemble_config(
            "broken",
            [
                add_sub_step("adder", "INPUT0", "INPUT1", "sum", "diff"),
                add_sub_step("adder", "sum", "ghost", "OUTPUT0", "OUTPUT1"),
            ],
        ),
    )
    # missing: a step model with no directory in the repository
    write_ensemble(
        root,
        "missing",
        ensemble_config(
            "missing", [add_sub_step("nowhere", "INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
        ),
    )
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    args = ["--model-control-mode", "explicit"]
    for name in ("chain", "diamond", "picky"):
        args += ["--load-model", name]
    with running_server([repo], args) as proc:
        yield proc


def inputs_http(a: np.ndarray, b: np.ndarray) -> list[httpclient.InferInput]:
    ins = [
        httpclient.InferInput("INPUT0", list(a.shape), "INT32"),
        httpclient.InferInput("INPUT1", list(b.shape), "INT32"),
    ]
    ins[0].set_data_from_numpy(a, binary_data=True)
    ins[1].set_data_from_numpy(b)
    return ins


def test_explicit_mode_loaded_the_step_models_with_the_ensembles(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for name in ("chain", "diamond", "picky", "adder", "other_adder", "four"):
        assert client.is_model_ready(name), name
    index = {m["name"]: m.get("state") for m in client.get_model_repository_index()}
    assert index["broken"] != "READY"
    assert index["missing"] != "READY"
    config = client.get_model_config("chain")
    assert config["platform"] == "ensemble"
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["adder", "adder"]
    assert steps[0]["model_version"] == -1
    assert "model 'chain' version 1 is READY (ensemble)" in server.log()


@pytest.mark.parametrize("name", ["chain", "diamond"])
def test_an_ensemble_answers_over_http_and_grpc(server: ServerProcess, name: str) -> None:
    rng = np.random.default_rng(7)
    a = rng.integers(-100, 100, size=(3, 16), dtype=np.int32)
    b = rng.integers(-100, 100, size=(3, 16), dtype=np.int32)
    http = httpclient.InferenceServerClient(server.http_url)
    result = http.infer(name, inputs_http(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * b)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    ins = [
        grpcclient.InferInput("INPUT0", [3, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [3, 16], "INT32"),
    ]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    outs = [grpcclient.InferRequestedOutput("OUTPUT1")]
    reply = grpc.infer(name, ins, outputs=outs)
    np.testing.assert_array_equal(reply.as_numpy("OUTPUT1"), 2 * b)
    assert reply.as_numpy("OUTPUT0") is None


def _stats(client: httpclient.InferenceServerClient, name: str) -> dict:
    return client.get_inference_statistics(name)["model_stats"][0]


def test_statistics_of_the_ensemble_and_its_composing_models(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before_chain = _stats(client, "chain")
    before_adder = _stats(client, "adder")
    a = np.ones((2, 16), dtype=np.int32)
    for _ in range(5):
        client.infer("chain", inputs_http(a, a))
    chain = _stats(client, "chain")
    adder = _stats(client, "adder")
    infer = chain["inference_stats"]
    # the ensemble: one success and one execution per request, batch-size inferences
    assert infer["success"]["count"] - before_chain["inference_stats"]["success"]["count"] == 5
    assert chain["execution_count"] - before_chain["execution_count"] == 5
    assert chain["inference_count"] - before_chain["inference_count"] == 10
    assert infer["success"]["ns"] > 0
    # its compute time is what its steps computed, and no more than the requests took
    assert 0 < infer["compute_infer"]["ns"] <= infer["success"]["ns"]
    assert infer["compute_infer"]["count"] == infer["success"]["count"]
    batch = {b["batch_size"]: b for b in chain["batch_stats"]}
    assert batch[2]["compute_infer"]["count"] >= 5
    # the composing model counts its own requests: two steps per ensemble request
    done = adder["inference_stats"]["success"]["count"]
    assert done - before_adder["inference_stats"]["success"]["count"] == 10
    assert adder["inference_count"] - before_adder["inference_count"] == 20
    assert 1 <= adder["execution_count"] - before_adder["execution_count"] <= 10
    # and every model's series is on /metrics, the ensemble's included
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    line = next(
        ln
        for ln in text.splitlines()
        if ln.startswith("nv_inference_request_success{") and 'model="chain"' in ln
    )
    assert float(line.rsplit(" ", 1)[1]) == infer["success"]["count"]
    assert any(
        ln.startswith("nv_inference_exec_count{") and 'model="adder"' in ln
        for ln in text.splitlines()
    )


def test_a_failing_step_names_itself_and_keeps_its_class(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = _stats(client, "picky")["inference_stats"]["fail"]["count"]
    x = httpclient.InferInput("IN", [1, 3], "INT32")
    x.set_data_from_numpy(np.arange(3, dtype=np.int32).reshape(1, 3))
    with pytest.raises(InferenceServerException) as exc:
        client.infer("picky", [x])
    assert exc.value.status() == "400"
    message = exc.value.message()
    assert message.startswith("in ensemble 'picky', step 0 (model 'four') failed: ")
    assert "'X'" in message
    assert "[-1,4]" in message
    assert _stats(client, "picky")["inference_stats"]["fail"]["count"] == before + 1
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    gx = grpcclient.InferInput("IN", [1, 3], "INT32")
    gx.set_data_from_numpy(np.arange(3, dtype=np.int32).reshape(1, 3))
    with pytest.raises(InferenceServerException) as gexc:
        grpc.infer("picky", [gx])
    assert gexc.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "step 0 (model 'four') failed" in gexc.value.message()
    # the server is still up and the ensemble still answers good requests
    ok = httpclient.InferInput("IN", [1, 4], "INT32")
    ok.set_data_from_numpy(np.arange(4, dtype=np.int32).reshape(1, 4))
    np.testing.assert_array_equal(client.infer("picky", [ok]).as_numpy("OUT"), [[0, 1, 2, 3]])


def test_broken_ensembles_are_refused_with_the_precise_reason(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as exc:
        client.load_model("broken")
    assert exc.value.status() == "400"
    assert exc.value.message() == (
        "failed to load 'broken', in ensemble 'broken', step 1 (model 'adder') maps ensemble "
        "tensor 'ghost' to its input 'INPUT1', but no step writes 'ghost' and it is not an "
        "input of the ensemble"
    )
    with pytest.raises(InferenceServerException) as exc:
        client.load_model("missing")
    assert exc.value.message().startswith(
        "failed to load 'missing', ensemble 'missing' depends on 'nowhere' which has no loaded "
        "version: failed to load 'nowhere'"
    )
    # a config override with a dtype that does not match its step model
    override = ensemble_config(
        "chain",
        [
            add_sub_step("adder", "INPUT0", "INPUT1", "sum", "diff"),
            add_sub_step("adder", "sum", "diff", "OUTPUT0", "OUTPUT1"),
        ],
    ).replace('"OUTPUT1" data_type: TYPE_INT32', '"OUTPUT1" data_type: TYPE_FP32')
    message = text_format.Parse(override, model_config_pb2.ModelConfig())
    with pytest.raises(InferenceServerException) as exc:
        client.load_model("chain", config=json_format.MessageToJson(message))
    assert exc.value.message() == (
        "failed to load 'chain', in ensemble 'chain', ensemble tensor 'OUTPUT1' has inconsistent "
        "data types: TYPE_FP32 from model 'chain' but TYPE_INT32 from model 'adder'"
    )
    assert client.is_model_ready("chain")  # the version already serving keeps serving


def test_unloading_a_step_model_takes_its_ensembles_down_and_loading_brings_both_back(
    server: ServerProcess,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    client.unload_model("other_adder")
    assert not client.is_model_ready("diamond")
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["diamond"]["reason"] == (
        "ensemble 'diamond' depends on 'other_adder' which has no loaded version"
    )
    client.load_model("diamond")
    assert client.is_model_ready("other_adder")
    assert client.is_model_ready("diamond")
    client.unload_model("picky", unload_dependents=True)
    assert not client.is_model_ready("picky")
    assert not client.is_model_ready("four")
