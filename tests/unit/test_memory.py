"""Memory accounting: budget and size parsing, cgroup v2/v1 limits on sample files, and the
resident set of a process tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferd.errors import InvalidArgumentError
from inferd.repository.memory import (
    MemoryBudget,
    ProcessTree,
    container_limit,
    folder_bytes,
    limit_malloc_arenas,
    parse_budget,
    parse_cgroup_v1,
    parse_cgroup_v2,
    parse_last_pid,
    parse_size,
    parse_stat_ppid,
    process_tree_rss,
    resolve_budget,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2GiB", 2 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5G", 1_500_000_000),
        ("800000000", 800_000_000),
        (" 64 kib ", 64 * 1024),
        ("3TB", 3 * 10**12),
    ],
)
def test_sizes_with_units(text: str, expected: int) -> None:
    assert parse_size(text) == expected
    assert parse_budget(text) == MemoryBudget(bytes=expected)


@pytest.mark.parametrize("text", ["", "GiB", "2 parsecs", "-1GiB", "0", "1e9"])
def test_bad_sizes_are_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="--model-memory-budget"):
        parse_budget(text)


def test_shares() -> None:
    assert parse_budget("60%") == MemoryBudget(share=0.6)
    assert parse_budget("100%") == MemoryBudget(share=1.0)
    for bad in ("0%", "101%", "x%", "-5%"):
        with pytest.raises(InvalidArgumentError, match="more than 0% and at most 100%"):
            parse_budget(bad)


def test_resolve_a_share_of_the_container_else_of_the_machine() -> None:
    assert resolve_budget(MemoryBudget(share=0.5), 8 * 2**30, 64 * 2**30) == 4 * 2**30
    assert resolve_budget(MemoryBudget(share=0.5), None, 64 * 2**30) == 32 * 2**30
    assert resolve_budget(MemoryBudget(bytes=123), 8 * 2**30, 64 * 2**30) == 123


def test_cgroup_parsers() -> None:
    assert parse_cgroup_v2("4294967296\n") == 4294967296
    assert parse_cgroup_v2("max\n") is None
    assert parse_cgroup_v1("2147483648\n") == 2147483648
    assert parse_cgroup_v1("9223372036854771712\n") is None  # v1's "no limit"
    with pytest.raises(ValueError, match=r"memory\.max"):
        parse_cgroup_v2("lots")
    with pytest.raises(ValueError, match="limit_in_bytes"):
        parse_cgroup_v1("")


def test_container_limit_cgroup_v2(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/kubepods/pod1/ctr\n")
    leaf = tmp_path / "fs" / "kubepods" / "pod1" / "ctr"
    leaf.mkdir(parents=True)
    (leaf / "memory.max").write_text("1073741824\n")
    (tmp_path / "fs" / "memory.max").write_text("max\n")
    assert container_limit(tmp_path / "fs", proc) == 1073741824
    (leaf / "memory.max").write_text("max\n")
    assert container_limit(tmp_path / "fs", proc) is None


def test_container_limit_cgroup_v1(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/x\n")
    leaf = tmp_path / "fs" / "memory" / "docker" / "abc"
    leaf.mkdir(parents=True)
    (leaf / "memory.limit_in_bytes").write_text("536870912\n")
    assert container_limit(tmp_path / "fs", proc) == 536870912


def test_container_limit_inside_a_namespace_reads_the_root_files(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/\n")
    (tmp_path / "memory.max").write_text("2147483648\n")
    assert container_limit(tmp_path, proc) == 2147483648
    assert container_limit(tmp_path / "nothing", tmp_path / "missing") is None


def test_stat_ppid_with_spaces_and_parentheses_in_the_command() -> None:
    assert parse_stat_ppid("1234 (my (odd) cmd) S 42 1234 1234 0 -1") == 42


def test_process_tree_rss_counts_worker_processes() -> None:
    alone = process_tree_rss()
    assert alone > 0
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; b = bytearray(64 << 20); print('ready', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"  # its 64 MiB are touched (zeroed)
        assert process_tree_rss(child.pid) > 60 << 20
        assert process_tree_rss() >= alone + (60 << 20) - (16 << 20)  # the parent's tree
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
        assert child.stdout is not None
        child.stdout.close()


def _fake_proc(root: Path, last_pid: int, tree: dict[int, tuple[int, int]]) -> None:
    """``tree``: pid -> (parent pid, resident pages)."""
    root.mkdir(exist_ok=True)
    (root / "loadavg").write_text(f"0.50 0.40 0.30 1/80 {last_pid}\n")
    for pid, (ppid, pages) in tree.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(f"{pid} (python) S {ppid} {pid} {pid} 0 -1\n")
        (root / str(pid) / "statm").write_text(f"9999 {pages} 10 1 0 50 0\n")


def test_the_last_pid_is_read_from_loadavg() -> None:
    assert parse_last_pid("0.71 0.77 0.97 1/78 504\n") == 504


def test_a_process_tree_scans_for_workers_only_after_a_process_was_created(
    tmp_path: Path,
) -> None:
    """The server (pid 10) and one worker (11): the scan runs once while no process is created;
    a worker started later (12) moves the last pid and is counted; one that exits drops out
    without a scan; an unrelated process (20, child of 1) never counts."""
    page = os.sysconf("SC_PAGE_SIZE")
    proc = tmp_path / "proc"
    _fake_proc(proc, 11, {1: (0, 1), 10: (1, 100), 11: (10, 50), 20: (1, 7)})
    tree = ProcessTree(10, proc)
    assert tree.rss() == 150 * page
    assert tree.rss() == 150 * page
    assert tree.scans == 1
    _fake_proc(proc, 12, {12: (11, 30)})  # a worker's own worker, started now
    assert tree.rss() == 180 * page
    assert tree.scans == 2
    (proc / "11" / "statm").unlink()  # 11 exited
    assert tree.rss() == 130 * page
    assert tree.scans == 2
    (proc / "loadavg").unlink()  # not readable: a scan each time
    tree.rss()
    tree.rss()
    assert tree.scans == 4


def test_a_process_tree_counts_a_worker_started_after_its_first_measurement() -> None:
    tree = ProcessTree()
    alone = tree.rss()
    child = subprocess.Popen(
        [sys.executable, "-c", "b = bytearray(64 << 20); print('ready', flush=True); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        assert tree.rss() >= alone + (60 << 20) - (16 << 20)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
        assert child.stdout is not None
        child.stdout.close()


def test_folder_bytes(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes(b"x" * 1000)
    (tmp_path / "config.pbtxt").write_bytes(b"y" * 24)
    os.symlink("/dev/zero", tmp_path / "link")
    assert folder_bytes(tmp_path) == 1024 + len("/dev/zero")


def test_the_malloc_arena_cap_leaves_an_operators_setting_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas(2) is False  # the operator's choice stands
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    if sys.platform != "linux" or os.confstr("CS_GNU_LIBC_VERSION") is None:
        assert limit_malloc_arenas(2) is False
    else:
        # this process's default is eight arenas per core: the cap is a real mallopt call
        assert limit_malloc_arenas(8 * (os.cpu_count() or 1)) is True
