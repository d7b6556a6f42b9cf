"""Python models through the real serving stack: worker processes, shared memory, crashes.

Models are written here as users write them: Triton-style ``model.py`` files importing
``triton_python_backend_utils``, and typed models on :mod:`inferd.backends.python.api`.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.python import shm
from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest, RequestedOutput
from inferd.engine import Engine
from inferd.errors import InferdError, InternalError, InvalidArgumentError, OverloadedError
from inferd.examples.python_models import SOURCES
from inferd.repository.manager import ControlMode, RepositoryManager
from tests.integration.conftest import LoopThread

ECHO_CONFIG = """
name: "{name}" backend: "python" max_batch_size: {mbs}
input [ {{ name: "IN" data_type: {dtype} dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: {dtype} dims: [ -1 ] }},
         {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }} ]
{extra}
"""

# Triton-style: answers with an error response on 7, raises on 13, dies on -1, echoes otherwise.
TRITON_STYLE = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        out = pb_utils.get_output_config_by_name(self.config, "OUT")
        self.dtype = pb_utils.triton_string_to_numpy(out["data_type"])
        self.instance = args["model_instance_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if x.size and x.flat[0] == -1:
                os._exit(1)
            if x.size and x.flat[0] == 13:
                raise ValueError("thirteen is unlucky")
            if x.size and x.flat[0] == 7:
                error = pb_utils.TritonError("seven is refused", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            rows = (x.shape[0], 1) if x.ndim > 1 else (1,)
            pid = np.full(rows, os.getpid(), dtype=np.int64)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", x.astype(self.dtype)),
                pb_utils.Tensor("PID", pid),
            ]))
        return responses
"""

TYPED = """
import os
import numpy as np
from inferd.backends.python.api import Model, ModelContext
from inferd.errors import InvalidArgumentError


class Scale(Model):
    def setup(self, context: ModelContext) -> None:
        self.factor = float(context.parameters.get("factor", "1"))
        self.calls = []

    def predict(self, inputs):
        x = inputs["IN"]
        if (x < 0).any():
            raise InvalidArgumentError("negative values are not allowed")
        out = (x * self.factor).astype(x.dtype)
        rows = np.full((x.shape[0], 1), x.shape[0], dtype=np.int64)  # batch rows seen
        return {"OUT": out, "PID": rows}
"""

BUSY = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        start = time.monotonic()
        total = 0
        while time.monotonic() - start < 0.5:   # pure Python: holds this process's GIL
            total += 1
        end = time.monotonic()
        out = np.array([[start, end, float(os.getpid())]], dtype=np.float64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("T", out)]) for _ in requests]
"""
BUSY_CONFIG = """
name: "busy" backend: "python" max_batch_size: 1
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "T" data_type: TYPE_FP64 dims: [ 3 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""

AUTO = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.add_output({"name": "B", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("B", pb_utils.get_input_tensor_by_name(r, "A").as_numpy() * 2)]
            )
            for r in requests
        ]
"""

BROKEN_INIT = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights not found")

    def execute(self, requests):
        return []
"""


def _write(repo: Path, name: str, config: str, source: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(source))


def build_repo(repo: Path) -> Path:
    for name in ("simple_identity", "digits_preprocess"):
        config, source = SOURCES[name]
        _write(repo, name, config, source)
    _write(
        repo,
        "triton_fp32",
        ECHO_CONFIG.format(name="triton_fp32", mbs=8, dtype="TYPE_FP32", extra=""),
        TRITON_STYLE,
    )
    _write(
        repo,
        "typed",
        ECHO_CONFIG.format(
            name="typed",
            mbs=16,
            dtype="TYPE_INT32",
            extra="dynamic_batching { max_queue_delay_microseconds: 200000 } "
            'parameters [ { key: "factor" value: { string_value: "3" } } ]',
        ),
        TYPED,
    )
    _write(
        repo,
        "spawned",
        ECHO_CONFIG.format(
            name="spawned",
            mbs=8,
            dtype="TYPE_FP32",
            extra='parameters [ { key: "worker-start-method" value: { string_value: "spawn" } } ]',
        ),
        TRITON_STYLE,
    )
    _write(repo, "busy", BUSY_CONFIG, BUSY)
    _write(repo, "auto", 'name: "auto" backend: "python"', AUTO)
    _write(
        repo,
        "broken_init",
        ECHO_CONFIG.format(name="broken_init", mbs=0, dtype="TYPE_INT32", extra=""),
        BROKEN_INIT,
    )
    _write(
        repo,
        "small_arena",
        ECHO_CONFIG.format(
            name="small_arena",
            mbs=0,
            dtype="TYPE_UINT8",
            extra='parameters [ { key: "shm-default-byte-size" value: { string_value: "65536" } },'
            ' { key: "shm-max-byte-size" value: { string_value: "4194304" } } ]',
        ),
        TRITON_STYLE,
    )
    return repo


def ours() -> set[str]:
    """Our arenas: files in /dev/shm, and mappings of this process (names are unlinked as soon
    as the worker has mapped them, so a killed server cannot leak them)."""
    prefix = f"{shm.PREFIX}{os.getpid()}-"
    files = {n for n in os.listdir(shm.SHM_DIR) if n.startswith(prefix)}
    maps = Path("/proc/self/maps").read_text().splitlines()
    mapped = {line.split("/")[-1].split()[0] for line in maps if f"/{prefix}" in line}
    return files | mapped


LOADED = (
    "simple_identity",
    "digits_preprocess",
    "triton_fp32",
    "typed",
    "busy",
    "auto",
    "small_arena",
    "spawned",
)


class Stack:
    def __init__(self, loop: LoopThread, roots: list[Path]) -> None:
        self.loop = loop
        self.manager = RepositoryManager(roots, default_registry(), mode=ControlMode.EXPLICIT)
        failures = loop.call(self.manager.startup(LOADED))
        assert failures == {}, failures
        self.engine = Engine(self.manager, server_version="test")

    def infer(self, model: str, inputs: dict[str, Any], outputs: list[str] | None = None) -> Any:
        request = InferRequest(
            model,
            inputs,
            outputs=None if outputs is None else [RequestedOutput(n) for n in outputs],
        )
        return self.loop.call(self.engine.infer(request)).outputs

    def gather(self, requests: list[InferRequest]) -> list[Any]:
        async def run() -> list[Any]:
            return await asyncio.gather(
                *(self.engine.infer(r) for r in requests), return_exceptions=True
            )

        return self.loop.call(run())


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repo(tmp_path_factory.mktemp("python_models"))


@pytest.fixture(scope="module")
def stack(loop_thread: LoopThread, repo: Path) -> Iterator[Stack]:
    made = Stack(loop_thread, [repo])
    try:
        yield made
    finally:
        loop_thread.call(made.manager.close())


def _strings(*items: bytes) -> np.ndarray[Any, Any]:
    out = np.empty((1, len(items)), dtype=object)
    out[0, :] = list(items)
    return out


# -- Triton-style models run unchanged --------------------------------------------------------


def test_simple_identity_echoes_bytes(stack: Stack) -> None:
    data = _strings(b"hello", b"", b"\x00\xffbinary")
    out = stack.infer("simple_identity", {"INPUT0": data})
    assert out["OUTPUT0"].tolist() == data.tolist()


def test_preprocessing_model_uses_config_helpers(stack: Stack) -> None:
    image = np.array([[0, 255, 128, 64] * 16], dtype=np.uint8).reshape(1, 8, 8)
    out = stack.infer("digits_preprocess", {"image": image})["input"]
    assert out.dtype == np.float32
    assert out.shape == (1, 64)
    assert out[0, :4].tolist() == [0.0, 16.0, 8.0, 4.0]


def test_triton_model_batch_of_concurrent_requests(stack: Stack) -> None:
    requests = [
        InferRequest("triton_fp32", {"IN": np.full((1, 3), float(i), dtype=np.float32)})
        for i in range(20, 26)
    ]
    results = stack.gather(requests)
    for i, result in zip(range(20, 26), results, strict=True):
        assert result.outputs["OUT"].tolist() == [[float(i)] * 3]


def test_response_error_fails_that_request_with_its_code(stack: Stack) -> None:
    with pytest.raises(InvalidArgumentError, match="seven is refused"):
        stack.infer("triton_fp32", {"IN": np.array([[7.0]], dtype=np.float32)})


def test_model_that_raises_answers_with_an_internal_error(stack: Stack) -> None:
    with pytest.raises(InternalError, match="ValueError: thirteen is unlucky"):
        stack.infer("triton_fp32", {"IN": np.array([[13.0]], dtype=np.float32)})
    out = stack.infer("triton_fp32", {"IN": np.array([[1.0]], dtype=np.float32)})
    assert out["OUT"].tolist() == [[1.0]]


def test_auto_complete_config_fills_the_configuration(stack: Stack) -> None:
    spec = stack.engine.model_config("auto")
    assert spec.max_batch_size == 4
    assert [(t.name, t.datatype.name, t.dims) for t in spec.inputs] == [("A", "FP32", (2,))]
    assert spec.dynamic_batching is not None
    out = stack.infer("auto", {"A": np.ones((3, 2), dtype=np.float32)})
    assert out["B"].tolist() == [[2.0, 2.0]] * 3


# -- the typed API -----------------------------------------------------------------------------


def test_typed_model_predicts_on_the_whole_batch(stack: Stack) -> None:
    requests = [InferRequest("typed", {"IN": np.full((2, 4), i, dtype=np.int32)}) for i in range(4)]
    results = stack.gather(requests)
    for i, result in enumerate(results):
        assert result.outputs["OUT"].tolist() == [[3 * i] * 4] * 2
    # the server batched them: predict saw more rows than one request has
    assert max(int(r.outputs["PID"][0, 0]) for r in results) > 2


def test_typed_model_error_fails_only_the_bad_request(stack: Stack) -> None:
    good = InferRequest("typed", {"IN": np.ones((1, 2), dtype=np.int32)})
    bad = InferRequest("typed", {"IN": -np.ones((1, 2), dtype=np.int32)})
    results = stack.gather([good, bad, good])
    assert results[0].outputs["OUT"].tolist() == [[3, 3]]
    assert isinstance(results[1], InvalidArgumentError)
    assert "negative values" in str(results[1])
    assert results[2].outputs["OUT"].tolist() == [[3, 3]]


# -- processes, crashes, memory ----------------------------------------------------------------


def test_two_instances_run_in_parallel(stack: Stack) -> None:
    requests = [InferRequest("busy", {"IN": np.array([[i]], dtype=np.int32)}) for i in range(2)]
    (a, b) = [r.outputs["T"][0] for r in stack.gather(requests)]
    assert a[2] != b[2]  # two worker processes
    overlap = min(a[1], b[1]) - max(a[0], b[0])
    assert overlap > 0.25, (a, b)  # each ran 0.5 s of GIL-holding Python, side by side


def test_worker_crash_fails_only_its_request_and_restarts(stack: Stack) -> None:
    first = stack.infer("triton_fp32", {"IN": np.array([[1.0]], dtype=np.float32)})
    old_pid = int(first["PID"][0, 0])

    async def scenario() -> tuple[BaseException | None, list[Any]]:
        identity = [
            stack.engine.infer(InferRequest("simple_identity", {"INPUT0": _strings(b"%d" % i)}))
            for i in range(30)
        ]
        crash = stack.engine.infer(
            InferRequest("triton_fp32", {"IN": np.array([[-1.0]], dtype=np.float32)})
        )
        outcome = await asyncio.gather(crash, *identity, return_exceptions=True)
        error = outcome[0] if isinstance(outcome[0], BaseException) else None
        return error, list(outcome[1:])

    error, others = stack.loop.call(scenario())
    assert isinstance(error, InternalError)
    assert (
        "the Python model worker for 'triton_fp32' instance 0 died (exit code 1) while "
        "executing; it is being restarted (restart " in str(error)
    )
    assert re.search(r"\(restart \d+ of this instance\)", str(error))
    assert all(not isinstance(o, BaseException) for o in others)  # other models never noticed
    after = stack.infer("triton_fp32", {"IN": np.array([[2.0]], dtype=np.float32)})
    assert after["OUT"].tolist() == [[2.0]]
    assert int(after["PID"][0, 0]) != old_pid
    assert stack.engine.model_ready("triton_fp32")


def _wait_until_dead(pid: int, timeout_s: float = 10.0) -> None:
    """Until the kernel has made ``pid`` a zombie (its parent, the server, reaps it)."""
    deadline = time.monotonic() + timeout_s
    stat = Path(f"/proc/{pid}/stat")
    while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, f"process {pid} did not die"
        time.sleep(0.005)


def test_worker_killed_while_idle_is_replaced_before_the_next_request(stack: Stack) -> None:
    pid = int(stack.infer("triton_fp32", {"IN": np.zeros((1, 1), np.float32)})["PID"][0, 0])
    os.kill(pid, signal.SIGKILL)
    _wait_until_dead(pid)
    out = stack.infer("triton_fp32", {"IN": np.zeros((1, 1), np.float32)})
    assert int(out["PID"][0, 0]) != pid


def test_arena_grows_for_a_big_request_and_refuses_past_its_cap(stack: Stack) -> None:
    big = np.arange(3 << 20, dtype=np.uint8) % 251  # 3 MiB > the 64 KiB initial arena
    out = stack.infer("small_arena", {"IN": big})
    np.testing.assert_array_equal(out["OUT"], big)
    with pytest.raises(OverloadedError, match=r"at most 4\.0 MiB"):
        stack.infer("small_arena", {"IN": np.zeros(5 << 20, dtype=np.uint8)})
    assert stack.infer("small_arena", {"IN": big[:10]})["OUT"].tolist() == big[:10].tolist()


def test_failed_initialize_is_a_load_error(stack: Stack) -> None:
    with pytest.raises(InferdError, match=r"initialize\(\) of instance 0 failed: .*weights"):
        stack.loop.call(stack.engine.load_model("broken_init"))


def test_shared_memory_is_released_after_unload(loop_thread: LoopThread, repo: Path) -> None:
    before = ours()
    extra = Stack(loop_thread, [repo])
    assert len(ours() - before) >= len(LOADED)  # one arena per instance at least
    assert not any(n.startswith(f"{shm.PREFIX}{os.getpid()}-") for n in os.listdir(shm.SHM_DIR))
    extra.infer("simple_identity", {"INPUT0": _strings(b"x")})
    loop_thread.call(extra.manager.close())
    assert ours() == before


def test_spawn_start_runs_a_plain_subprocess_and_the_default_forks_from_the_zygote(
    stack: Stack,
) -> None:
    def parent(pid: int) -> int:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

    spawned = stack.infer("spawned", {"IN": np.array([[4.0]], dtype=np.float32)})
    assert spawned["OUT"].tolist() == [[4.0]]
    assert parent(int(spawned["PID"][0, 0])) == os.getpid()
    forked = stack.infer("triton_fp32", {"IN": np.array([[4.0]], dtype=np.float32)})
    zygote = parent(int(forked["PID"][0, 0]))
    assert zygote != os.getpid()
    assert parent(zygote) == os.getpid()


def test_outputs_are_views_that_stay_valid_while_held(stack: Stack) -> None:
    """Responses are views of the arena; later batches never overwrite one still held, even
    when the held ones fill the (64 KiB) arena and the instance must move to a fresh one."""
    held = [
        stack.infer("small_arena", {"IN": np.full(20_000, 20 + i, dtype=np.uint8)})["OUT"]
        for i in range(12)
    ]
    assert not held[0].flags.owndata  # a view of shared memory, not a copy
    for i, out in enumerate(held):
        assert out.shape == (20_000,)
        assert (out == 20 + i).all(), i
    del held
    again = stack.infer("small_arena", {"IN": np.full(20_000, 99, dtype=np.uint8)})["OUT"]
    assert (again == 99).all()


def test_workers_never_import_main(tmp_path: Path, repo: Path) -> None:
    """A script without a main guard embeds the server: its top-level code runs once (the
    workers are forked from our zygote or spawned with -m, never through multiprocessing)."""
    log = tmp_path / "runs.txt"
    script = tmp_path / "embed.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import numpy as np
            from inferd.repository.manager import ControlMode
            from inferd.server.embedded import InferenceServer

            with open({str(log)!r}, "a") as f:
                f.write("top-level code ran\\n")
            with InferenceServer(
                {str(repo)!r},
                model_control_mode=ControlMode.EXPLICIT,
                load_models=("triton_fp32", "typed", "spawned"),
            ) as server:
                out = server.infer("triton_fp32", {{"IN": np.array([[5.0]], np.float32)}})
                assert out["OUT"].tolist() == [[5.0]], out
                out = server.infer("spawned", {{"IN": np.array([[6.0]], np.float32)}})
                assert out["OUT"].tolist() == [[6.0]], out
            print("done")
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert log.read_text().splitlines() == ["top-level code ran"]


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_zygote_and_workers_die_with_a_killed_server(tmp_path: Path, repo: Path) -> None:
    script = tmp_path / "serve.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            from inferd.repository.manager import ControlMode
            from inferd.server.embedded import InferenceServer

            server = InferenceServer(
                {str(repo)!r}, model_control_mode=ControlMode.EXPLICIT, load_models=("busy",)
            ).start()
            print("ready", flush=True)
            time.sleep(120)
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        zygotes = _children(proc.pid)
        workers = {w for z in zygotes for w in _children(z)}
        assert len(zygotes) == 1, zygotes
        assert len(workers) == 2, workers  # "busy" has two instances
        proc.kill()  # no cleanup at all: EOF and PR_SET_PDEATHSIG must do it
        proc.wait(10)
        deadline = time.monotonic() + 10
        while not all(_gone(p) for p in zygotes | workers):
            assert time.monotonic() < deadline, "the zygote or a worker outlived the server"
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


# -- over the network with tritonclient --------------------------------------------------------


def test_http_and_grpc_clients(repo: Path) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    from inferd.server.embedded import InferenceServer

    with InferenceServer(
        repo,
        http_port=0,
        grpc_port=0,
        model_control_mode=ControlMode.EXPLICIT,
        load_models=LOADED,
    ) as server:
        data = np.array([[b"abc", b"de"]], dtype=object)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{server.ports['http']}")
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.ports['grpc']}")
        try:
            for module, client in ((httpclient, http), (grpcclient, grpc)):
                item = module.InferInput("INPUT0", [1, 2], "BYTES")
                item.set_data_from_numpy(data)
                result = client.infer("simple_identity", [item])
                assert result.as_numpy("OUTPUT0").tolist() == data.tolist()
                bad = module.InferInput("IN", [1, 1], "FP32")
                bad.set_data_from_numpy(np.array([[7.0]], dtype=np.float32))
                with pytest.raises(InferenceServerException, match="seven is refused"):
                    client.infer("triton_fp32", [bad])
        finally:
            http.close()
            grpc.close()


# -- the backend conformance kit -------------------------------------------------------------

CONFORMANCE_TRITON = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("DOUBLE", x * 2), pb_utils.Tensor("NEG", -x),
            ]))
        return out
"""
CONFORMANCE_TYPED = """
from inferd.backends.python.api import Model


class Double(Model):
    def predict(self, inputs):
        return {"DOUBLE": inputs["X"] * 2, "NEG": -inputs["X"]}
"""
CONFORMANCE_CONFIG = """
name: "{name}" backend: "python" max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 3 ] }} ]
output [ {{ name: "DOUBLE" data_type: TYPE_FP32 dims: [ 3 ] }},
         {{ name: "NEG" data_type: TYPE_FP32 dims: [ 3 ] }} ]
"""


def _conformance_case(name: str, source: str) -> Any:
    from inferd.testing.conformance import ConformanceCase

    def write_model(version_dir: Path) -> str:
        (version_dir / "model.py").write_text(textwrap.dedent(source))
        return CONFORMANCE_CONFIG.format(name=name)

    def make_inputs(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray[Any, Any]]:
        return {"X": rng.standard_normal((rows, 3)).astype(np.float32)}

    def check_outputs(inputs: Any, outputs: Any) -> None:
        np.testing.assert_allclose(outputs["DOUBLE"], inputs["X"] * 2)
        np.testing.assert_allclose(outputs["NEG"], -inputs["X"])

    return ConformanceCase(name, write_model, make_inputs, check_outputs)


def _conformance() -> Any:
    from inferd.testing.conformance import conformance_tests

    return conformance_tests(
        _conformance_case("py_triton", CONFORMANCE_TRITON),
        _conformance_case("py_typed", CONFORMANCE_TYPED),
    )


test_python_backend_conformance = _conformance()
