"""Malformed HTTP, byte by byte, against a live ``inferd serve`` process.

Hypothesis writes requests that a client library would never send: broken request lines,
huge or invalid headers, wrong ``Content-Length``, chunked bodies cut short, compressed bodies
that do not inflate, binary-extension bodies whose lengths disagree, JSON tensors whose shape,
datatype or element count is wrong, and model names that try to leave the repository. Each goes
out on its own socket. The answer must be a 4xx, or, for bytes that are not a parseable HTTP
request (or a request cut short by the client), a closed connection; never a 5xx, never
silence until the socket times out. Afterwards the server is alive, answers liveness, and its
memory grew within the bound of ``conftest.py``.

Generation is derandomized, so every CI run sends the same bytes.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import hypothesis
import pytest
from hypothesis import strategies as st

from inferd.core.names import check_model_name
from inferd.errors import InvalidArgumentError
from inferd.testing import ServerProcess, running_server
from tests.fuzz.conftest import (
    Tally,
    assert_server_healthy,
    fuzz_server_args,
    rss_bytes,
)

pytestmark = pytest.mark.timeout(300)

#: requests per family of malformed input
EXAMPLES_PER_FAMILY = 100
#: a request with no answer and no close within this time is a hang
SOCKET_TIMEOUT_S = 10.0
#: the raw fuzz server's limits: small, so that the limits are reached cheaply
MAX_BODY_BYTES = 1 << 20
MAX_JSON_BYTES = 256 << 10
EDGE_TIMEOUT_S = 1


@pytest.fixture(scope="module")
def raw_server(example_repo: Path) -> Iterator[ServerProcess]:
    args = [
        *fuzz_server_args(),
        "--http-max-input-size",
        str(MAX_BODY_BYTES),
        "--http-max-json-input-size",
        str(MAX_JSON_BYTES),
        "--http-header-timeout-secs",
        str(EDGE_TIMEOUT_S),
        "--http-body-timeout-secs",
        str(EDGE_TIMEOUT_S),
    ]
    with running_server([example_repo], args) as proc:
        yield proc


@dataclass(frozen=True)
class RawCase:
    """The bytes of one request, and whether a closed connection is an acceptable answer."""

    family: str
    data: bytes
    may_close: bool = False  # not parseable HTTP, or cut short: closing without a reply is fine
    half_close: bool = False  # shut the sending side after the bytes (the client gave up)
    may_succeed: bool = False  # unusual but valid HTTP (a long header, a long query string)

    def __repr__(self) -> str:  # what a failure prints: enough to replay it
        shown = self.data if len(self.data) <= 600 else self.data[:600] + b"..."
        return f"RawCase({self.family!r}, {len(self.data)} bytes: {shown!r})"


# -- building requests --------------------------------------------------------------------------

_MODELS_INPUTS = {
    "simple": ("INT32", 16),
    "simple_int8": ("INT8", 16),
    "simple_string": ("BYTES", 16),
}
_DATATYPES = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
]


def request(
    method: str,
    target: str,
    body: bytes = b"",
    headers: list[tuple[str, str]] | None = None,
    *,
    content_length: str | None = None,
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: fuzz"]
    for name, value in headers or []:
        lines.append(f"{name}: {value}")
    if content_length is None:
        content_length = str(len(body))
    if content_length != "":
        lines.append(f"Content-Length: {content_length}")
    head = "\r\n".join(lines) + "\r\n\r\n"
    return head.encode("utf-8", "surrogateescape") + body


def _infer_target(model: str) -> str:
    return f"/v2/models/{model}/infer"


_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)


# -- families -----------------------------------------------------------------------------------

#: whether a client that sent an incomplete request shuts its side (mostly) or stalls, which
#: costs the edge's header or body timeout
_GIVES_UP = st.integers(0, 4).map(bool)

_TOKENS = st.sampled_from(
    ["GET", "POST", "PUT", "get", "P OST", "", "GET\x00", "\x16\x03\x01", "PRI", "CONNECT"]
)
_TARGETS = st.sampled_from(
    [
        "/v2",
        "/v2/health/live",
        "*",
        "",
        "v2",
        "/v2/models/simple/infer\x00",
        "http://host/v2",
        "/%",
        "/v2/models/%zz",
        "//////",
        "/v2?" + "a" * 70000,
    ]
)
_VERSIONS = st.sampled_from(
    ["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9.9", "HTTP/1.1x", "", "http/1.1", "HTTP/1"]
)


@st.composite
def bad_request_lines(draw: st.DrawFn) -> RawCase:
    choice = draw(st.integers(0, 2))
    if choice == 0:
        method, target, version = draw(_TOKENS), draw(_TARGETS), draw(_VERSIONS)
        hypothesis.assume(
            not (method in ("GET", "POST", "PUT") and version in ("HTTP/1.1", "HTTP/1.0"))
            or target in ("*", "", "v2", "/%")
        )
        line = f"{method} {target} {version}".encode("latin-1")
        data = line + draw(st.sampled_from([b"\r\n\r\n", b"\n\n", b"\r\r", b"\r\nHost: x\r\n\r\n"]))
    elif choice == 1:
        data = draw(st.binary(min_size=1, max_size=300)) + b"\r\n\r\n"
    else:  # a valid line with garbage spliced in
        line = bytearray(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        at = draw(st.integers(0, len(line) - 1))
        line[at:at] = draw(st.binary(min_size=1, max_size=8))
        data = bytes(line)
        # the splice may land where it is still valid HTTP ("*Host: x" is a valid header)
        return RawCase("request line", data, may_close=True, may_succeed=True)
    return RawCase("request line", data, may_close=True, half_close=draw(_GIVES_UP))


@st.composite
def bad_headers(draw: st.DrawFn) -> RawCase:
    choice = draw(st.integers(0, 5))
    target = draw(st.sampled_from(["/v2", "/v2/models/simple/infer", "/v2/repository/index"]))
    method = "GET" if target == "/v2" else "POST"
    body = b"{}"
    may_succeed = False
    if choice == 0:  # one huge value
        size = draw(st.sampled_from([8_000, 70_000, 300_000]))
        data = request(method, target, body, [("X-Big", "v" * size)])
        may_succeed = True
    elif choice == 1:  # very many headers
        count = draw(st.sampled_from([200, 2_000, 20_000]))
        data = request(method, target, body, [(f"X-H{i}", "1") for i in range(count)])
        may_succeed = True
    elif choice == 2:  # invalid bytes in a name or value ("X:Bad: v" is header X, value "Bad: v")
        name = draw(st.sampled_from(["X Bad", "X(Bad", "", "X\x00", "Ünï", "X\tY"]))
        value = draw(st.text(max_size=20))
        data = request(method, target, body, [(name, value)])
    elif choice == 3:  # a line without a colon, or a continuation line
        junk = draw(st.sampled_from(["NoColonHere", " folded", "\tfolded", ":empty-name"]))
        data = request(method, target, body, [("X-A", "1")]).replace(
            b"X-A: 1", f"X-A: 1\r\n{junk}".encode("latin-1", "replace")
        )
    elif choice == 4:  # duplicated or conflicting framing headers
        data = request(
            method,
            target,
            body,
            [("Content-Length", draw(st.sampled_from(["2", "3", "0", "-1"])))],
        )
    else:  # Transfer-Encoding oddities next to Content-Length
        coding = draw(st.sampled_from(["chunked", "gzip, chunked", "chunked, gzip", "x", ""]))
        data = request(method, target, body, [("Transfer-Encoding", coding)])
    return RawCase(
        "headers", data, may_close=True, half_close=draw(_GIVES_UP), may_succeed=may_succeed
    )


@st.composite
def bad_content_length(draw: st.DrawFn) -> RawCase:
    body = draw(st.sampled_from([b"", b"{}", b'{"inputs": []}']))
    value = draw(
        st.sampled_from(
            ["-1", "abc", "1.5", "0x10", " 2", "+2", "99999999999999999999999", "", "2 2", "1e3"]
        )
        | st.integers(0, 2**40).map(str)
    )
    data = request("POST", _infer_target("simple"), body, content_length=value or None)
    # a declared length above the bytes sent: the client gives up (half-close) or stalls
    return RawCase("content-length", data, may_close=True, half_close=draw(_GIVES_UP))


@st.composite
def cut_chunked(draw: st.DrawFn) -> RawCase:
    payload = json.dumps({"inputs": []}).encode()
    chunks = b"".join(
        f"{len(part):x}\r\n".encode() + part + b"\r\n"
        for part in (payload[: len(payload) // 2], payload[len(payload) // 2 :])
    )
    body = chunks + b"0\r\n\r\n"
    variant = draw(st.integers(0, 3))
    if variant == 0:  # cut anywhere
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif variant == 1:  # a chunk size that is not hex, or absurd
        size = draw(st.sampled_from(["zz", "-1", "ffffffffffffffffffff", "1;ext=\x00", " "]))
        body = f"{size}\r\n".encode("latin-1") + payload + b"\r\n0\r\n\r\n"
    elif variant == 2:  # a chunk longer than announced
        body = b"2\r\n" + payload + b"\r\n0\r\n\r\n"
    else:  # a valid chunked body, but far over the body limit in total
        piece = b"x" * 65536
        body = b"".join(b"10000\r\n" + piece + b"\r\n" for _ in range(24)) + b"0\r\n\r\n"
    data = request(
        "POST",
        _infer_target("simple"),
        body,
        [("Transfer-Encoding", "chunked")],
        content_length="",
    )
    return RawCase("chunked", data, may_close=True, half_close=draw(_GIVES_UP))


@st.composite
def bad_compression(draw: st.DrawFn) -> RawCase:
    valid = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1] * 8}]}
    ).encode()
    coding = draw(
        st.sampled_from(["gzip", "deflate", "br", "gzip, gzip", "GZIP", "x-gzip", "compress"])
    )
    gzip_framed = coding.lower().startswith("gzip")
    variant = draw(st.integers(0, 4))
    if variant == 0:
        body = draw(st.binary(max_size=200))
    elif variant == 1:  # truncated stream
        packed = gzip.compress(valid) if gzip_framed else zlib.compress(valid)
        body = packed[: draw(st.integers(0, len(packed) - 1))]
    elif variant == 2:  # trailing bytes after a complete stream
        body = gzip.compress(valid) + draw(st.binary(min_size=1, max_size=16))
    elif variant == 3:  # inflates beyond the body limit
        body = gzip.compress(b"\x00" * (MAX_BODY_BYTES * 4))
    else:  # the other coding's framing
        body = zlib.compress(valid) if gzip_framed else gzip.compress(valid)
    target = draw(st.sampled_from([_infer_target("simple"), "/v2/repository/index"]))
    data = request("POST", target, body, [("Content-Encoding", coding)])
    return RawCase("content-encoding", data)


@st.composite
def bad_binary_extension(draw: st.DrawFn) -> RawCase:
    model = draw(st.sampled_from(sorted(_MODELS_INPUTS)))
    datatype, width = _MODELS_INPUTS[model]
    item = {"INT32": 4, "INT8": 1, "BYTES": 5}[datatype]
    true_size = width * item
    sizes = [
        draw(
            st.one_of(
                st.just(true_size),
                st.integers(-5, 4 * true_size),
                st.sampled_from([2**63, 2**64 + 1, 1.5, "64", None, True]),
            )
        )
        for _ in range(2)
    ]
    inputs = []
    for index, size in enumerate(sizes):
        params = {} if size is None else {"binary_data_size": size}
        inputs.append(
            {
                "name": f"INPUT{index}",
                "shape": [1, width],
                "datatype": datatype,
                "parameters": params,
            }
        )
    header = json.dumps({"inputs": inputs}).encode()
    element = b"\x01\x00\x00\x00" + b"7" if datatype == "BYTES" else b"\x01" * item
    exact = element * width * 2
    blob = exact[: draw(st.integers(0, len(exact)))] + draw(st.binary(max_size=8))
    body = header + blob
    header_length = draw(
        st.one_of(
            st.just(str(len(header))),
            st.integers(-3, len(body) + 8).map(str),
            st.sampled_from(["", "abc", "1e2", " 10", "99999999999999999999", "0x10"]),
        )
    )
    # only cases that are wrong somewhere: a consistent body is not this family's business
    consistent = (
        header_length == str(len(header))
        and sizes == [true_size, true_size]
        and len(blob) == len(exact)
    )
    hypothesis.assume(not consistent)
    data = request(
        "POST",
        _infer_target(model),
        body,
        [("Inference-Header-Content-Length", header_length)],
    )
    return RawCase("binary extension", data)


@st.composite
def bad_json_tensors(draw: st.DrawFn) -> RawCase:
    """JSON inference requests to real models, each wrong in at least one way."""
    model = draw(st.sampled_from(sorted(_MODELS_INPUTS)))
    datatype, width = _MODELS_INPUTS[model]
    good_element: Callable[[int], object] = (
        (lambda i: str(i)) if datatype == "BYTES" else (lambda i: i % 100)
    )
    flaw = draw(st.sampled_from(["shape", "datatype", "count", "elements", "structure"]))
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        shape: object = [1, width]
        dtype: object = datatype
        data: object = [good_element(i) for i in range(width)]
        inputs.append({"name": name, "shape": shape, "datatype": dtype, "data": data})
    victim = inputs[draw(st.integers(0, 1))]
    if flaw == "shape":
        victim["shape"] = draw(
            st.lists(st.integers(-(2**64), 2**64), max_size=8).filter(lambda s: s != [1, width])
            | st.sampled_from([[9, width], [1, width + 1], [width], [0, width], "1,16", None])
        )
    elif flaw == "datatype":
        victim["datatype"] = draw(
            st.sampled_from(_DATATYPES).filter(lambda d: d != datatype)
            | st.sampled_from(["int32", "FP8", "", "STRING", "TYPE_INT32"])
            | _json_scalars.filter(lambda d: d != datatype)
        )
    elif flaw == "count":
        count = draw(st.integers(0, 3 * width).filter(lambda n: n != width))
        victim["data"] = [good_element(i) for i in range(count)]
    elif flaw == "elements":
        # not a list: nested data is flattened whatever its nesting, as Triton does
        wrong = _json_values.filter(lambda v: not isinstance(v, list))
        bad = draw(
            wrong.filter(_not_an_integer)
            if datatype != "BYTES"
            else wrong.filter(lambda v: not isinstance(v, str))
        )
        elements = list(victim["data"])  # type: ignore[call-overload]
        elements[draw(st.integers(0, width - 1))] = bad
        victim["data"] = elements
    else:
        doc = draw(st.sampled_from(["inputs", "input", "name", "data", "outputs", "params"]))
        if doc == "inputs":
            body_obj: object = {"inputs": draw(_json_values.filter(lambda v: v != []))}
            data_bytes = json.dumps(body_obj).encode()
            return RawCase("json tensors", request("POST", _infer_target(model), data_bytes))
        if doc == "input":
            inputs.append(draw(_json_values))
        elif doc == "name":
            victim["name"] = draw(_json_values.filter(lambda v: v not in ("INPUT0", "INPUT1")))
        elif doc == "data":
            del victim["data"]
        elif doc == "params":
            victim["parameters"] = draw(
                _json_values.filter(lambda v: not isinstance(v, dict) and v is not None)
                | st.fixed_dictionaries({"binary_data_size": st.integers(0, 64)})
                | st.fixed_dictionaries({"shared_memory_region": _json_scalars})
            )
        else:
            outputs = draw(_json_values.filter(lambda v: v not in ([], None)))
            body_obj = {"inputs": inputs, "outputs": outputs}
            data_bytes = json.dumps(body_obj).encode()
            return RawCase("json tensors", request("POST", _infer_target(model), data_bytes))
    body = json.dumps({"inputs": inputs}).encode()
    return RawCase("json tensors", request("POST", _infer_target(model), body))


def _not_an_integer(value: object) -> bool:
    """Integer inputs take ints and whole-number floats (``0.0``) exactly."""
    if isinstance(value, (bool, str)):
        return True
    if isinstance(value, int):
        return False
    return not (isinstance(value, float) and value.is_integer())


_NAME_TRICKS = [
    "..",
    "%2e%2e",
    "%2E%2E",
    ".",
    "..%2F..%2Fetc",
    "simple%2F..",
    "%2Fetc%2Fpasswd",
    "simple%00",
    "%00",
    "simple%5C..",
    "%FF%FE",
    "%C0%AE%C0%AE",
    "%",
    "%2",
    "sim%20ple%20",
    "%20simple",
    "simple%0A",
    "%E2%80%AE",
    "a" * 256,
    "%41" * 300,
    "\u00e9" * 200,
    "simple%3Bx",
    "~root",
]


@st.composite
def path_names(draw: st.DrawFn) -> RawCase:
    name = draw(
        st.sampled_from(_NAME_TRICKS)
        | st.lists(st.sampled_from([*_NAME_TRICKS, "simple", "x"]), min_size=2, max_size=4).map(
            "".join
        )
    )
    template, method = draw(
        st.sampled_from(
            [
                ("/v2/models/{}", "GET"),
                ("/v2/models/{}/versions/1", "GET"),
                ("/v2/models/{}/ready", "GET"),
                ("/v2/models/{}/config", "GET"),
                ("/v2/models/{}/stats", "GET"),
                ("/v2/models/{}/infer", "POST"),
                ("/v2/repository/models/{}/load", "POST"),
                ("/v2/repository/models/{}/unload", "POST"),
            ]
        )
    )
    body = b"{}" if method == "POST" else b""
    target = template.format(name).encode("utf-8").decode("latin-1")
    # unloading a model the repository does not have is a no-op that succeeds, as in Triton,
    # once the name itself passes its checks (a name that could leave the repository never does)
    unload = template.endswith("/unload") and _valid_name(name)
    return RawCase("model names", request(method, target, body), may_succeed=unload)


def _valid_name(encoded: str) -> bool:
    """Whether the server takes ``encoded`` (percent-decoded) as a model name at all."""
    try:
        check_model_name(unquote(encoded, errors="strict"))
    except (InvalidArgumentError, UnicodeDecodeError):
        return False
    return True


FAMILIES: dict[str, st.SearchStrategy[RawCase]] = {
    "request line": bad_request_lines(),
    "headers": bad_headers(),
    "content-length": bad_content_length(),
    "chunked": cut_chunked(),
    "content-encoding": bad_compression(),
    "binary extension": bad_binary_extension(),
    "json tensors": bad_json_tensors(),
    "model names": path_names(),
}


# -- sending ------------------------------------------------------------------------------------


def exchange(server: ServerProcess, case: RawCase) -> tuple[int | None, bytes]:
    """Send the bytes on a fresh connection and read one response: its status and body, or
    ``None`` when the server closed the connection without one. A socket timeout propagates."""
    host, port = server.http_url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as sock:
        try:
            sock.sendall(case.data)
            if case.half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server stopped reading (it may have answered already): read what it sent
        reply = http.client.HTTPResponse(sock)
        try:
            reply.begin()
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return None, b""
        return reply.status, reply.read()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_http_raw_fuzz(raw_server: ServerProcess, family: str) -> None:
    tally = Tally(f"raw HTTP fuzz, {family}")
    rss_before = rss_bytes(raw_server.process.pid)
    started = time.monotonic()
    problems: list[str] = []

    @hypothesis.settings(
        max_examples=EXAMPLES_PER_FAMILY,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink],
        report_multiple_bugs=False,
    )
    @hypothesis.given(case=FAMILIES[family])
    def run(case: RawCase) -> None:
        try:
            status, body = exchange(raw_server, case)
        except TimeoutError:
            tally.record("hang")
            raise AssertionError(f"no answer within {SOCKET_TIMEOUT_S} s to {case!r}") from None
        tally.record("closed" if status is None else status)
        if status is None:
            assert case.may_close, f"closed the connection without answering {case!r}"
            return
        if status == 501:  # UNSUPPORTED, for the features openapi.yaml names
            assert b"not supported" in body, f"answered 501 {body[:500]!r} to {case!r}"
        elif not (case.may_succeed and status < 300):
            assert 400 <= status < 500, f"answered {status} {body[:500]!r} to {case!r}"
        assert status < 300 or "error" in json.loads(body), f"{body[:500]!r} to {case!r}"

    try:
        run()
    except Exception as exc:
        notes = "\n".join(getattr(exc, "__notes__", ()))
        problems.append(f"{family}: {str(exc)[:3000]}\n{notes[:3000]}")
    elapsed = time.monotonic() - started
    growth = assert_server_healthy(raw_server, rss_before)
    print(f"\n{tally.report(elapsed, growth)}")
    assert not problems, "\n".join(problems)
