"""``inferd perf``: reading a model and its statistics from v2 answers (JSON and gRPC)."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2, service_pb2

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.metadata import (
    error_text,
    model_info,
    model_info_from_proto,
    select_statistics,
    split_url,
    statistics_from_proto,
)
from inferd.tools.perf.transport import TensorInfo

SIMPLE_META = {
    "name": "simple",
    "versions": ["1"],
    "platform": "onnxruntime_onnx",
    "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}],
    "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]}],
}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("localhost:8000", ("localhost", 8000)),
        ("localhost", ("localhost", 8001)),
        ("http://10.0.0.1:9000/", ("10.0.0.1", 9000)),
        ("grpc://h:1", ("h", 1)),
        ("[::1]:8000", ("::1", 8000)),
        ("[::1]", ("::1", 8001)),
        ("::1", ("::1", 8001)),
    ],
)
def test_urls(url: str, expected: tuple[str, int]) -> None:
    assert split_url(url, 8001) == expected


@pytest.mark.parametrize("url", ["h:port", "h:0", "h:99999", "h:1/v2", ":80", "[::1:80"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidArgumentError, match="-u"):
        split_url(url, 8000)


def test_model_info_drops_the_batch_dim_and_reads_the_config() -> None:
    config = {"max_batch_size": 8, "model_transaction_policy": {"decoupled": False}}
    info = model_info(SIMPLE_META, config, "")
    assert info.inputs == (TensorInfo("INPUT0", "INT32", (16,)),)
    assert info.outputs == (TensorInfo("OUTPUT0", "INT32", (16,)),)
    assert info.max_batch_size == 8
    assert not info.decoupled
    assert not info.sequence
    unbatched = model_info(
        SIMPLE_META,
        {
            "max_batch_size": 0,
            "model_transaction_policy": {"decoupled": True},
            "sequence_batching": {"max_sequence_idle_microseconds": 5},
        },
        "3",
    )
    assert unbatched.inputs[0].shape == (-1, 16)
    assert unbatched.decoupled
    assert unbatched.sequence
    assert unbatched.version == "3"


def test_malformed_metadata_is_a_clear_error() -> None:
    with pytest.raises(InvalidArgumentError, match="malformed input"):
        model_info({"name": "m", "inputs": [{"name": "X"}], "outputs": []}, {}, "")
    with pytest.raises(InvalidArgumentError, match="no outputs list"):
        model_info({"name": "m", "inputs": []}, {}, "")


def test_model_info_from_grpc_messages() -> None:
    meta = service_pb2.ModelMetadataResponse(name="seq")
    meta.inputs.add(name="INPUT", datatype="INT32", shape=[-1, 1])
    meta.outputs.add(name="OUTPUT", datatype="INT32", shape=[-1, 1])
    config = model_config_pb2.ModelConfig(name="seq", max_batch_size=4)
    config.sequence_batching.max_sequence_idle_microseconds = 1000
    info = model_info_from_proto(meta, config, "")
    assert info.inputs == (TensorInfo("INPUT", "INT32", (1,)),)
    assert info.sequence
    assert not info.decoupled
    config.model_transaction_policy.decoupled = True
    config.ClearField("sequence_batching")
    assert model_info_from_proto(meta, config, "").decoupled
    assert not model_info_from_proto(meta, config, "").sequence


def _entry(version: str, count: int) -> dict[str, object]:
    return {
        "name": "m",
        "version": version,
        "inference_count": count,
        "execution_count": count,
        "inference_stats": {"success": {"count": count, "ns": 10 * count}},
    }


def test_statistics_pick_the_version_and_fill_every_key() -> None:
    entries = [_entry("1", 5), _entry("10", 7), _entry("2", 9), {**_entry("1", 1), "name": "x"}]
    latest = select_statistics(entries, "m", "")
    assert latest is not None
    assert latest["version"] == "10"
    assert latest["inference_stats"]["success"] == {"count": 7, "ns": 70}
    assert latest["inference_stats"]["queue"] == {"count": 0, "ns": 0}
    two = select_statistics(entries, "m", "2")
    assert two is not None
    assert two["inference_count"] == 9
    assert select_statistics(entries, "m", "3") is None
    assert select_statistics(entries, "other", "") is None


def test_statistics_from_grpc_are_ints_in_the_json_shape() -> None:
    response = service_pb2.ModelStatisticsResponse()
    model = response.model_stats.add(name="m", version="1", inference_count=6, execution_count=3)
    model.inference_stats.queue.count = 3
    model.inference_stats.queue.ns = 300
    batch = model.batch_stats.add(batch_size=2)
    batch.compute_infer.count = 3
    stats = statistics_from_proto(response, "m", "")
    assert stats is not None
    assert stats["inference_count"] == 6
    assert stats["inference_stats"]["queue"] == {"count": 3, "ns": 300}
    assert stats["batch_stats"][0]["batch_size"] == 2
    assert stats["batch_stats"][0]["compute_infer"] == {"count": 3, "ns": 0}


def test_error_text_is_the_servers_message() -> None:
    assert error_text(400, b'{"error": "bad shape"}') == "bad shape"
    assert error_text(502, b"<html>bad gateway</html>") == "HTTP 502: <html>bad gateway</html>"
    assert error_text(500, b"") == "HTTP 500 with an empty body"
