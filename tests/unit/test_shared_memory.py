"""The registry of client shared-memory regions, and the codecs reading and writing tensors there.

Regions are real files mapped for real: in a temporary folder standing for ``/dev/shm`` (the
registry takes the folder), and once in ``/dev/shm`` itself.
"""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc._utils import _get_inference_request

from inferd.cli.main import build_parser
from inferd.cli.serve import config_from_args
from inferd.codecs import v2_grpc, v2_http
from inferd.codecs.raw_tensor import serialize_bytes_elements
from inferd.core.inference import InferResponse
from inferd.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)
from inferd.frontends import shared_memory as registry_module
from inferd.frontends.http.routes import Endpoint
from inferd.frontends.http.shared_memory import SHARED_MEMORY_ENDPOINTS, shared_memory_answer
from inferd.frontends.shared_memory import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_REGIONS,
    SHM_DIR,
    RegionStatus,
    SharedMemoryRegistry,
)
from inferd.server.config import ServerConfig

SIZE = 3 * mmap.ALLOCATIONGRANULARITY


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "region").write_bytes(bytes(range(256)) * (SIZE // 256))
    return tmp_path


@pytest.fixture
def registry(folder: Path) -> Iterator[SharedMemoryRegistry]:
    reg = SharedMemoryRegistry(directory=folder, reserved_prefixes=("inferd-py-",))
    yield reg
    reg.close()


# -- register, status, unregister -------------------------------------------------------------


def test_register_status_unregister(registry: SharedMemoryRegistry) -> None:
    registry.register("a", "/region", 0, 1024)
    registry.register("b", "region", 100, 50)  # the leading "/" is optional, as for shm_open
    assert registry.status() == [
        RegionStatus("a", "/region", 0, 1024),
        RegionStatus("b", "region", 100, 50),
    ]
    assert registry.status("b") == [RegionStatus("b", "region", 100, 50)]
    with pytest.raises(NotFoundError, match="Unable to find system shared memory region: 'c'"):
        registry.status("c")
    registry.unregister("b")
    registry.unregister("never-registered")  # not an error: clients clean up before they start
    assert [r.name for r in registry.status()] == ["a"]
    registry.unregister()  # no name: all
    assert registry.status() == []


def test_one_name_is_registered_once(registry: SharedMemoryRegistry) -> None:
    registry.register("a", "/region", 0, 64)
    with pytest.raises(AlreadyExistsError, match="shared memory region 'a' already in manager"):
        registry.register("a", "/region", 64, 64)
    assert registry.status() == [RegionStatus("a", "/region", 0, 64)]


@pytest.mark.parametrize(
    "key",
    ["", "/", "//", "a/b", "/a/b", "..", "/..", ".", "x\x00y", "../region", "x" * 256],
)
def test_keys_are_single_names(registry: SharedMemoryRegistry, key: str) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid key"):
        registry.register("r", key, 0, 64)


def test_the_servers_own_segments_are_refused(registry: SharedMemoryRegistry, folder: Path) -> None:
    (folder / "inferd-py-123-0").write_bytes(bytes(4096))
    with pytest.raises(InvalidArgumentError, match="the server itself uses"):
        registry.register("r", "/inferd-py-123-0", 0, 64)


def test_a_missing_key_is_never_created(registry: SharedMemoryRegistry, folder: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"Unable to open shared memory region: '/nope'"):
        registry.register("r", "/nope", 0, 64)
    assert not (folder / "nope").exists()


def test_links_and_folders_are_refused(registry: SharedMemoryRegistry, folder: Path) -> None:
    secret = folder.parent / f"{folder.name}-secret"
    secret.write_bytes(b"s" * 4096)
    (folder / "link").symlink_to(secret)
    with pytest.raises(InvalidArgumentError, match="Unable to open shared memory region"):
        registry.register("r", "/link", 0, 64)
    (folder / "sub").mkdir()
    with pytest.raises(InvalidArgumentError, match="Is a directory"):
        registry.register("r", "/sub", 0, 64)
    os.mkfifo(folder / "fifo")
    with pytest.raises(InvalidArgumentError, match="not a shared memory object"):
        registry.register("r", "/fifo", 0, 64)
    assert registry.status() == []


@pytest.mark.parametrize(
    ("offset", "byte_size", "message"),
    [
        (0, SIZE + 1, "goes beyond"),
        (SIZE, 1, "goes beyond"),
        (0, 0, "byte_size must be greater than 0"),
        (-1, 4, "must not be negative"),
    ],
)
def test_register_bounds(
    registry: SharedMemoryRegistry, offset: int, byte_size: int, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        registry.register("r", "/region", offset, byte_size)


# -- reading and writing windows ----------------------------------------------------------------


def _mapped(path: Path) -> bool:
    """Whether this process maps ``path`` (the registry never should: a client that truncates
    a mapped object turns the next access into SIGBUS)."""
    return str(path) in Path("/proc/self/maps").read_text()


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_windows_are_relative_to_the_registered_offset(
    registry: SharedMemoryRegistry, folder: Path
) -> None:
    offset = mmap.ALLOCATIONGRANULARITY + 10  # not page-aligned
    registry.register("r", "/region", offset, 200)
    data = registry.read("r", 5, 3)
    assert bytes(data) == bytes((offset + 5 + i) % 256 for i in range(3))
    registry.writer("r", 0, 4)(memoryview(b"\xff\xfe\xfd\xfc"))
    with (folder / "region").open("rb") as f:  # written through to the object itself
        f.seek(offset)
        assert f.read(4) == b"\xff\xfe\xfd\xfc"
    assert not _mapped(folder / "region")


@pytest.mark.parametrize(
    ("region", "offset", "byte_size", "message"),
    [
        ("other", 0, 4, "Unable to find shared memory region: 'other'"),
        ("r", 100, 1, "Invalid offset for shared memory region: 'r'"),
        ("r", 96, 8, r"Invalid offset \+ byte size for shared memory region: 'r'"),
    ],
)
def test_window_bounds(
    registry: SharedMemoryRegistry, region: str, offset: int, byte_size: int, message: str
) -> None:
    registry.register("r", "/region", 0, 100)
    with pytest.raises(InvalidArgumentError, match=message):
        registry.read(region, offset, byte_size)
    with pytest.raises(InvalidArgumentError, match=message):
        registry.writer(region, offset, byte_size)


def test_an_object_shrunk_after_registering_is_refused(
    registry: SharedMemoryRegistry, folder: Path
) -> None:
    registry.register("r", "/region", 0, SIZE)
    write = registry.writer("r", 4000, 200)  # checked now, written later
    os.truncate(folder / "region", 100)  # a mapping read past it would be SIGBUS
    assert bytes(registry.read("r", 0, 100))[:2] == b"\x00\x01"
    with pytest.raises(InvalidArgumentError, match=r"'r' .* was shrunk to 100 bytes.* needs 4096"):
        registry.read("r", 0, 4096)
    with pytest.raises(InvalidArgumentError, match=r"'r' .* was shrunk to 100 bytes.* needs 4200"):
        write(memoryview(bytes(200)))
    assert (folder / "region").stat().st_size == 100  # never grown behind the client's back
    os.truncate(folder / "region", SIZE)  # whole again (zeros past 100): usable again
    assert bytes(registry.read("r", 98, 4)) == b"\x62\x63\x00\x00"
    write(memoryview(b"\x07" * 200))
    assert (folder / "region").read_bytes()[4000:4200] == b"\x07" * 200


def test_reads_and_writes_in_several_calls_move_every_byte(
    registry: SharedMemoryRegistry, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Linux moves at most 2 GiB per call; with a small chunk, every transfer takes several
    monkeypatch.setattr(registry_module, "_CHUNK", 1000)
    registry.register("r", "/region", 10, SIZE - 10)
    assert bytes(registry.read("r", 0, SIZE - 10)) == (folder / "region").read_bytes()[10:]
    payload = bytes(range(6, 256)) * 20  # 5000 bytes
    registry.writer("r", 100, len(payload))(memoryview(payload))
    assert (folder / "region").read_bytes()[110 : 110 + len(payload)] == payload


def test_unregister_closes_the_descriptor_and_refuses_later_writes(
    registry: SharedMemoryRegistry,
) -> None:
    before = _open_descriptors()
    registry.register("r", "/region", 0, 64)
    assert _open_descriptors() == before + 1
    array = np.frombuffer(registry.read("r", 0, 8), dtype=np.uint8)
    write = registry.writer("r", 0, 8)
    registry.unregister()
    assert _open_descriptors() == before
    assert array.tolist() == list(range(8))  # a copy: it outlives the registration
    with pytest.raises(InvalidArgumentError, match="Unable to find"):
        registry.read("r", 0, 8)
    with pytest.raises(InvalidArgumentError, match="'r' was unregistered while the request"):
        write(memoryview(bytes(8)))
    registry.register("r", "/region", 0, 64)  # the name is free again
    with pytest.raises(InvalidArgumentError, match="was unregistered"):
        write(memoryview(bytes(8)))  # the old window does not write into the new region
    registry.close()
    assert registry.status() == []
    assert _open_descriptors() == before


def test_unregister_while_reading_closes_the_descriptor_after_the_read(
    registry: SharedMemoryRegistry,
) -> None:
    registry.register("r", "/region", 0, 64)
    before = _open_descriptors()
    found = registry._regions["r"]  # a read in progress on it
    registry._enter(found)
    registry.unregister("r")
    assert _open_descriptors() == before  # still open: a request is reading it
    registry._leave(found)
    assert _open_descriptors() == before - 1


def test_registrations_are_bounded(folder: Path) -> None:
    registry = SharedMemoryRegistry(directory=folder, max_regions=2, max_bytes=1000)
    before = _open_descriptors()
    try:
        registry.register("a", "/region", 0, 400)
        registry.register("b", "/region", 400, 400)
        with pytest.raises(
            InvalidArgumentError,
            match=r"'c': this server already has 2 .*--shared-memory-max-regions 2",
        ):
            registry.register("c", "/region", 0, 8)
        registry.unregister("b")
        with pytest.raises(
            InvalidArgumentError,
            match=r"'c': its 601 bytes would bring .* to 1001 bytes, beyond "
            r"--shared-memory-max-bytes 1000",
        ):
            registry.register("c", "/region", 0, 601)
        registry.register("c", "/region", 0, 600)  # exactly at the bound
        assert [r.name for r in registry.status()] == ["a", "c"]
        assert _open_descriptors() == before + 2  # refusals kept nothing open
        registry.unregister()
        registry.register("d", "/region", 0, 1000)  # everything freed
    finally:
        registry.close()
    assert _open_descriptors() == before


def test_a_real_posix_object_in_dev_shm() -> None:
    name = f"inferd-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path = SHM_DIR / name
    path.write_bytes(np.arange(16, dtype=np.float32).tobytes())
    registry = SharedMemoryRegistry()
    try:
        registry.register("r", f"/{name}", 0, 64)
        values = np.frombuffer(registry.read("r", 16, 16), np.float32)
        assert values.tolist() == [4.0, 5.0, 6.0, 7.0]
        assert not _mapped(path)
        registry.unregister("r")
        assert path.exists()  # never unlinked by the server
    finally:
        registry.close()
        path.unlink()


# -- disabled, and CUDA on a machine without GPUs --------------------------------------------


def test_disabled_refuses_everything_but_status(folder: Path) -> None:
    registry = SharedMemoryRegistry(enabled=False, directory=folder)
    calls = [
        lambda: registry.register("r", "/region", 0, 64),
        lambda: registry.unregister(),
        lambda: registry.read("r", 0, 4),
        lambda: registry.writer("r", 0, 4),
        lambda: registry.cuda_unregister(),
    ]
    for call in calls:
        with pytest.raises(UnsupportedError, match="--allow-shared-memory=true"):
            call()
    # as Triton: the status of a server with no region
    assert registry.status() == []
    assert registry.cuda_status() == []
    with pytest.raises(NotFoundError, match="Unable to find system shared memory region: 'r'"):
        registry.status("r")


@pytest.mark.parametrize("region", ["", "r"])
def test_disabled_http_status_answers_as_with_no_region(folder: Path, region: str) -> None:
    registry = SharedMemoryRegistry(enabled=False, directory=folder)
    for endpoint in (Endpoint.SYSTEM_SHM_STATUS, Endpoint.CUDA_SHM_STATUS):
        if region:
            with pytest.raises(NotFoundError, match=f"shared memory region: '{region}'"):
                shared_memory_answer(registry, endpoint, region, {})
        else:
            assert shared_memory_answer(registry, endpoint, region, {}) == []


@pytest.mark.parametrize(
    "endpoint",
    [
        e
        for e in SHARED_MEMORY_ENDPOINTS
        if e not in (Endpoint.SYSTEM_SHM_STATUS, Endpoint.CUDA_SHM_STATUS)
    ],
)
@pytest.mark.parametrize("body", [{}, {"key": "/region"}, {"key": 1, "byte_size": -1}])
@pytest.mark.parametrize("region", ["", "r"])
def test_disabled_http_endpoints_answer_unsupported_whatever_the_body(
    folder: Path, endpoint: Endpoint, body: dict[str, object], region: str
) -> None:
    # register used to check its body first: 400 about a missing field instead of 501
    registry = SharedMemoryRegistry(enabled=False, directory=folder)
    with pytest.raises(UnsupportedError, match="--allow-shared-memory=true"):
        shared_memory_answer(registry, endpoint, region, body)


def test_cuda_as_without_gpus(registry: SharedMemoryRegistry) -> None:
    assert registry.cuda_status() == []
    registry.cuda_unregister()
    registry.cuda_unregister("x")
    with pytest.raises(InvalidArgumentError, match="'c', GPUs not supported"):
        registry.cuda_register("c")
    with pytest.raises(NotFoundError, match="Unable to find cuda shared memory region: 'c'"):
        registry.cuda_status("c")
    registry.register("sys", "/region", 0, 64)
    with pytest.raises(InvalidArgumentError, match="registered as system shared memory"):
        registry.cuda_status("sys")


# -- codecs -------------------------------------------------------------------------------------


def _shm_input(name: str, datatype: str, shape: list[int], **params: object) -> dict[str, object]:
    return {"name": name, "datatype": datatype, "shape": shape, "parameters": params}


def _http(inputs: list[dict[str, object]], outputs: list[dict[str, object]] | None = None) -> bytes:
    body: dict[str, object] = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    return orjson.dumps(body)


def test_http_input_is_a_copy_the_request_owns(
    registry: SharedMemoryRegistry, folder: Path
) -> None:
    registry.register("r", "/region", 0, 1024)
    body = _http(
        [
            _shm_input(
                "X",
                "UINT8",
                [2, 4],
                shared_memory_region="r",
                shared_memory_offset=8,
                shared_memory_byte_size=8,
            )
        ]
    )
    x = v2_http.decode_infer_request("m", "", body, None, registry).inputs["X"]
    assert x.tolist() == [[8, 9, 10, 11], [12, 13, 14, 15]]
    with (folder / "region").open("r+b") as f:  # copied once: the client's later writes and
        f.seek(8)  # truncation do not reach the request
        f.write(b"\x63")
    os.truncate(folder / "region", 0)
    assert x[0, 0] == 8
    assert not _mapped(folder / "region")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"shared_memory_region": "r", "shared_memory_byte_size": 12}, "expecting 16 bytes"),
        ({"shared_memory_region": "r"}, "but not 'shared_memory_byte_size'"),
        ({"shared_memory_region": "q", "shared_memory_byte_size": 16}, "Unable to find"),
        (
            {
                "shared_memory_region": "r",
                "shared_memory_byte_size": 16,
                "shared_memory_offset": 60,
            },
            "Invalid offset",
        ),
        ({"shared_memory_region": 7, "shared_memory_byte_size": 16}, "non-empty string"),
        (
            {"shared_memory_region": "r", "shared_memory_byte_size": -4},
            "must be a non-negative integer",
        ),
        ({"shared_memory_byte_size": 16, "binary_data_size": 16}, "needs 'shared_memory_region'"),
    ],
)
def test_http_input_errors(
    registry: SharedMemoryRegistry, params: dict[str, object], message: str
) -> None:
    registry.register("r", "/region", 0, 64)
    body = _http([_shm_input("X", "FP32", [4], **params)])
    with pytest.raises(InvalidArgumentError, match=message):
        v2_http.decode_infer_request("m", "", body, None, registry)


def test_http_data_and_shared_memory_together_are_refused(registry: SharedMemoryRegistry) -> None:
    registry.register("r", "/region", 0, 64)
    item = _shm_input("X", "INT32", [1], shared_memory_region="r", shared_memory_byte_size=4)
    item["data"] = [1]
    with pytest.raises(InvalidArgumentError, match="more than one is set for input 'X'"):
        v2_http.decode_infer_request("m", "", _http([item]), None, registry)


def test_http_output_in_shared_memory(registry: SharedMemoryRegistry, folder: Path) -> None:
    registry.register("out", "/region", 64, 128)
    params = {
        "shared_memory_region": "out",
        "shared_memory_byte_size": 16,
        "shared_memory_offset": 8,
    }
    body = _http([], [{"name": "Y", "parameters": params}, {"name": "Z"}])
    request = v2_http.decode_infer_request("m", "", body, None, registry)
    y = np.array([[1.5, -2.0], [3.0, 4.25]], dtype=np.float32)
    response = InferResponse("m", "1", {"Y": y, "Z": np.array([7], dtype=np.int32)})
    header, blobs = v2_http.encode_infer_response(response, request)
    entries = orjson.loads(header)["outputs"]
    assert entries[0] == {"name": "Y", "datatype": "FP32", "shape": [2, 2]}  # no data, no params
    assert entries[1]["data"] == [7]
    assert blobs == []
    written = (folder / "region").read_bytes()[64 + 8 : 64 + 24]
    assert np.frombuffer(written, np.float32).tolist() == [1.5, -2.0, 3.0, 4.25]


def test_http_output_too_small_and_with_classification(registry: SharedMemoryRegistry) -> None:
    registry.register("out", "/region", 0, 64)
    params = {"shared_memory_region": "out", "shared_memory_byte_size": 8}
    request = v2_http.decode_infer_request(
        "m", "", _http([], [{"name": "Y", "parameters": params}]), None, registry
    )
    response = InferResponse("m", "1", {"Y": np.zeros(4, dtype=np.float32)})
    with pytest.raises(InvalidArgumentError, match=r"\(8 bytes\) should be at least 16 bytes"):
        v2_http.encode_infer_response(response, request)
    both = {**params, "classification": 2}
    with pytest.raises(InvalidArgumentError, match="can't set both"):
        v2_http.decode_infer_request(
            "m", "", _http([], [{"name": "Y", "parameters": both}]), None, registry
        )


def test_bytes_tensors_in_shared_memory(registry: SharedMemoryRegistry, folder: Path) -> None:
    blob = serialize_bytes_elements([b"ab", b"", b"xyz"])
    with (folder / "region").open("r+b") as f:
        f.write(blob)
    registry.register("r", "/region", 0, 256)
    body = _http(
        [
            _shm_input(
                "S", "BYTES", [3], shared_memory_region="r", shared_memory_byte_size=len(blob)
            )
        ],
        [
            {
                "name": "T",
                "parameters": {
                    "shared_memory_region": "r",
                    "shared_memory_byte_size": 4,
                    "shared_memory_offset": 100,
                },
            }
        ],
    )
    request = v2_http.decode_infer_request("m", "", body, None, registry)
    assert request.inputs["S"].tolist() == [b"ab", b"", b"xyz"]
    # an element length pointing past the window is caught, not read beyond it
    short = _http(
        [_shm_input("S", "BYTES", [3], shared_memory_region="r", shared_memory_byte_size=8)]
    )
    with pytest.raises(InvalidArgumentError, match="BYTES"):
        v2_http.decode_infer_request("m", "", short, None, registry)
    too_big = InferResponse("m", "1", {"T": np.array([b"long"], dtype=object)})
    with pytest.raises(InvalidArgumentError, match="should be at least 8 bytes"):
        v2_http.encode_infer_response(too_big, request)


def test_grpc_input_and_output_in_shared_memory(
    registry: SharedMemoryRegistry, folder: Path
) -> None:
    registry.register("r", "/region", 0, 256)
    x = grpcclient.InferInput("X", [4], "UINT8")
    x.set_shared_memory("r", 4, offset=4)
    y = grpcclient.InferRequestedOutput("Y")
    y.set_shared_memory("r", 8, offset=128)
    msg = _get_inference_request("m", [x], "", "", [y], 0, False, False, 0, None, None)
    assert len(msg.raw_input_contents) == 0
    request = v2_grpc.decode_infer_request(msg, registry)
    assert request.inputs["X"].tolist() == [4, 5, 6, 7]
    response = InferResponse("m", "1", {"Y": np.array([9, -9], dtype=np.int32)})
    encoded = v2_grpc.encode_infer_response(response, request=request)
    assert [o.name for o in encoded.outputs] == ["Y"]
    assert list(encoded.outputs[0].shape) == [2]
    assert list(encoded.raw_output_contents) == [b""]  # kept aligned with the outputs
    written = (folder / "region").read_bytes()[128:136]
    assert np.frombuffer(written, np.int32).tolist() == [9, -9]


def test_grpc_shared_memory_errors(registry: SharedMemoryRegistry) -> None:
    registry.register("r", "/region", 0, 64)
    x = grpcclient.InferInput("X", [4], "FP32")
    x.set_shared_memory("r", 12)
    msg = _get_inference_request("m", [x], "", "", None, 0, False, False, 0, None, None)
    with pytest.raises(InvalidArgumentError, match="expecting 16 bytes"):
        v2_grpc.decode_infer_request(msg, registry)
    msg.inputs[0].parameters["shared_memory_region"].int64_param = 3
    with pytest.raises(InvalidArgumentError, match="expected string_param"):
        v2_grpc.decode_infer_request(msg, registry)
    x.set_shared_memory("r", 16)
    msg = _get_inference_request("m", [x], "", "", None, 0, False, False, 0, None, None)
    msg.inputs[0].contents.fp32_contents.extend([1, 2, 3, 4])
    with pytest.raises(InvalidArgumentError, match="unexpected 'content'"):
        v2_grpc.decode_infer_request(msg, registry)


# -- the serve flags ----------------------------------------------------------------------------


def _serve_config(*flags: str) -> ServerConfig:
    args = build_parser().parse_args(["serve", "--model-repository", "models", *flags])
    return config_from_args(args)


def test_the_bounds_reach_the_configuration() -> None:
    default = _serve_config("--allow-shared-memory=true")
    assert default.shared_memory_max_regions == DEFAULT_MAX_REGIONS
    assert default.shared_memory_max_bytes == DEFAULT_MAX_BYTES
    cfg = _serve_config(
        "--allow-shared-memory=true",
        "--shared-memory-max-regions=8",
        "--shared-memory-max-bytes=65536",
    )
    assert (cfg.shared_memory_max_regions, cfg.shared_memory_max_bytes) == (8, 65536)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--shared-memory-max-regions=0"], "--shared-memory-max-regions must be >= 1"),
        (["--shared-memory-max-bytes=-1"], "--shared-memory-max-bytes must be >= 1"),
    ],
)
def test_bounds_below_one_are_refused(flags: list[str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        _serve_config("--allow-shared-memory=true", *flags)


@pytest.mark.parametrize("flag", ["--shared-memory-max-regions=8", "--shared-memory-max-bytes=8"])
def test_bounds_without_the_extension_are_refused(flag: str) -> None:
    with pytest.raises(InvalidArgumentError, match="only apply with --allow-shared-memory=true"):
        _serve_config(flag)
