"""Both front ends answer an exception that is not an inferd error the same way: logged with a
request id, answered "internal error", its text never sent (nothing in the real serving stack
lets such an exception through to the edge, so the mapping is checked here directly)."""

from __future__ import annotations

import logging

import grpc
import pytest

from inferd.errors import ErrorCode, InternalError
from inferd.frontends.grpc.errors import STATUS_BY_CODE, status_for
from inferd.frontends.http.errors import HTTP_STATUS, describe_exception

LOG = logging.getLogger("test.edge")


def test_both_tables_cover_every_code() -> None:
    assert set(HTTP_STATUS) == set(ErrorCode)
    assert set(STATUS_BY_CODE) == set(ErrorCode)


def test_http_hides_unexpected_errors(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="test.edge"):
        status, message = describe_exception(RuntimeError("secret detail"), LOG, "POST /x")
    assert (status, message) == (500, "internal error")
    assert "unexpected error [request " in caplog.text
    assert describe_exception(InternalError("model failed"), LOG, "") == (500, "model failed")


def test_grpc_hides_unexpected_errors(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="test.edge"):
        code, details = status_for(RuntimeError("secret detail"), log=LOG, request_id="grpc-7")
    assert (code, details) == (grpc.StatusCode.INTERNAL, "internal error")
    assert "request grpc-7 failed" in caplog.text
    assert status_for(InternalError("model failed"), log=LOG, request_id="") == (
        grpc.StatusCode.INTERNAL,
        "model failed",
    )
