"""The cores a process may use are bounded by its cgroup's CPU quota (a container's CPU limit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.backends.threads import available_cores, cgroup_cpu_limit, cpu_limit


@pytest.mark.parametrize(
    ("quota", "period", "cpus"),
    [
        ("200000", "100000", 2),
        ("150000", "100000", 1),  # 1.5 CPUs: a second thread would only be throttled
        ("50000", "100000", 1),  # at least one
        ("max", "100000", None),  # v2: no quota
        ("-1", "100000", None),  # v1: no quota
        ("0", "100000", None),
        ("100000", "0", None),
        ("", "", None),
    ],
)
def test_cpu_limit(quota: str, period: str, cpus: int | None) -> None:
    assert cpu_limit(quota, period) == cpus


def test_cgroup_v2(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("400000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 4
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


@pytest.mark.parametrize("folder", ["cpu", "cpu,cpuacct"])
def test_cgroup_v1(tmp_path: Path, folder: str) -> None:
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / folder / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 3


def test_no_cgroup_files(tmp_path: Path) -> None:
    assert cgroup_cpu_limit(tmp_path) is None


def test_available_cores_takes_the_smaller(tmp_path: Path) -> None:
    unlimited = available_cores(tmp_path)
    assert unlimited >= 1
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    assert available_cores(tmp_path) == 1
    (tmp_path / "cpu.max").write_text(f"{(unlimited + 8) * 100000} 100000\n")
    assert available_cores(tmp_path) == unlimited  # a quota above the affinity changes nothing
