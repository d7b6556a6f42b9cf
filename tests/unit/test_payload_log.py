"""The payload log: sampling, redaction, rotation, the bounded hand-off and its counts, the JSONL
and Parquet files it writes, and the folder a model name may pick."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError
from inferd.metrics.payload_log import PayloadLogCollector
from inferd.monitoring.payload_log import PayloadLogger, PayloadLogSettings
from inferd.monitoring.payload_log.buffer import HandOff
from inferd.monitoring.payload_log.files import confined, model_folder, should_rotate
from inferd.monitoring.payload_log.settings import parse_names, parse_rates


def spec(name: str = "simple") -> ModelSpec:
    return spec_from_proto(
        parse_pbtxt(
            f'name: "{name}" backend: "onnxruntime" max_batch_size: 8 '
            'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }, '
            '{ name: "SECRET" data_type: TYPE_STRING dims: [ 1 ] } ] '
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            "test",
        )
    )


def request(i: int, secret: bytes = b"4111-1111-1111-1111") -> InferRequest:
    return InferRequest(
        model_name="simple",
        inputs={
            "INPUT0": np.arange(4, dtype=np.int32).reshape(1, 4) + i,
            "SECRET": np.array([[secret]], dtype=object),
        },
        id=f"req-{i}",
        parameters={"priority": 1},
    )


def outputs(i: int) -> dict[str, np.ndarray[Any, Any]]:
    return {"OUTPUT0": np.full((1, 4), i / 2, dtype=np.float32)}


def settings(directory: Path, **kwargs: Any) -> PayloadLogSettings:
    kwargs.setdefault("flush_secs", 0.05)
    return PayloadLogSettings(directory=directory, **kwargs)


def read_jsonl(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(directory.rglob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


# -- sampling ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.05, 0.3, 0.9])
def test_the_share_logged_stays_within_binomial_bounds(tmp_path: Path, rate: float) -> None:
    n = 20_000
    logger = PayloadLogger(
        settings(tmp_path, rate=rate, queue_requests=n + 1), draw=random.Random(7).random
    )
    model = spec()
    for i in range(n):
        logger.observe(model, 1, request(i), outputs(i))
    sampled = logger.statistics().queued
    sd = math.sqrt(n * rate * (1 - rate))
    assert abs(sampled - n * rate) < 5 * sd


def test_rates_per_model_and_the_models_left_out(tmp_path: Path) -> None:
    s = settings(tmp_path, rate=0.5, model_rates={"a": 1.0, "b": 0.0}, models=frozenset("abc"))
    assert (s.rate_for("a"), s.rate_for("b"), s.rate_for("c"), s.rate_for("d")) == (1, 0, 0.5, 0)
    logger = PayloadLogger(s, draw=lambda: 0.0)
    for name in "abd":
        logger.observe(spec(name), 1, request(0), outputs(0))
    assert logger.statistics().queued == 1  # a only: b has rate 0, d is left out


def test_rate_flags_parse_and_refuse_loudly() -> None:
    assert parse_rates(["0.25", "a=1", "b=0"]) == (0.25, {"a": 1.0, "b": 0.0})
    assert parse_rates([]) == (None, {})
    for bad, words in [
        (["1.5"], "from 0 to 1"),
        (["a=x"], "not a rate"),
        (["0.1", "0.2"], "twice"),
        (["a=1", "a=0.5"], "twice"),
        (["a/b=1"], "invalid model name"),
        (["nan"], "from 0 to 1"),
    ]:
        with pytest.raises(InvalidArgumentError, match=words):
            parse_rates(bad)
    assert parse_names(["a,b", "c"], "--x", models=True) == {"a", "b", "c"}
    with pytest.raises(InvalidArgumentError, match="empty name"):
        parse_names(["a,,b"], "--x", models=False)
    with pytest.raises(InvalidArgumentError, match="leaves out"):
        PayloadLogSettings(Path("."), model_rates={"a": 1.0}, models=frozenset({"b"}))
    with pytest.raises(InvalidArgumentError, match="jsonl, parquet"):
        PayloadLogSettings(Path("."), format="csv")


# -- the bounded hand-off ------------------------------------------------------------------------


def test_the_bounds_refuse_past_either_one_and_free_on_release() -> None:
    handoff: HandOff[str] = HandOff(max_items=3, max_bytes=100)
    assert [handoff.admit(10) for _ in range(4)] == [True, True, True, False]
    handoff.offer("chunk of 3")
    assert handoff.take(0) == ["chunk of 3"]
    assert not handoff.admit(10)  # taken but not released: still held
    handoff.release(3, 30)
    assert handoff.admit(60)
    assert not handoff.admit(50)  # 110 bytes would pass the bound
    assert handoff.admit(40)
    assert handoff.depth() == (2, 100)
    handoff.release(*handoff.depth())
    assert handoff.admit(1000)  # larger than the bound: admitted only alone
    assert not handoff.admit(1)
    handoff.release(1, 1000)
    handoff.seal()
    assert not handoff.admit(1)  # sealed: nothing more


def test_a_full_queue_drops_and_counts_and_never_blocks(tmp_path: Path) -> None:
    logger = PayloadLogger(settings(tmp_path, queue_requests=5))  # not started: nothing drains
    for i in range(12):
        logger.observe(spec(), 1, request(i), outputs(i))
    stats = logger.statistics()
    assert stats.queued == 5
    (model,) = stats.models
    assert (model.model, model.dropped_queue_full, model.logged) == ("simple", 7, 0)


# -- files ---------------------------------------------------------------------------------------


def test_jsonl_records_hold_v2_tensors_and_redacted_inputs_only_as_a_marker(tmp_path: Path) -> None:
    logger = PayloadLogger(settings(tmp_path, redact=frozenset({"SECRET"})))
    logger.start()
    for i in range(3):
        logger.observe(spec(), 2, request(i), outputs(i))
    logger.stop()
    files = list(tmp_path.rglob("*.jsonl"))
    assert [f.parent.name for f in files] == ["simple"]
    assert b"4111" not in files[0].read_bytes()
    records = read_jsonl(tmp_path)
    assert [r["id"] for r in records] == ["req-0", "req-1", "req-2"]
    first = records[1]
    assert (first["model"], first["version"], first["parameters"]) == ("simple", 2, {"priority": 1})
    assert first["timestamp"].endswith("Z")
    assert first["inputs"] == [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "SECRET", "redacted": True},
    ]
    assert first["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "data": [0.5] * 4}
    ]
    (model,) = logger.statistics().models
    assert (model.logged, model.files, model.bytes) == (3, 1, files[0].stat().st_size)


def test_tensors_json_cannot_hold_are_written_in_binary(tmp_path: Path) -> None:
    logger = PayloadLogger(settings(tmp_path))
    logger.start()
    req = request(0, secret=b"\xff\xfe")
    logger.observe(spec(), 1, req, {"OUTPUT0": np.array([[np.nan, 1, 2, 3]], np.float32)})
    logger.stop()
    (record,) = read_jsonl(tmp_path)
    secret = record["inputs"][1]
    assert "data" not in secret
    assert secret["binary_data_base64"] == "AgAAAP/+"  # length-prefixed, as on the wire
    out = record["outputs"][0]
    raw = np.frombuffer(__import__("base64").b64decode(out["binary_data_base64"]), np.float32)
    assert math.isnan(raw[0])
    assert list(raw[1:]) == [1, 2, 3]


def test_files_rotate_by_size_and_every_record_is_kept(tmp_path: Path) -> None:
    logger = PayloadLogger(settings(tmp_path, rotate_bytes=1024))
    logger.start()
    for i in range(40):
        logger.observe(spec(), 1, request(i), outputs(i))
    logger.stop()
    files = sorted(tmp_path.rglob("*.jsonl"))
    assert len(files) > 3
    assert all(f.stat().st_size < 1024 + 2048 for f in files)
    assert sorted(int(r["id"][4:]) for r in read_jsonl(tmp_path)) == list(range(40))
    assert logger.statistics().models[0].files == len(files)


def test_files_rotate_by_age() -> None:
    assert should_rotate(10, opened_ns=0, now_ns=int(5e9), rotate_bytes=100, rotate_secs=5)
    assert not should_rotate(10, opened_ns=0, now_ns=int(4e9), rotate_bytes=100, rotate_secs=5)
    assert not should_rotate(10, opened_ns=0, now_ns=int(1e12), rotate_bytes=100, rotate_secs=0)
    assert should_rotate(100, opened_ns=0, now_ns=0, rotate_bytes=100, rotate_secs=0)


def test_an_idle_file_is_closed_once_old(tmp_path: Path) -> None:
    clock = [0]
    logger = PayloadLogger(
        settings(tmp_path, rotate_secs=10, format="parquet"), wall_ns=lambda: clock[0]
    )
    logger.start()
    try:
        logger.observe(spec(), 1, request(0), outputs(0))
        _wait(lambda: logger.statistics().models and logger.statistics().models[0].files == 1)
        assert list(tmp_path.rglob("*.parquet")) == []  # open: still .partial
        clock[0] = int(11e9)
        _wait(lambda: list(tmp_path.rglob("*.parquet")))
    finally:
        logger.stop()
    assert list(tmp_path.rglob("*.partial")) == []


def _wait(condition: Any, timeout_s: float = 10.0) -> None:
    import time

    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.01)


def test_parquet_has_one_row_per_request_with_typed_tensor_columns(tmp_path: Path) -> None:
    logger = PayloadLogger(settings(tmp_path, format="parquet", redact=frozenset({"SECRET"})))
    logger.start()
    for i in range(5):
        logger.observe(spec(), 3, request(i), outputs(i))
    # another set of tensors: a file of its own
    logger.observe(spec(), 3, request(9), {"OUTPUT0": np.zeros((1, 2), np.float16)})
    logger.stop()
    files = sorted(tmp_path.rglob("*.parquet"))
    assert len(files) == 2
    assert list(tmp_path.rglob("*.partial")) == []
    table = pq.read_table(files[0])
    assert table.column_names == [
        "id",
        "model",
        "version",
        "timestamp",
        "parameters",
        "redacted",
        "input.INPUT0",
        "output.OUTPUT0",
    ]
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == [f"req-{i}" for i in range(5)]
    assert rows[2]["input.INPUT0"] == {"shape": [1, 4], "data": [2, 3, 4, 5]}
    assert rows[2]["output.OUTPUT0"] == {"shape": [1, 4], "data": [1.0] * 4}
    assert rows[2]["redacted"] == ["SECRET"]
    assert json.loads(rows[2]["parameters"]) == {"priority": 1}
    assert table.schema.field("input.INPUT0").metadata == {b"datatype": b"INT32"}
    assert b"4111" not in files[0].read_bytes()
    other = pq.read_table(files[1])
    assert other.schema.field("output.OUTPUT0").metadata == {b"datatype": b"FP16"}
    assert logger.statistics().models[0].logged == 6


def test_bytes_tensors_in_parquet(tmp_path: Path) -> None:
    logger = PayloadLogger(settings(tmp_path, format="parquet"))
    logger.start()
    logger.observe(spec(), 1, request(0, secret=b"\x00\xff"), outputs(0))
    logger.stop()
    (path,) = tmp_path.rglob("*.parquet")
    row = pq.read_table(path).to_pylist()[0]
    assert row["input.SECRET"] == {"shape": [1, 1], "data": [b"\x00\xff"]}


def test_a_write_that_fails_drops_and_counts_and_the_writer_goes_on(tmp_path: Path) -> None:
    (tmp_path / "simple").write_text("a file where the model's folder should be")
    logger = PayloadLogger(settings(tmp_path))
    logger.start()
    for i in range(4):
        logger.observe(spec(), 1, request(i), outputs(i))
    _wait(lambda: logger.statistics().models and logger.statistics().models[0].dropped_write_error)
    logger.observe(spec("other"), 1, request(9), outputs(9))
    logger.stop()
    by_model = {m.model: m for m in logger.statistics().models}
    assert by_model["simple"].dropped_write_error == 4
    assert by_model["simple"].logged == 0
    assert by_model["other"].logged == 1


def test_start_refuses_a_folder_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    logger = PayloadLogger(settings(blocker / "logs"))
    with pytest.raises(Exception, match="cannot be written"):
        logger.start()


def test_the_counters_are_exported_as_metrics(tmp_path: Path) -> None:
    logger = PayloadLogger(settings(tmp_path, queue_requests=1))
    logger.observe(spec(), 1, request(0), outputs(0))
    logger.observe(spec(), 1, request(1), outputs(1))
    registry = CollectorRegistry()
    registry.register(PayloadLogCollector(logger.statistics))
    text = generate_latest(registry).decode()
    assert 'inferd_payload_log_dropped_total{model="simple",reason="queue_full"} 1.0' in text
    assert 'inferd_payload_log_requests_total{model="simple"} 0.0' in text
    assert "inferd_payload_log_queued_requests 1.0" in text
    assert 'inferd_payload_log_files_total{model="simple"} 0.0' in text
    assert 'inferd_payload_log_bytes_total{model="simple"} 0.0' in text
    assert "inferd_payload_log_writer_cpu_seconds_total 0.0" in text  # never started
    assert "inferd_payload_log_encode_cpu_seconds_total 0.0" in text  # nothing encoded yet


# -- where a model's files go --------------------------------------------------------------------


@given(st.text(min_size=1, max_size=80))
def test_any_model_name_picks_one_folder_inside_the_directory(name: str) -> None:
    folder = model_folder(name)
    assert "/" not in folder
    assert "\\" not in folder
    assert folder not in (".", "..")
    assert not folder.startswith(".")
    assert confined(Path("/srv/logs"), folder).parent == Path("/srv/logs")


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_two_model_names_never_share_a_folder(a: str, b: str) -> None:
    if a != b:
        assert model_folder(a) != model_folder(b)


def test_plain_names_are_their_own_folder_and_others_are_spelled_safely() -> None:
    assert model_folder("densenet_onnx-1.2") == "densenet_onnx-1.2"
    assert model_folder("..").startswith("+..-")
    assert model_folder(".hidden").startswith("+.hidden-")
    assert model_folder("模型").startswith("+__-")
    assert model_folder("with space") != model_folder("with_space")


def test_a_folder_resolving_outside_the_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "evil").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="outside"):
        confined(tmp_path / "logs", "evil")
