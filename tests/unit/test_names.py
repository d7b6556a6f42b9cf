"""The model-name rule: what it accepts, what it refuses and the message it gives."""

from __future__ import annotations

import pytest

from inferd.core.names import MAX_MODEL_NAME_BYTES, check_model_name
from inferd.errors import ErrorCode, InvalidArgumentError


@pytest.mark.parametrize(
    "name",
    [
        "simple",
        "densenet_onnx",
        "model-1.2",
        "_private",
        ".hidden",
        "a..b",
        "...",
        "with space",
        "ünïcødé",
        "模型",
        "a" * MAX_MODEL_NAME_BYTES,
        "é" * (MAX_MODEL_NAME_BYTES // 2),
    ],
)
def test_valid_names_are_returned_unchanged(name: str) -> None:
    assert check_model_name(name) is name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "must not be empty"),
        (".", "must not be '.' or '..'"),
        ("..", "must not be '.' or '..'"),
        ("/etc", "must not contain '/'"),
        ("../x", "must not contain '/'"),
        ("a/b", "must not contain '/'"),
        ("/root/.ssh", "must not contain '/'"),
        ("a\\b", "must not contain '/' or '\\'"),
        ("..\\..\\x", "must not contain '/' or '\\'"),
        ("a\x00b", "control characters (found U+0000)"),
        ("a\x7f", "control characters (found U+007F)"),
        ("a\nb", "control characters (found U+000A)"),
        ("a\x85", "control characters (found U+0085)"),
        ("\tx", "control characters (found U+0009)"),
        (" x", "must not begin or end with whitespace"),
        ("x ", "must not begin or end with whitespace"),
        ("x\u3000", "must not begin or end with whitespace"),
        ("a" * (MAX_MODEL_NAME_BYTES + 1), f"at most {MAX_MODEL_NAME_BYTES}"),
        ("é" * 128, "256 bytes long in UTF-8"),
        ("a\udc80", "not valid UTF-8"),
    ],
)
def test_invalid_names_are_refused_with_the_reason(name: str, why: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_model_name(name)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert str(info.value).startswith(f"invalid model name {name!r}: ")
    assert why in str(info.value)
