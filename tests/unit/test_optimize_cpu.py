"""The CPU features the optimizer reads from /proc/cpuinfo, on sample flag lines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from inferd.tools.optimize.cpu import CpuFeatures, detect_cpu, parse_cpuinfo

# flags lines as Linux prints them (trimmed of flags that do not matter here)
ZEN4 = (
    "fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512dq avx512ifma "
    "avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes avx512_vnni "
    "avx512_bitalg avx512_vpopcntdq"
)
SAPPHIRE_RAPIDS = (
    "sse4_2 avx f16c avx2 avx_vnni avx512f avx512bw avx512vl avx512_vnni avx512_bf16 "
    "avx512_fp16 amx_bf16 amx_tile amx_int8"
)
HASWELL = "sse4_2 avx f16c fma avx2 bmi2"
ICE_LAKE = "avx2 avx512f avx512bw avx512vl avx512_vnni"


def _cpuinfo(flags: str, model: str = "Test CPU", cores: int = 2) -> str:
    block = f"processor\t: {{n}}\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
    return "".join(block.format(n=n) for n in range(cores))


def test_an_avx512_cpu_with_vnni_and_bf16_but_no_amx() -> None:
    cpu = parse_cpuinfo(_cpuinfo(ZEN4, "AMD EPYC"))
    assert (cpu.known, cpu.model) == (True, "AMD EPYC")
    assert (cpu.avx2, cpu.avx512, cpu.vnni, cpu.bf16) == (True, True, True, True)
    assert (cpu.fp16, cpu.amx) == (False, False)
    assert cpu.summary() == "AMD EPYC: AVX-512 with VNNI and BF16, no FP16, no AMX"


def test_a_cpu_with_amx_and_fp16() -> None:
    cpu = parse_cpuinfo(_cpuinfo(SAPPHIRE_RAPIDS, model=""))
    assert (cpu.amx, cpu.fp16, cpu.bf16, cpu.vnni) == (True, True, True, True)
    summary = "AVX-512 with VNNI, BF16 and FP16, AMX (AMX-INT8, AMX-BF16), AVX-VNNI"
    assert cpu.summary() == summary


@pytest.mark.parametrize(
    ("flags", "summary"),
    [
        (HASWELL, "AVX2, no VNNI, no FP16, no AMX"),
        (ICE_LAKE, "AVX-512 with VNNI, no BF16, no FP16, no AMX"),
        ("sse sse2", "no AVX2, no VNNI, no AMX"),
    ],
)
def test_older_cpus_say_what_they_lack(flags: str, summary: str) -> None:
    cpu = parse_cpuinfo(_cpuinfo(flags, model=""))
    assert cpu.summary() == summary
    assert (cpu.bf16, cpu.fp16, cpu.amx) == (False, False, False)


def test_f16c_conversion_is_not_fp16_arithmetic() -> None:
    assert not parse_cpuinfo(_cpuinfo(HASWELL)).fp16


def test_the_first_flags_line_stands_for_the_machine() -> None:
    text = _cpuinfo(ZEN4, cores=1) + _cpuinfo(HASWELL, cores=1)
    assert parse_cpuinfo(text).bf16


def test_text_without_a_flags_line_is_unknown() -> None:
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve\nCPU implementer\t: 0x41\n"
    cpu = parse_cpuinfo(arm)
    assert (cpu.known, cpu.vnni, cpu.bf16) == (False, False, False)
    assert cpu.summary().startswith("unknown CPU features (no x86 'flags' line")
    assert not parse_cpuinfo("").known


def test_an_unreadable_file_is_unknown_not_an_error(tmp_path: Path) -> None:
    cpu = detect_cpu(tmp_path / "missing")
    assert not cpu.known
    if sys.platform.startswith("linux"):
        assert "cannot read" in cpu.summary()


def test_detect_reads_the_given_file(tmp_path: Path) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("read on Linux only")
    path = tmp_path / "cpuinfo"
    path.write_text(_cpuinfo(ICE_LAKE))
    assert detect_cpu(path) == parse_cpuinfo(_cpuinfo(ICE_LAKE))
    assert detect_cpu(path).vnni


def test_unknown_features_answer_false_everywhere() -> None:
    cpu = CpuFeatures(known=False)
    assert not any((cpu.avx2, cpu.avx512, cpu.vnni, cpu.bf16, cpu.fp16, cpu.amx))
    assert cpu.summary() == "unknown CPU features"
