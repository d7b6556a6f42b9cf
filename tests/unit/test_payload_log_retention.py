"""The payload log's retention and its failed writes: the files together stay under the byte
cap (the oldest go, the newest stay, nothing but the log's own files is touched), files past
the age limit go (found at start by their times on disk, or during a run by the writer's
clock), and a disk that refuses writes leaves no empty or partial file behind, counts the
records dropped, and the log writes again once the disk takes writes again."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError
from inferd.metrics.payload_log import PayloadLogCollector
from inferd.monitoring.payload_log import PayloadLogger, PayloadLogSettings
from inferd.monitoring.payload_log.files import file_name, is_log_file, is_log_folder
from inferd.monitoring.payload_log.settings import parse_duration_s

HOUR_NS = 3600 * 10**9


def spec(name: str = "simple") -> ModelSpec:
    return spec_from_proto(
        parse_pbtxt(
            f'name: "{name}" backend: "onnxruntime" max_batch_size: 8 '
            'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ] '
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            "test",
        )
    )


def request(i: int) -> InferRequest:
    inputs = {"INPUT0": np.arange(4, dtype=np.int32).reshape(1, 4) + i}
    return InferRequest(model_name="simple", inputs=inputs, id=f"req-{i}")


def outputs(i: int) -> dict[str, np.ndarray[Any, Any]]:
    return {"OUTPUT0": np.full((1, 4), i / 2, dtype=np.float32)}


def settings(directory: Path, **kwargs: Any) -> PayloadLogSettings:
    kwargs.setdefault("flush_secs", 0.02)
    return PayloadLogSettings(directory=directory, **kwargs)


def log_files(directory: Path) -> list[Path]:
    """The log's own files under ``directory`` (what the writer names), oldest name first."""
    return sorted(
        p
        for p in directory.glob("*/*")
        if p.is_file()
        and not p.is_symlink()
        and not p.parent.is_symlink()
        and is_log_folder(p.parent.name)
        and is_log_file(p.parent.name, p.name)
    )


def on_disk(directory: Path) -> int:
    """The bytes the log's files hold now (a file deleted meanwhile counts nothing)."""
    total = 0
    for path in log_files(directory):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def ids(paths: list[Path]) -> list[int]:
    found: list[int] = []
    for path in paths:
        if path.suffix == ".jsonl":
            found += [int(json.loads(line)["id"][4:]) for line in path.read_text().splitlines()]
        else:
            found += [int(i[4:]) for i in pq.read_table(path).column("id").to_pylist()]
    return found


def wait_for(condition: Any, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.01)


def logged(logger: PayloadLogger) -> int:
    return sum(m.logged for m in logger.statistics().models)


def metrics_text(logger: PayloadLogger) -> str:
    registry = CollectorRegistry()
    registry.register(PayloadLogCollector(logger.statistics))
    return generate_latest(registry).decode()


# -- the byte cap --------------------------------------------------------------------------------


def test_the_byte_cap_deletes_the_oldest_files_and_nothing_else(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    folder = logs / "simple"
    folder.mkdir(parents=True)
    outside = tmp_path / "outside.jsonl"
    outside.write_text("not the log's\n")
    # things in the log's folders that are not its files, or not files: all left alone
    foreign = {
        folder / "notes.txt": "operator's notes",
        folder / "simple-20000101T000000.000000Z-000001.jsonl.bak": "a copy",
        folder / "other-20000101T000000.000000Z-000001.jsonl": "another prefix",
        logs / "simple-20000101T000000.000000Z-000002.jsonl": "not in a model's folder",
        logs / ".hidden" / ".hidden-20000101T000000.000000Z-000001.jsonl": "a hidden folder",
    }
    for path, text in foreign.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    link = folder / "simple-20000101T000000.000000Z-000003.jsonl"
    link.symlink_to(outside)  # named like a log file, oldest of all: never followed or removed
    os.utime(link, (0, 0), follow_symlinks=False)
    linked_folder = logs / "linked"
    linked_folder.symlink_to(tmp_path)  # a model folder that is a link: never entered

    cap = 4096
    logger = PayloadLogger(settings(logs, rotate_bytes=1024, max_bytes=cap))
    logger.start()
    peak = 0
    try:
        for i in range(300):
            logger.observe(spec(), 1, request(i), outputs(i))
            if i % 10 == 0:
                time.sleep(0.005)  # let the writer write a little at a time
                peak = max(peak, on_disk(logs))
    finally:
        logger.stop()

    files = log_files(logs)
    sizes = [p.stat().st_size for p in files]
    assert sum(sizes) <= cap  # every file closed: all of them fit
    assert peak <= cap + 1024 + 1024  # while written: at most one file (and a line) over
    kept = ids(files)
    assert kept[-1] == 299  # the newest kept
    assert kept == list(range(kept[0], 300))  # and only the oldest gone
    assert kept[0] > 0
    for path, text in foreign.items():
        assert path.read_text() == text
    assert link.is_symlink()
    assert outside.read_text() == "not the log's\n"
    assert linked_folder.is_symlink()

    stats = logger.statistics()
    (model,) = stats.models
    retention = stats.retention
    assert retention.deleted_files_max_bytes == model.files - len(files) > 0
    assert retention.deleted_bytes_max_bytes == model.bytes - sum(sizes)
    assert retention.deleted_files_max_age == 0
    assert (retention.disk_files, retention.disk_bytes) == (len(files), sum(sizes))
    text = metrics_text(logger)
    deleted = retention.deleted_files_max_bytes
    assert f'inferd_payload_log_deleted_files_total{{reason="max_bytes"}} {deleted}.0' in text
    assert 'inferd_payload_log_deleted_files_total{reason="max_age"} 0.0' in text
    assert f"inferd_payload_log_disk_bytes {sum(sizes)}.0" in text
    assert f"inferd_payload_log_disk_files {len(files)}.0" in text


def test_the_cap_counts_every_model_and_the_files_already_there(tmp_path: Path) -> None:
    """Files from an earlier run count towards the cap and, being oldest, go first; the cap
    holds over the folders of every model together."""
    first = PayloadLogger(settings(tmp_path, rotate_bytes=1024, max_bytes=0))  # no cap
    first.start()
    for i in range(60):
        first.observe(spec("old"), 1, request(i), outputs(i))
    first.stop()
    old = log_files(tmp_path)
    old_bytes = sum(p.stat().st_size for p in old)
    assert old_bytes > 6000

    cap = 6000
    logger = PayloadLogger(settings(tmp_path, rotate_bytes=1024, max_bytes=cap))
    logger.start()
    try:  # at start, the earlier run's oldest files go until the rest fit
        wait_for(lambda: logger.statistics().retention.deleted_files_max_bytes > 0)
        assert sum(p.stat().st_size for p in log_files(tmp_path)) <= cap
        for i in range(100, 160):
            logger.observe(spec("a"), 1, request(i), outputs(i))
            logger.observe(spec("b"), 1, request(i), outputs(i))
    finally:
        logger.stop()
    files = log_files(tmp_path)
    assert sum(p.stat().st_size for p in files) <= cap
    assert [p for p in files if p.parent.name == "old"] == []  # the oldest of all: gone
    assert ids([p for p in files if p.parent.name == "a"])[-1] == 159
    assert ids([p for p in files if p.parent.name == "b"])[-1] == 159


# -- the age limit -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_files_past_the_age_limit_go_at_start_by_their_times_on_disk(
    tmp_path: Path, fmt: str
) -> None:
    now_s = time.time()
    seen: set[Path] = set()
    for run, hours_old in enumerate([30, 20, 2, 1]):
        earlier = PayloadLogger(settings(tmp_path, format=fmt, max_bytes=0))
        earlier.start()
        earlier.observe(spec(), 1, request(run), outputs(run))
        earlier.stop()
        (newest,) = set(log_files(tmp_path)) - seen
        seen.add(newest)
        os.utime(newest, (now_s - hours_old * 3600, now_s - hours_old * 3600))
    # a Parquet file a stopped server left unfinished: the log's too, and old
    partial = tmp_path / "simple" / ".simple-20000101T000000.000000Z-000009.parquet.partial"
    partial.write_bytes(b"PAR1")
    os.utime(partial, (now_s - 40 * 3600, now_s - 40 * 3600))
    assert len(log_files(tmp_path)) == 5

    logger = PayloadLogger(settings(tmp_path, format=fmt, max_age_secs=5 * 3600))
    logger.start()
    try:
        wait_for(lambda: logger.statistics().retention.deleted_files_max_age == 3)
    finally:
        logger.stop()
    assert sorted(ids(log_files(tmp_path))) == [2, 3]
    assert not partial.exists()
    assert logger.statistics().retention.deleted_files_max_bytes == 0


def test_files_past_the_age_limit_go_during_a_run_by_the_writers_clock(tmp_path: Path) -> None:
    """With the writer's clock moved on, closed files and the idle open one go; a record that
    comes after starts a new file, which stays."""
    offset = [0]
    logger = PayloadLogger(
        settings(tmp_path, rotate_bytes=1024, max_age_secs=60),
        wall_ns=lambda: time.time_ns() + offset[0],
    )
    logger.start()
    try:
        for i in range(40):
            logger.observe(spec(), 1, request(i), outputs(i))
        wait_for(lambda: logged(logger) == 40)
        opened = logger.statistics().models[0].files
        assert opened > 2
        assert len(log_files(tmp_path)) == opened
        offset[0] = 30 * 10**9  # younger than the limit: all stay
        time.sleep(0.2)
        assert logger.statistics().retention.deleted_files_max_age == 0
        offset[0] = 61 * 10**9
        wait_for(lambda: logger.statistics().retention.deleted_files_max_age == opened)
        assert log_files(tmp_path) == []
        logger.observe(spec(), 1, request(99), outputs(99))
        wait_for(lambda: logged(logger) == 41)
    finally:
        logger.stop()
    assert ids(log_files(tmp_path)) == [99]
    retention = logger.statistics().retention
    assert retention.deleted_files_max_age == opened
    assert retention.deleted_bytes_max_age == logger.statistics().models[0].bytes - sum(
        p.stat().st_size for p in log_files(tmp_path)
    )


# -- failed writes -------------------------------------------------------------------------------

_FULL_DISK = textwrap.dedent(
    """
    import json, resource, signal, sys, time
    from pathlib import Path

    import numpy as np

    from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
    from inferd.core.inference import InferRequest
    from inferd.monitoring.payload_log import PayloadLogger, PayloadLogSettings

    directory, fmt = Path(sys.argv[1]), sys.argv[2]
    spec = spec_from_proto(parse_pbtxt(
        'name: "simple" backend: "onnxruntime" max_batch_size: 8 '
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ] '
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]', "test"))

    def observe(logger, i):
        x = np.arange(4, dtype=np.int32).reshape(1, 4) + i
        request = InferRequest(model_name="simple", inputs={"INPUT0": x}, id=f"req-{i}")
        logger.observe(spec, 1, request, {"OUTPUT0": np.full((1, 4), i, np.float32)})

    def wait_for(condition):
        end = time.monotonic() + 20
        while not condition():
            assert time.monotonic() < end, "condition not met in time"
            time.sleep(0.01)

    def stats(logger):
        models = logger.statistics().models
        return models[0] if models else None

    logger = PayloadLogger(PayloadLogSettings(
        directory=directory, format=fmt, flush_secs=0.02, rotate_secs=0.2))
    logger.start()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))  # no file may hold a byte
    for batch in range(3):
        for i in range(batch * 10, batch * 10 + 10):
            observe(logger, i)
        wait_for(lambda: stats(logger) and stats(logger).dropped_write_error == batch * 10 + 10)
    left_while_full = sorted(str(p) for p in directory.rglob("*") if p.is_file())
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # the disk takes writes again
    for i in range(100, 105):
        observe(logger, i)
    logger.stop()
    s = stats(logger)
    print(json.dumps({"left_while_full": left_while_full, "dropped": s.dropped_write_error,
                      "logged": s.logged, "opened": s.files}))
    """
)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_full_disk_leaves_no_empty_files_counts_drops_and_logging_resumes(
    tmp_path: Path, fmt: str
) -> None:
    """A real refused write: a process whose files may hold no byte (RLIMIT_FSIZE, with
    SIGXFSZ ignored, so each write fails with EFBIG as a full disk fails with ENOSPC)."""
    resource = pytest.importorskip("resource")
    if resource.getrlimit(resource.RLIMIT_FSIZE)[1] == 0:
        pytest.skip("no file size allowed here at all")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(tmp_path), fmt],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["left_while_full"] == []  # no empty file per failed write, no partial file
    assert result["dropped"] == 30
    assert result["logged"] == 5
    assert result["opened"] >= 3  # every batch tried a file of its own
    assert done.stderr.count("writing failed") == 1  # logged once while it kept failing
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(p.stat().st_size > 0 for p in files)
    assert not [p for p in files if p.name.endswith(".partial")]
    assert sorted(ids(files)) == list(range(100, 105))


# -- the settings ----------------------------------------------------------------------------------


def test_durations_parse_and_refuse_loudly() -> None:
    flag = "--payload-log-max-age"
    assert parse_duration_s("90", flag) == 90
    assert parse_duration_s("90s", flag) == 90
    assert parse_duration_s("30m", flag) == 1800
    assert parse_duration_s("12h", flag) == 12 * 3600
    assert parse_duration_s("7d", flag) == 7 * 86400
    assert parse_duration_s("0", flag) == 0
    for bad in ("-1", "-2h", "soon", "", "nan", "inf", "3w"):
        with pytest.raises(InvalidArgumentError, match="--payload-log-max-age"):
            parse_duration_s(bad, flag)


def test_the_retention_settings_refuse_what_cannot_work(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="max-bytes must be >= 0"):
        settings(tmp_path, max_bytes=-1)
    with pytest.raises(InvalidArgumentError, match="less than one file"):
        settings(tmp_path, rotate_bytes=4096, max_bytes=2048)
    with pytest.raises(InvalidArgumentError, match="max-age must be >= 0"):
        settings(tmp_path, max_age_secs=-5)
    assert settings(tmp_path).max_bytes == 1 << 30  # the default cap: 1 GiB
    assert settings(tmp_path).max_age_secs == 0  # and no age limit
    assert settings(tmp_path, max_bytes=0).max_bytes == 0  # no cap


def test_the_log_recognises_only_its_own_names() -> None:
    name = file_name("simple", 1_700_000_000_123_456_789, 7, "jsonl")
    assert is_log_file("simple", name)
    assert is_log_file("simple", f".{file_name('simple', 0, 1, 'parquet')}.partial")
    assert not is_log_file("simple", f".{name}.partial")  # only Parquet files are partial
    assert not is_log_file("other", name)
    assert not is_log_file("simple", name + ".bak")
    assert not is_log_file("simple", "simple-notes.jsonl")
    assert is_log_folder("simple")
    assert is_log_folder("+with_space-0123456789ab")
    assert not is_log_folder(".hidden")
    assert not is_log_folder("+x-nothex")
