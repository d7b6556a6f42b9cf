"""Sequence models end to end: Triton's own sequence client examples run unmodified against the
example repository, every sequence error through tritonclient, idle release and the backlog."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

# Triton client repository, src/python/examples, commit 58a44caa (kept byte for byte)
TRITON_EXAMPLES = Path(__file__).parent / "triton_examples"
ROOT = Path(__file__).parents[2]


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=90
    )


@pytest.mark.parametrize("dyna", [False, True], ids=["simple_sequence", "dyna"])
@pytest.mark.parametrize(
    "script",
    [
        "simple_http_sequence_sync_infer_client.py",
        "simple_grpc_sequence_sync_infer_client.py",
        "simple_grpc_sequence_stream_infer_client.py",
        "simple_grpc_aio_sequence_stream_infer_client.py",
    ],
)
def test_triton_sequence_examples_pass(server: ServerProcess, script: str, dyna: bool) -> None:
    url = server.http_url if "_http_" in script else server.grpc_url
    done = _run(TRITON_EXAMPLES / script, "-u", url, *(["-d"] if dyna else []))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "PASS" in done.stdout


def test_signal_filter_client_example(server: ServerProcess) -> None:
    done = _run(ROOT / "examples" / "clients" / "signal_filter_stream.py", "--url", server.grpc_url)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "PASS: signal_filter" in done.stdout


# -- errors -------------------------------------------------------------------------------------


def _one(value: int = 1) -> np.ndarray:
    return np.full((1, 1), value, dtype=np.int32)


def _http_infer(client: Any, model: str = "simple_sequence", data: Any = None, **kw: Any) -> Any:
    data = _one() if data is None else data
    item = httpclient.InferInput("INPUT", list(data.shape), "INT32")
    item.set_data_from_numpy(data)
    return client.infer(model, [item], **kw)


def _grpc_infer(client: Any, model: str = "simple_sequence", **kw: Any) -> Any:
    item = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    item.set_data_from_numpy(_one())
    return client.infer(model, [item], **kw)


@pytest.fixture
def http(server: ServerProcess) -> Iterator[Any]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.close()


@pytest.fixture
def grpc(server: ServerProcess) -> Iterator[Any]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


ERRORS = [
    ({}, "must specify a non-zero or non-empty correlation ID"),
    ({"sequence_id": 4001}, "sequence 4001 .* must specify the START flag on the first request"),
    ({"sequence_id": "never-started"}, "sequence never-started .* must specify the START flag"),
]


@pytest.mark.parametrize(("kwargs", "message"), ERRORS)
def test_requests_outside_a_sequence_are_refused(
    http: Any, grpc: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InferenceServerException, match=message) as caught:
        _http_infer(http, **kwargs)
    assert caught.value.status() == "400"
    with pytest.raises(InferenceServerException, match=message) as caught:
        _grpc_infer(grpc, **kwargs)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_ended_sequences_are_refused_and_a_second_start_restarts(http: Any, grpc: Any) -> None:
    assert _http_infer(http, sequence_id=4100, sequence_start=True).as_numpy("OUTPUT")[0][0] == 2
    # Triton: a START on an open sequence ends it early and starts a new one (START is 1 again)
    assert _grpc_infer(grpc, sequence_id=4100, sequence_start=True).as_numpy("OUTPUT")[0][0] == 2
    assert _grpc_infer(grpc, sequence_id=4100).as_numpy("OUTPUT")[0][0] == 1
    _grpc_infer(grpc, sequence_id=4100, sequence_end=True)
    with pytest.raises(InferenceServerException, match="continues a sequence that has already"):
        _http_infer(http, sequence_id=4100)
    # the id may start a new sequence once the old one has ended
    assert _http_infer(http, sequence_id=4100, sequence_start=True, sequence_end=True)


def _sum(client: Any, value: int, **kw: Any) -> int:
    data = np.full((1, 1), value, dtype=np.int32)
    result = _http_infer(client, "simple_string_dyna_sequence", data=data, **kw)
    return int(result.as_numpy("OUTPUT")[0][0])


def test_a_start_on_an_open_sequence_starts_again_from_fresh_state(
    http: Any, server: ServerProcess
) -> None:
    """The old sequence's implicit state (a running sum) is dropped; the new one starts at 0."""
    assert _sum(http, 5, sequence_id="4200", sequence_start=True) == 5
    assert _sum(http, 3, sequence_id="4200") == 8
    assert _sum(http, 10, sequence_id="4200", sequence_start=True) == 10
    assert (
        "sequence 4200 for model 'simple_string_dyna_sequence' has a conflict. The previous "
        "sequence did not end before this sequence start" in server.log_path.read_text()
    )
    assert _sum(http, 1, sequence_id="4200") == 11
    assert _sum(http, 1, sequence_id="4200", sequence_end=True) == 12 + 4200
    with pytest.raises(InferenceServerException, match="continues a sequence that has already"):
        _sum(http, 1, sequence_id="4200")


def test_batch_size_and_corrid_type_are_checked(http: Any, grpc: Any) -> None:
    with pytest.raises(InferenceServerException, match="must specify batch-size 1"):
        _http_infer(http, data=np.ones((2, 1), np.int32), sequence_id=7, sequence_start=True)
    with pytest.raises(InferenceServerException, match="control 'CORRID' data-type is 'BYTES'"):
        _grpc_infer(grpc, "simple_dyna_sequence", sequence_id="x1", sequence_start=True)
    with pytest.raises(InferenceServerException, match="data-type is 'UINT64', but model"):
        _http_infer(http, "simple_string_dyna_sequence", sequence_id=12, sequence_start=True)
    start = httpclient.InferInput("START", [1, 1], "INT32")
    start.set_data_from_numpy(_one())
    value = httpclient.InferInput("INPUT", [1, 1], "INT32")
    value.set_data_from_numpy(_one())
    with pytest.raises(InferenceServerException, match="unexpected inference input 'START'"):
        http.infer("simple_sequence", [value, start], sequence_id=8, sequence_start=True)


def test_implicit_state_is_kept_per_sequence(http: Any) -> None:
    model = "simple_string_dyna_sequence"
    sums = {"301": 0, "302": 0}
    for step, value in enumerate([5, 7, -2, 10]):
        for key in sums:
            sums[key] += value * (1 if key == "301" else 3)
            got = _http_infer(
                http,
                model,
                data=_one(value * (1 if key == "301" else 3)),
                sequence_id=key,
                sequence_start=step == 0,
            )
            assert got.as_numpy("OUTPUT")[0][0] == sums[key]
    end = _http_infer(http, model, data=_one(0), sequence_id="301", sequence_end=True)
    assert end.as_numpy("OUTPUT")[0][0] == sums["301"] + 301
    stats = http.get_inference_statistics(model)["model_stats"][0]
    assert stats["inference_count"] >= 9


# -- idle release and the backlog ----------------------------------------------------------------


@pytest.fixture(scope="module")
def one_slot_server(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """simple_sequence with one instance, one slot and a 300 ms idle limit."""
    repo = tmp_path_factory.mktemp("one_slot")
    target = repo / "simple_sequence"
    shutil.copytree(example_repo / "simple_sequence", target)
    config = (target / "config.pbtxt").read_text()
    config = re.sub(r"max_batch_size: \d+", "max_batch_size: 1", config)
    config = config.replace(
        "sequence_batching {", "sequence_batching {\n  max_sequence_idle_microseconds: 300000"
    )
    (target / "config.pbtxt").write_text(config)
    with running_server([repo]) as proc:
        yield proc


def test_idle_sequence_is_released_and_backlog_waits(one_slot_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(one_slot_server.http_url, concurrency=2)
    other = httpclient.InferenceServerClient(one_slot_server.http_url)
    try:
        _http_infer(client, sequence_id=1, sequence_start=True)
        # the only slot is taken: sequence 2 waits in the backlog until sequence 1 lets go
        result: dict[str, Any] = {}

        def second() -> None:
            result["out"] = _http_infer(other, sequence_id=2, sequence_start=True)

        waiting = threading.Thread(target=second)
        waiting.start()
        waiting.join(0.1)
        assert waiting.is_alive()
        # sequence 1 falls idle: after 300 ms its slot goes to sequence 2
        waiting.join(10)
        assert not waiting.is_alive()
        assert result["out"].as_numpy("OUTPUT")[0][0] == 2
        with pytest.raises(InferenceServerException, match="released after being idle"):
            _http_infer(client, sequence_id=1)
    finally:
        client.close()
        other.close()


# -- warm-up and the direct strategy's padding ---------------------------------------------------

WARM_INPUT = (
    'inputs { key: "INPUT" value: { data_type: TYPE_INT32 dims: [ 1 ] random_data: true } }'
)
# Triton's way (qa/L0_warmup): the sample lists the control inputs itself
WARM_CONTROLS = WARM_INPUT + (
    ' inputs { key: "START" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } '
    'inputs { key: "READY" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }'
)


def _with_warmup(source: Path, target: Path, inputs: str, *, one_slot: bool = False) -> None:
    shutil.copytree(source, target)
    config = (target / "config.pbtxt").read_text().replace(source.name, target.name)
    if one_slot:  # one instance, one slot, and a long idle limit: a slot left taken would block
        config = re.sub(r"max_batch_size: \d+", "max_batch_size: 1", config)
        config = config.replace(
            "sequence_batching {", "sequence_batching {\n  max_sequence_idle_microseconds: 60000000"
        )
    config += f'\nmodel_warmup [ {{ name: "warm" batch_size: 3 count: 2 {inputs} }} ]\n'
    (target / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def warm_server(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    repo = tmp_path_factory.mktemp("warm")
    _with_warmup(example_repo / "simple_sequence", repo / "warm_sequence", WARM_INPUT)
    _with_warmup(
        example_repo / "simple_sequence", repo / "warm_one_slot", WARM_CONTROLS, one_slot=True
    )
    _with_warmup(example_repo / "simple_string_dyna_sequence", repo / "warm_state", WARM_INPUT)
    with running_server([repo]) as proc:
        yield proc


def test_sequence_models_warm_up_and_leave_nothing_behind(warm_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(warm_server.http_url, network_timeout=20)
    try:
        for model in ("warm_sequence", "warm_one_slot", "warm_state"):
            assert client.is_model_ready(model)
            assert client.get_inference_statistics(model)["model_stats"][0]["execution_count"] == 0
        # the only slot is free: a warm-up that kept it would hold this request for 60 s
        got = _http_infer(client, "warm_one_slot", _one(4), sequence_id=1, sequence_start=True)
        assert got.as_numpy("OUTPUT")[0][0] == 5  # READY * (INPUT + START)
        _http_infer(client, "warm_one_slot", _one(4), sequence_id=1, sequence_end=True)
        # the state starts from its initial value (0), not from the warm-up's random sums
        for step, value in enumerate([3, 4]):
            got = _http_infer(
                client, "warm_state", _one(value), sequence_id="77", sequence_start=step == 0
            )
        assert got.as_numpy("OUTPUT")[0][0] == 7
    finally:
        client.close()


def _batch_sizes(client: Any, model: str) -> dict[int, int]:
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}


def test_direct_strategy_pads_idle_slots_below_the_highest(warm_server: ServerProcess) -> None:
    """warm_sequence: direct strategy, one instance, 8 slots. Three sequences take slots 0, 1
    and 2; a request of the third alone runs as a batch of 3 rows, slots 0 and 1 padded."""
    model = "warm_sequence"
    client = httpclient.InferenceServerClient(warm_server.http_url)
    try:
        for key in (11, 12, 13):
            got = _http_infer(client, model, _one(key), sequence_id=key, sequence_start=True)
            assert got.as_numpy("OUTPUT")[0][0] == key + 1
        before = client.get_inference_statistics(model)["model_stats"][0]
        sizes = _batch_sizes(client, model)
        got = _http_infer(client, model, _one(5), sequence_id=13)
        assert got.as_numpy("OUTPUT")[0][0] == 5  # its own row, READY true
        after = client.get_inference_statistics(model)["model_stats"][0]
        grown = {
            size: count - sizes.get(size, 0)
            for size, count in _batch_sizes(client, model).items()
            if count != sizes.get(size, 0)
        }
        assert grown == {3: 1}  # one execution of 3 rows: the model saw the padding
        # as Triton counts: padding rows are in the batch size, not in the inference count
        assert int(after["inference_count"]) - int(before["inference_count"]) == 1
        assert int(after["execution_count"]) - int(before["execution_count"]) == 1
        for key in (11, 12, 13):
            _http_infer(client, model, _one(0), sequence_id=key, sequence_end=True)
    finally:
        client.close()
