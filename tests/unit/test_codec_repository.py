"""Load and unload parameters: one set of checks and messages for HTTP and gRPC."""

from __future__ import annotations

import base64

import pytest

from inferd.codecs.repository import (
    LoadRequest,
    decode_load_parameters,
    decode_unload_parameters,
)
from inferd.errors import InvalidArgumentError

CONFIG = '{"backend": "onnxruntime"}'


def test_config_and_files_in_both_encodings() -> None:
    data = b"\x00onnx bytes\xff"
    over_http = decode_load_parameters(
        {"config": CONFIG, "file:1/model.onnx": base64.b64encode(data).decode()},
        files_as="base64",
    )
    over_grpc = decode_load_parameters(
        {"config": CONFIG, "file:1/model.onnx": data}, files_as="bytes"
    )
    assert over_http == over_grpc == LoadRequest(CONFIG, {"1/model.onnx": data})
    assert decode_load_parameters({}, files_as="bytes") == LoadRequest(None, None)


@pytest.mark.parametrize("files_as", ["base64", "bytes"])
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"config": 3}, "load parameter 'config' must be a string .* got a number"),
        ({"config": True}, "got a boolean"),
        ({"colour": "red"}, "unknown load parameter 'colour': expected 'config' or 'file:"),
        ({"file:1/m.onnx": 7}, "load parameter 'file:1/m.onnx' must .* got a number"),
    ],
)
def test_bad_load_parameters_are_named(
    params: dict[str, object], message: str, files_as: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        decode_load_parameters(params, files_as=files_as)  # type: ignore[arg-type]


def test_file_encodings_are_not_mixed() -> None:
    with pytest.raises(InvalidArgumentError, match="base64 string, got bytes"):
        decode_load_parameters({"file:1/m": b"raw"}, files_as="base64")
    with pytest.raises(InvalidArgumentError, match="file's bytes, got a string"):
        decode_load_parameters({"file:1/m": "cmF3"}, files_as="bytes")
    with pytest.raises(InvalidArgumentError, match="not valid base64"):
        decode_load_parameters({"file:1/m": "not base64!"}, files_as="base64")


def test_unload_parameters() -> None:
    assert decode_unload_parameters({}) is False
    assert decode_unload_parameters({"unload_dependents": True}) is True
    with pytest.raises(InvalidArgumentError, match="must be a boolean, got a string"):
        decode_unload_parameters({"unload_dependents": "yes"})
    with pytest.raises(InvalidArgumentError, match="unknown unload parameter 'force'"):
        decode_unload_parameters({"force": True})
