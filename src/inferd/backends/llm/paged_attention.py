"""A compiled CPU decode-attention kernel that reads the paged KV cache in place.

:func:`decode_attention` computes, for ``B`` single-token queries ``q [B, heads, d]``, the
attention over each sequence's cached keys and values where they lie in one layer's cache
``[2 * kv_heads, total_blocks, block_tokens, d]`` (the K heads, then the V heads), following
each sequence's block table ``[B, max_blocks]`` for its first ``context[b]`` positions: no
gathered copy of the blocks (the KV is read once, not read, written and read again). GQA:
``heads / kv_heads`` query heads share a KV head and are computed together. Online softmax over
blocks; one task per (sequence, kv head) under ``at::parallel_for``.

The C++ source is compiled with ``torch.utils.cpp_extension.load_inline`` the first time
:func:`load` is called in a process (at model load, off the request path) and cached on disk by
torch (``TORCH_EXTENSIONS_DIR``); the extension's name carries the torch version and a digest
of the CPU's flags and the compile flags, so that a cache folder shared by different machines
never loads a build made for another CPU. Without a compiler, or when the build fails,
:func:`load` returns None once and for all (one warning naming why) and the model keeps its
gather + SDPA path. ``INFERD_LLM_PAGED_ATTENTION=0`` turns the kernel off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["ENV", "decode_attention", "enabled_by_env", "load", "load_error", "load_soon"]

_log = logging.getLogger(__name__)

#: set to 0 / false / off to keep the gather + SDPA path
ENV = "INFERD_LLM_PAGED_ATTENTION"

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

template <typename index_t>
static void run(const at::Tensor& q, const at::Tensor& kv, const index_t* tables,
                int64_t table_stride, const int64_t* context, double scale_d, at::Tensor& out) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t KVH = kv.size(0) / 2, NB = kv.size(1), BT = kv.size(2);
  const int64_t G = H / KVH;
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1);
  const float* qp = q.data_ptr<float>();
  const float* kvp = kv.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float scale = static_cast<float>(scale_d);
  const int64_t head_stride = NB * BT * D;  // one head's rows in the layer
  int64_t work = 0;
  for (int64_t b = 0; b < B; ++b) work += context[b];
  // one task per (sequence, kv head); small batches stay on the calling thread
  const int64_t grain = work * KVH * D < (1 << 16) ? B * KVH : 1;
  at::parallel_for(0, B * KVH, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> qbuf(G * D), acc(G * D), scores(G * BT), m(G), l(G);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / KVH, h = task % KVH;
      const int64_t n = context[b];
      for (int64_t g = 0; g < G; ++g) {
        const float* src = qp + b * qs0 + (h * G + g) * qs1;
        for (int64_t i = 0; i < D; ++i) qbuf[g * D + i] = src[i] * scale;
        m[g] = -std::numeric_limits<float>::max();  // finite: fast math
        l[g] = 0.f;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      const float* kbase = kvp + h * head_stride;
      const float* vbase = kvp + (KVH + h) * head_stride;
      for (int64_t start = 0; start < n; start += BT) {
        const int64_t block = static_cast<int64_t>(tables[b * table_stride + start / BT]);
        const int64_t keys = std::min(BT, n - start);
        const float* kblk = kbase + block * BT * D;
        const float* vblk = vbase + block * BT * D;
        // the block's scores, every query of the group against each key (read once)
        for (int64_t t = 0; t < keys; ++t) {
          const float* k = kblk + t * D;
          for (int64_t g = 0; g < G; ++g) {
            const float* qg = qbuf.data() + g * D;
            float s = 0.f;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < D; ++i) s += qg[i] * k[i];
            scores[g * BT + t] = s;
          }
        }
        for (int64_t g = 0; g < G; ++g) {
          float* sg = scores.data() + g * BT;
          float best = m[g];
          for (int64_t t = 0; t < keys; ++t) best = std::max(best, sg[t]);
          const float correction = std::exp(m[g] - best);  // 0 at the first block
          float sum = 0.f;
#pragma omp simd reduction(+ : sum)
          for (int64_t t = 0; t < keys; ++t) {
            sg[t] = std::exp(sg[t] - best);
            sum += sg[t];
          }
          l[g] = l[g] * correction + sum;
          m[g] = best;
          float* ag = acc.data() + g * D;
#pragma omp simd
          for (int64_t i = 0; i < D; ++i) ag[i] *= correction;
        }
        for (int64_t t = 0; t < keys; ++t) {
          const float* v = vblk + t * D;
          for (int64_t g = 0; g < G; ++g) {
            const float p = scores[g * BT + t];
            float* ag = acc.data() + g * D;
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) ag[i] += p * v[i];
          }
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        float* dst = op + b * H * D + (h * G + g) * D;
        const float inv = l[g] > 0.f ? 1.f / l[g] : 0.f;
        for (int64_t i = 0; i < D; ++i) dst[i] = acc[g * D + i] * inv;
      }
    }
  });
}

// every block a sequence reads must lie in the cache (never a read outside it)
template <typename index_t>
static void check_blocks(const index_t* tables, int64_t table_stride, const int64_t* context,
                         int64_t B, int64_t BT, int64_t blocks) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j * BT < context[b]; ++j) {
      const int64_t block = static_cast<int64_t>(tables[b * table_stride + j]);
      TORCH_CHECK(block >= 0 && block < blocks, "block ", block, " is not in the cache");
    }
}

at::Tensor decode_attention(at::Tensor q, at::Tensor kv, at::Tensor tables, at::Tensor context,
                            double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.device().is_cpu(),
              "q must be a float32 CPU tensor [B, heads, d]");
  TORCH_CHECK(kv.dim() == 4 && kv.scalar_type() == at::kFloat && kv.is_contiguous(),
              "kv must be a contiguous float32 [2 * kv_heads, blocks, block_tokens, d]");
  TORCH_CHECK(q.stride(2) == 1, "q's last dimension must be contiguous");
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2);
  TORCH_CHECK(kv.size(3) == D && kv.size(0) >= 2 && kv.size(0) % 2 == 0 &&
                  H % (kv.size(0) / 2) == 0,
              "q and kv disagree on head_dim or heads");
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == B && tables.stride(1) == 1,
              "tables must be [B, max_blocks], rows contiguous");
  TORCH_CHECK(context.dim() == 1 && context.size(0) == B && context.scalar_type() == at::kLong,
              "context must be int64 [B]");
  at::Tensor ctx = context.contiguous();
  const int64_t* cp = ctx.data_ptr<int64_t>();
  const int64_t BT = kv.size(2);
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(cp[b] >= 0 && cp[b] <= tables.size(1) * BT, "context beyond the block table");
  TORCH_CHECK(tables.scalar_type() == at::kInt || tables.scalar_type() == at::kLong,
              "tables must be int32 or int64");
  at::Tensor out = at::empty({B, H * D}, q.options());
  if (tables.scalar_type() == at::kInt) {
    const int32_t* tp = tables.data_ptr<int32_t>();
    check_blocks<int32_t>(tp, tables.stride(0), cp, B, BT, kv.size(1));
    run<int32_t>(q, kv, tp, tables.stride(0), cp, scale, out);
  } else {
    const int64_t* tp = tables.data_ptr<int64_t>();
    check_blocks<int64_t>(tp, tables.stride(0), cp, B, BT, kv.size(1));
    run<int64_t>(q, kv, tp, tables.stride(0), cp, scale, out);
  }
  return out;
}
"""

_CFLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-ffast-math")

_lock = threading.Lock()
_state: dict[str, Any] = {}  # "module": the extension or None, "error": why not, "seconds"


def enabled_by_env() -> bool:
    """False when ``INFERD_LLM_PAGED_ATTENTION`` says 0, false, no or off."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _cpu_digest() -> str:
    """What the build depends on: the CPU (its flags), torch, the source and the flags."""
    cpu = platform.machine() + platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(("flags", "Features", "model name")):
                    cpu += line
    except OSError:
        pass
    text = "\n".join((cpu, torch.__version__, _SOURCE, " ".join(_CFLAGS)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def extension_name() -> str:
    """The extension's name: torch's version and the digest of CPU, source and flags."""
    version = torch.__version__.replace(".", "_").replace("+", "_").replace("-", "_")
    return f"inferd_paged_attention_t{version}_{_cpu_digest()}"


def load() -> Any | None:
    """The compiled extension (built or loaded from torch's cache the first time in this
    process), or None when it cannot be built (one warning naming why) or the environment turns
    it off."""
    with _lock:
        if "module" in _state:
            return _state["module"]
        if not enabled_by_env():
            _state.update(module=None, error=f"{ENV} turns it off", seconds=0.0)
            return None
        began = time.perf_counter()
        compiler = os.environ.get("CXX", "c++")
        if shutil.which(compiler) is None:
            _give_up(f"no C++ compiler ({compiler} not found)", began)
            return None
        try:
            from torch.utils.cpp_extension import load_inline

            module = load_inline(  # type: ignore[no-untyped-call]
                name=extension_name(),
                cpp_sources=[_SOURCE],
                functions=["decode_attention"],
                extra_cflags=list(_CFLAGS),
                verbose=False,
            )
        except Exception as exc:  # a failed build, a broken cache: all fall back
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            errors = [line for line in lines if "error" in line.lower()]
            detail = (errors or lines or [""])[-1 if not errors else 0]
            _give_up(f"{type(exc).__name__}: {detail[:300]}", began)
            return None
        _state.update(module=module, error=None, seconds=time.perf_counter() - began)
        return module


def load_soon(ready: Callable[[Any], None]) -> threading.Thread | None:
    """Hand ``ready`` the extension without making a model's load wait for its build: when this
    process has it already (or knows it cannot have it), ``ready`` is called now (with the
    extension; not at all without one) and None is returned; else a thread builds it (tens of
    seconds the first time on a machine) or loads it from torch's cache, calls ``ready`` once
    it is there, and is returned. The model serves on the gather + SDPA path meanwhile."""
    if "module" in _state:
        if _state["module"] is not None:
            ready(_state["module"])
        return None

    def build() -> None:
        module = load()
        if module is not None:
            ready(module)

    thread = threading.Thread(target=build, name="inferd-paged-attention-build", daemon=True)
    thread.start()
    return thread


def _give_up(reason: str, began: float) -> None:
    _log.warning(
        "paged decode attention not compiled (%s); the llm backend uses the gather + SDPA path",
        reason,
    )
    _state.update(module=None, error=reason, seconds=time.perf_counter() - began)


def load_error() -> str | None:
    """Why :func:`load` gave None (None: it did not, or was not called)."""
    error = _state.get("error")
    return None if error is None else str(error)


def decode_attention(
    module: Any,
    q: torch.Tensor,
    layer_kv: torch.Tensor,
    tables: torch.Tensor,
    context: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """``[B, heads * d]``: each query's attention over its sequence's first ``context[b]``
    cached positions, read in place through ``tables``."""
    out: torch.Tensor = module.decode_attention(q, layer_kv, tables, context, scale)
    return out
