"""Which instruction sets this CPU has that decide what runs fast: INT8 dot products (VNNI),
BF16 and FP16 arithmetic, AMX tiles.

Read from the ``flags`` line of ``/proc/cpuinfo`` on Linux (:func:`parse_cpuinfo` is pure and
takes the file's text); elsewhere, or when the file cannot be read, the features are *unknown*
and every question about them answers ``False`` with a summary that says so.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CPUINFO", "CpuFeatures", "detect_cpu", "parse_cpuinfo"]

CPUINFO = Path("/proc/cpuinfo")

# the flags that matter for inference, as Linux names them, and how a person names them
_NAMES = {
    "avx2": "AVX2",
    "avx512f": "AVX-512",
    "avx512_vnni": "VNNI",
    "avx_vnni": "AVX-VNNI",
    "avx512_bf16": "BF16",
    "avx512_fp16": "FP16",
    "amx_tile": "AMX",
    "amx_int8": "AMX-INT8",
    "amx_bf16": "AMX-BF16",
    "amx_fp16": "AMX-FP16",
}


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's inference-relevant flags; ``known`` is False when they could not be read."""

    known: bool
    flags: frozenset[str] = frozenset()
    model: str = ""
    reason: str = ""  # why the features are unknown

    def has(self, flag: str) -> bool:
        return flag in self.flags

    @property
    def avx2(self) -> bool:
        return self.has("avx2")

    @property
    def avx512(self) -> bool:
        return self.has("avx512f")

    @property
    def vnni(self) -> bool:
        """INT8 dot-product instructions (AVX-512 VNNI or AVX-VNNI): what makes INT8 fast."""
        return self.has("avx512_vnni") or self.has("avx_vnni")

    @property
    def amx(self) -> bool:
        return self.has("amx_tile")

    @property
    def bf16(self) -> bool:
        """Native BF16 arithmetic (AVX-512 BF16 or AMX-BF16)."""
        return self.has("avx512_bf16") or self.has("amx_bf16")

    @property
    def fp16(self) -> bool:
        """Native FP16 arithmetic (AVX-512 FP16 or AMX-FP16), not just FP16 conversion (F16C)."""
        return self.has("avx512_fp16") or self.has("amx_fp16")

    def summary(self) -> str:
        """One line for a report, e.g. "AVX-512 with VNNI and BF16, no FP16, no AMX"."""
        if not self.known:
            return (
                f"unknown CPU features ({self.reason})" if self.reason else "unknown CPU features"
            )
        if self.avx512:
            extras = [
                _NAMES[f] for f in ("avx512_vnni", "avx512_bf16", "avx512_fp16") if self.has(f)
            ]
            base = "AVX-512" + (f" with {_join(extras)}" if extras else "")
        elif self.avx2:
            base = "AVX2" + (" with AVX-VNNI" if self.has("avx_vnni") else "")
        else:
            base = "no AVX2"
        missing = []
        if not self.vnni:
            missing.append("VNNI")
        if self.avx512 and not self.bf16:
            missing.append("BF16")
        if (self.avx512 or self.avx2) and not self.fp16:
            missing.append("FP16")
        if self.amx:
            amx = [_NAMES[f] for f in ("amx_int8", "amx_bf16", "amx_fp16") if self.has(f)]
            tail = f", AMX ({', '.join(amx)})" if amx else ", AMX"
        else:
            tail = ""
            missing.append("AMX")
        if self.has("avx_vnni") and self.avx512:
            tail += ", AVX-VNNI"
        text = base + tail + "".join(f", no {m}" for m in missing)
        return f"{self.model}: {text}" if self.model else text


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def parse_cpuinfo(text: str) -> CpuFeatures:
    """The features named by the first ``flags`` line of ``/proc/cpuinfo`` text.

    The first processor's line stands for all (the kernel lists the same features for every
    core of one machine); a text without a ``flags`` line (ARM lists ``Features``) is unknown.
    """
    flags: frozenset[str] | None = None
    model = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "flags" and flags is None:
            flags = frozenset(value.split())
        elif key == "model name" and not model:
            model = value.strip()
    if flags is None:
        return CpuFeatures(known=False, model=model, reason="no x86 'flags' line in /proc/cpuinfo")
    return CpuFeatures(known=True, flags=flags, model=model)


def detect_cpu(path: Path = CPUINFO) -> CpuFeatures:
    """This machine's features (Linux); unknown elsewhere or when the file cannot be read."""
    if not sys.platform.startswith("linux"):
        return CpuFeatures(known=False, reason=f"only read on Linux, this is {sys.platform}")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return CpuFeatures(known=False, reason=f"cannot read {path}: {exc.strerror or exc}")
    return parse_cpuinfo(text)
