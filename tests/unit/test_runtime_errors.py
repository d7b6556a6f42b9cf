"""Failures inside a runtime: the request's content is the client's error (400 / INVALID_ARGUMENT
with the runtime's message), the model's or the runtime's own failure is internal and logged once;
a bad request in a batch fails alone. Real ONNX Runtime and OpenVINO runs, over the instance, the
engine and the ``inferd serve`` process driven by tritonclient."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from inferd.backends import onnxruntime as ort_backend
from inferd.backends.base import LoadContext
from inferd.backends.registry import default_registry
from inferd.backends.runtime_errors import Blame
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec
from inferd.engine import Engine
from inferd.errors import InternalError, InvalidInputError
from inferd.repository.autocomplete import complete_config
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from inferd.repository.normalize import normalize_and_validate
from inferd.testing import ServerProcess, running_server

Array = np.ndarray[Any, Any]
CPU = InstanceGroupSpec(name="g", kind="KIND_CPU", count=1)
ORT_STATE = ort.capi.onnxruntime_pybind11_state

# Batches of up to 4 wait long enough for concurrent requests to share one execution.
CAST_CONFIG = """
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "VALUE" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [ 3 ] }
"""


def _graph(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
) -> onnx.ModelProto:
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def cast_text_to_float() -> onnx.ModelProto:
    """TEXT: STRING [N, 1] -> VALUE: FP32 [N, 1], parsed by ONNX Runtime's Cast."""
    return _graph(
        [helper.make_node("Cast", ["TEXT"], ["VALUE"], to=TensorProto.FLOAT)],
        [helper.make_tensor_value_info("TEXT", TensorProto.STRING, ["N", 1])],
        [helper.make_tensor_value_info("VALUE", TensorProto.FLOAT, ["N", 1])],
    )


def reshape_by_input() -> onnx.ModelProto:
    """X: FP32 [R, 4] reshaped to whatever shape the request's SHAPE (INT64 [3]) asks for."""
    return _graph(
        [helper.make_node("Reshape", ["X", "SHAPE"], ["Y"])],
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["R", 4]),
            helper.make_tensor_value_info("SHAPE", TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["A", "B", "C"])],
    )


def _write(root: Path, name: str, model: onnx.ModelProto, config: str, file: str) -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / file).write_bytes(model.SerializeToString())
    (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def _instance(model_dir: Path) -> Any:
    registry = default_registry(load_entry_points=False)
    cfg = parse_pbtxt((model_dir / "config.pbtxt").read_text(), str(model_dir / "config.pbtxt"))
    complete_config(cfg, model_dir, [1], registry, auto_complete=True)
    normalize_and_validate(cfg, model_dir)
    spec = spec_from_proto(cfg)
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    return registry.get(spec.backend).load(ctx).create_instance(CPU, 0)


def _text(*values: str) -> InferRequest:
    array = np.array([[v.encode()] for v in values], dtype=object)
    return InferRequest(model_name="cast", inputs={"TEXT": array})


def _ok(result: Any) -> dict[str, Array]:
    assert not isinstance(result, BaseException), result
    outputs: dict[str, Array] = result
    return outputs


# -- the instance ---------------------------------------------------------------------------------


def test_failed_cast_fails_only_its_request_with_the_runtime_message(tmp_path: Path) -> None:
    instance = _instance(_write(tmp_path, "cast", cast_text_to_float(), CAST_CONFIG, "model.onnx"))
    first, bad, last = instance.execute([_text("1.5"), _text("abc"), _text("-2", "4e1")])
    np.testing.assert_array_equal(_ok(first)["VALUE"], [[1.5]])
    np.testing.assert_array_equal(_ok(last)["VALUE"], [[-2.0], [40.0]])
    assert isinstance(bad, InvalidInputError), bad
    assert "model 'cast'" in bad.message
    assert "running Cast node" in bad.message  # ONNX Runtime's own words


def test_value_dependent_kernel_failures_blame_the_request(tmp_path: Path) -> None:
    config = 'backend: "onnxruntime"\nmax_batch_size: 0\n'
    instance = _instance(_write(tmp_path, "reshape", reshape_by_input(), config, "model.onnx"))
    x = np.zeros((1, 4), np.float32)
    ok, bad = instance.execute(
        [
            InferRequest("reshape", {"X": x, "SHAPE": np.array([1, 2, 2], np.int64)}),
            InferRequest("reshape", {"X": x, "SHAPE": np.array([1, 3, 3], np.int64)}),
        ]
    )
    assert _ok(ok)["Y"].shape == (1, 2, 2)
    assert isinstance(bad, InvalidInputError), bad
    assert "cannot be reshaped" in bad.message


def _ort_failure(model: onnx.ModelProto, feeds: dict[str, Array], **run: Any) -> Exception:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    options = ort.RunOptions()
    options.log_severity_level = 4
    for key, value in run.items():
        setattr(options, key, value)
    try:
        session.run(None, feeds, options)
    except Exception as exc:  # whichever class ONNX Runtime raises is what the test inspects
        return exc
    raise AssertionError("the run was expected to fail")


def test_onnxruntime_blame_follows_the_status_class() -> None:
    text = cast_text_to_float()
    failed_cast = _ort_failure(text, {"TEXT": np.array([["x"]], dtype=object)})
    wrong_type = _ort_failure(text, {"TEXT": np.zeros((1, 1), np.float32)})
    terminated = _ort_failure(
        text, {"TEXT": np.array([["1"]], dtype=object)}, terminate=True
    )  # a FAIL that no kernel raised: the run was stopped
    assert isinstance(failed_cast, ORT_STATE.RuntimeException)
    assert isinstance(wrong_type, ORT_STATE.InvalidArgument)
    assert isinstance(terminated, ORT_STATE.Fail)
    assert ort_backend.blame(failed_cast) is Blame.REQUEST
    assert ort_backend.blame(wrong_type) is Blame.REQUEST
    assert ort_backend.blame(terminated) is Blame.MODEL
    for status in ("EPFail", "EngineError", "NotImplemented", "InvalidGraph", "NoModel"):
        assert ort_backend.blame(getattr(ORT_STATE, status)("boom")) is Blame.MODEL


class _FailingSession:
    """Stands in for a session whose execution provider fails on every run."""

    def __init__(self) -> None:
        self.runs = 0

    def run(self, *args: Any) -> Any:
        self.runs += 1
        raise ORT_STATE.EPFail("[ONNXRuntimeError] : 11 : EP_FAIL : device lost")


def test_model_fault_fails_the_batch_once_logged_with_the_request_ids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    instance = _instance(_write(tmp_path, "cast", cast_text_to_float(), CAST_CONFIG, "model.onnx"))
    session = instance._session = _FailingSession()
    instance._solo = None  # every run on the failing session, none on the shared solo session
    requests = [_text("1"), _text("2"), _text("3")]
    for i, request in enumerate(requests):
        request.id = f"r{i}"
    with caplog.at_level(logging.DEBUG, logger="inferd.backends"):
        results = instance.execute(requests)
    assert session.runs == 1  # a fault is not run again request by request
    assert all(isinstance(r, InternalError) and "device lost" in r.message for r in results)
    assert len({id(r) for r in results}) == 3  # one error object per request
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "model 'cast'" in record.getMessage()
    assert "'r0', 'r1', 'r2'" in record.getMessage()
    assert record.exc_info is not None  # with the runtime's own failure as the cause


def test_request_content_errors_are_not_logged_as_faults(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    instance = _instance(_write(tmp_path, "cast", cast_text_to_float(), CAST_CONFIG, "model.onnx"))
    assert isinstance(ort_backend.FAMILY.translate(ValueError("bad feed"), "m"), InvalidInputError)
    with caplog.at_level(logging.DEBUG, logger="inferd.backends"):
        good, bad = instance.execute([_text("1"), _text("abc")])
    assert isinstance(bad, InvalidInputError)
    assert not isinstance(good, BaseException)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []  # not the server's
    assert any("running each request alone" in r.getMessage() for r in caplog.records)


def add_dynamic() -> onnx.ModelProto:
    """Y = A + B with A: FP32 [N, M] and B: FP32 [N, K]: M and K must agree at run time."""
    return _graph(
        [helper.make_node("Add", ["A", "B"], ["Y"])],
        [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, ["N", "M"]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, ["N", "K"]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", "M"])],
    )


def test_openvino_node_failure_fails_only_its_request(tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    # Two threads: with INFERENCE_NUM_THREADS 1 the CPU plugin does not report a failing node.
    config = (
        'backend: "openvino"\ndefault_model_filename: "model.onnx"\nmax_batch_size: 4\n'
        'parameters { key: "INFERENCE_NUM_THREADS" value { string_value: "2" } }\n'
    )
    instance = _instance(_write(tmp_path, "add", add_dynamic(), config, "model.onnx"))
    four, three = np.ones((1, 4), np.float32), np.ones((1, 3), np.float32)
    ok, bad, also_ok = instance.execute(
        [
            InferRequest("add", {"A": four, "B": four}),
            InferRequest("add", {"A": four, "B": three}),
            InferRequest("add", {"A": three, "B": three}),
        ]
    )
    np.testing.assert_array_equal(_ok(ok)["Y"], 2 * four)
    np.testing.assert_array_equal(_ok(also_ok)["Y"], 2 * three)
    assert isinstance(bad, InvalidInputError), bad
    assert "model 'add' failed in openvino" in bad.message
    assert "src/" not in bad.message  # no chain of OpenVINO source locations


def test_openvino_blame_follows_the_failing_frame() -> None:
    pytest.importorskip("openvino")
    from inferd.backends.openvino import backend as ov_backend

    node = RuntimeError(
        "Exception from src/inference/src/cpp/infer_request.cpp:224:\n"
        "Exception from src/plugins/intel_cpu/src/node.cpp:794:\n"
        "[CPU] Add node with name 'Y' Check 'input_shape[j] == 1' failed at x.cpp:52:\n"
        "Eltwise shape infer input shapes dim index: 1 mismatch\n\n"
    )
    assert ov_backend.blame(node) is Blame.REQUEST
    assert ov_backend.summary(node) == (
        "Add node 'Y': Eltwise shape infer input shapes dim index: 1 mismatch"
    )
    plugin = RuntimeError("Exception from src/plugins/intel_cpu/src/graph.cpp:1:\nout of memory")
    assert ov_backend.blame(plugin) is Blame.MODEL
    assert ov_backend.blame(TypeError("unsupported input")) is Blame.REQUEST


# -- the engine -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cast_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cast_repo")
    _write(root, "cast", cast_text_to_float(), CAST_CONFIG, "model.onnx")
    return root


async def test_engine_answers_each_batch_mate_on_its_own(cast_repo: Path) -> None:
    manager = RepositoryManager(
        [cast_repo], default_registry(), mode=ControlMode.NONE, options=LoadOptions()
    )
    assert await manager.startup() == {}
    try:
        engine = Engine(manager, server_version="test")
        good, bad, other = await asyncio.gather(
            engine.infer(_text("0.25")),
            engine.infer(_text("not a number")),
            engine.infer(_text("3")),
            return_exceptions=True,
        )
        assert isinstance(bad, InvalidInputError), bad
        assert "running Cast node" in bad.message
        for answer, expected in ((good, 0.25), (other, 3.0)):
            assert not isinstance(answer, BaseException), answer
            np.testing.assert_array_equal(answer.outputs["VALUE"], [[expected]])
    finally:
        await manager.close()


# -- end to end -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cast_server(cast_repo: Path) -> Iterator[ServerProcess]:
    with running_server([cast_repo]) as proc:
        yield proc


def _http_text(httpclient: Any, value: str) -> Any:
    tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[value.encode()]], dtype=object))
    return tensor


@pytest.mark.e2e
def test_http_400_with_the_runtime_message_and_batch_mates_answered(
    cast_server: ServerProcess,
) -> None:
    httpclient = pytest.importorskip("tritonclient.http")
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(cast_server.http_url, concurrency=3)
    try:
        pending = [
            client.async_infer("cast", [_http_text(httpclient, v)]) for v in ("7", "seven", "0.5")
        ]
        first = pending[0].get_result().as_numpy("VALUE")
        with pytest.raises(InferenceServerException) as info:
            pending[1].get_result()
        last = pending[2].get_result().as_numpy("VALUE")
    finally:
        client.close()
    np.testing.assert_array_equal(first, [[7.0]])
    np.testing.assert_array_equal(last, [[0.5]])
    assert info.value.status() == "400"
    assert "running Cast node" in str(info.value.message())
    assert cast_server.process.poll() is None


@pytest.mark.e2e
def test_grpc_invalid_argument_with_the_runtime_message(cast_server: ServerProcess) -> None:
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(cast_server.grpc_url)
    try:
        tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[b"one"]], dtype=object))
        with pytest.raises(InferenceServerException) as info:
            client.infer("cast", [tensor])
        good = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        good.set_data_from_numpy(np.array([[b"1.5"]], dtype=object))
        value = client.infer("cast", [good]).as_numpy("VALUE")
    finally:
        client.close()
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "running Cast node" in str(info.value.message())
    np.testing.assert_array_equal(value, [[1.5]])
