"""Launch-shape variants of the shipped CUDA rows, timed against torch.compile and Liger-Kernel, interleaved.

    python benchmarks/kernels/bench_launch_variants.py --peer-bench PEER_DIR [--ops silu_and_mul] \\
        [--tokens 1 16 128 1024] [--model llama3.2-1b]

A launch-shape decision (CTA width, items a thread, which kernel past which T) is settled by timing both shapes
in one process on the same inputs. Each variant in VARIANTS is the shipped source with a few replacements,
built by the project's JIT as a row of its own; the table keeps the alternatives each shipped choice was
measured against (the shape before it, and Inductor's cheaper division for silu_and_mul, a measurement only).
Inputs and plain-torch references come from the peer benchmark kept beside the repository (PEER_DIR holds its
bench_peers.py), set to the shapes of --model (MODELS); Liger-Kernel joins when it imports.

Timing: rounds of every implementation once, each call after a flush of L2 between CUDA events, the GPU held
busy while the host queues a round, in a fresh random order each round (seeded); median over rounds. The flush
is l2_flush.FullFlush (an evict_last read of four times L2, then a 256 MiB memset); ``--flush plain`` is the
memset alone, which leaves in L2 what torch.compile's reductions loaded with evict_last. In one cyclic order
(rotated by one a round, as before) and that plain flush, the implementation just before torch.compile measured
0.5-7 % faster at T = 1024-4096 whatever its code; the control variant ``shipped_copy`` (the shipped source
unchanged, built like every variant) is what showed it (benchmarks/results/logs/launch_variants_order_effect.log).
There is one copy of the inputs per implementation, and the copies change hands each round (``--inputs rotate``,
the default; ``--inputs fixed`` keeps one copy each, as before). Each round also times a device-to-device copy of
the op's bytes (the peer benchmark's roofline, ``copy``), and a second line per T gives every figure against it.
"""
from __future__ import annotations

import argparse
import importlib.util
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

import rapid_llm.kernels as K
from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain.jit_row import JitRow
from rapid_llm.kernels.registry import spec as registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
import l2_flush  # noqa: E402

bp: Any = None  # the peer benchmark's module (main imports it from --peer-bench)
#: --model: (hidden, intermediate, q heads, kv heads, head size)
MODELS = {"llama3-8b": (4096, 14336, 32, 8, 128), "llama3.2-1b": (2048, 8192, 32, 8, 64),
          "llama3-70b": (8192, 28672, 64, 8, 128)}
SH = platform.CUDA_INCLUDE

NORM_CUH = "norm/rms_norm_kernels.cuh"
ROPE_DECODE_HEADS = "constexpr int kDecodeHeads = 1;"
SILU_TWO_PASS_LINE = "    out_v[j] = silu_mul_item<T, kItemBytes / 4>(a[i], b[i]);"
SILU_PER_WORD = ("    Item y;\n#pragma unroll\n    for (int k = 0; k < kItemBytes / 4; ++k) "
                 "y.w[k] = silu_mul_word<T>(a[i].w[k], b[i].w[k]);\n    out_v[j] = y;")
ROW_TWO = {  # the norms' row path: two vectors a thread (shipped) -> one, within one wave (the shape before)
    "const unsigned row_threads = n_vec <= 256 ? 128 : n_vec <= 512 ? 256 : 512;":
        "const unsigned row_threads = n_vec <= 128 ? 128 : n_vec <= 256 ? 256 : 512;",
    "const bool row_any_t = n_vec <= 512 || kAdd;": "const bool row_any_t = false;",
    "rl::launch_dependent(rms_norm_row_kernel<T, 128, 2, kAdd, kStreamOut>, grid, dim3(128)":
        "rl::launch_dependent(rms_norm_row_kernel<T, 256, 1, kAdd, kStreamOut>, grid, dim3(256)",
    "rl::launch_dependent(rms_norm_row_kernel<T, 256, 2, kAdd, kStreamOut>, grid, dim3(256)":
        "rl::launch_dependent(rms_norm_row_kernel<T, 512, 1, kAdd, kStreamOut>, grid, dim3(512)",
}


#: The norms' row kernel with every load a plain ld.global (as Triton and Inductor load): rms_norm's x not
#: __restrict__, the weight not __ldg, rather than through the read-only path (ld.global.nc).
NORM_PLAIN_LD = {
    "struct RowIn {\n  using type = const T* __restrict__;": "struct RowIn {\n  using type = const T*;",
    "rms_norm_row_kernel(row_in<T, kAdd> x, const T* __restrict__ weight, T* __restrict__ dst, int x_stride,\n":
        "rms_norm_row_kernel(row_in<T, kAdd> x, const T* weight, T* dst, int x_stride,\n",
    "*reinterpret_cast<uint4*>(&wv[k]) = in ? __ldg(w_v + i) : make_uint4(0, 0, 0, 0);\n  }\n  rl::allow":
        "*reinterpret_cast<uint4*>(&wv[k]) = in ? w_v[i] : make_uint4(0, 0, 0, 0);\n  }\n  rl::allow"}


def norm_loop(threads: int) -> dict[str, str]:
    """rms_norm past one wave at rows of more than 512 vectors as Inductor's kernel runs it: two passes over the
    row at one 16-byte vector a thread a step (the second from L1), ``threads`` a CTA, few registers."""
    kernel = f"""// Wide rows past one wave, a variant: two passes, one vector a thread a step.
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
    rms_norm_loop_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out, int x_stride,
                         int out_stride, int hidden, float eps) {{
  __shared__ float partials[kThreads / 32];
  const int64_t row = blockIdx.x;
  const int n_vec = hidden / Vec<T>::kN;
  const uint4* x_v = reinterpret_cast<const uint4*>(x + row * x_stride);
  const uint4* w_v = reinterpret_cast<const uint4*>(weight);
  uint4* out_v = reinterpret_cast<uint4*>(out + row * out_stride);
  float sum_sq = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n_vec; i += kThreads) {{
    Vec<T> v, unused;
    *reinterpret_cast<uint4*>(&v) = x_v[i];
    add_squares<T, false>(v, v, unused, sum_sq);
  }}
  const float scale = inv_rms(cta_sum<kThreads>(sum_sq, partials), hidden, eps);
  for (int i = static_cast<int>(threadIdx.x); i < n_vec; i += kThreads) {{
    Vec<T> v, w;
    *reinterpret_cast<uint4*>(&v) = x_v[i];
    *reinterpret_cast<uint4*>(&w) = __ldg(w_v + i);
    const Vec<T> y = normalised<T, false>(v, v, w, scale);
    out_v[i] = *reinterpret_cast<const uint4*>(&y);
  }}
}}

"""
    decl = ("template <typename T, int kThreads>\n__global__ void __launch_bounds__(kThreads)\n"
            "    rms_norm_loop_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out, "
            "int x_stride, int out_stride, int hidden, float eps);\n\n")
    launch = (f"  if (vec && !kAdd && n_vec > 512 && fits32 && rows <= INT32_MAX) {{\n"
              f"    rl::launch(rms_norm_loop_kernel<T, {threads}>, dim3(static_cast<unsigned>(rows)), dim3({threads}), 0, "
              "x, weight, out, static_cast<int>(s.x), static_cast<int>(s.out), h, e);\n    return;\n  }\n")
    generic = "// Any hidden size and alignment: two passes with scalar accesses (see the file comment).\n"
    return {generic: kernel + generic, "inline bool aligned16(const void* p)": decl + "inline bool aligned16(const void* p)",
            "  if (vec) {\n    // About 256 threads per row": launch + "  if (vec) {\n    // About 256 threads per row"}


def norm_reload(threads: int, vecs: int) -> dict[str, str]:
    """The shipped rms_norm_reload_kernel at another CTA shape (``threads`` of ``vecs`` vectors each), at every T
    past the row path's wave rather than within one wave of 256-thread CTAs."""
    return {RELOAD_LAUNCH: "  if (reload_rows) {\n",
            "rl::launch_dependent(rms_norm_reload_kernel<T, 256, 4>, dim3(static_cast<unsigned>(rows)), dim3(256)":
            f"rl::launch_dependent(rms_norm_reload_kernel<T, {threads}, {vecs}>, dim3(static_cast<unsigned>(rows)), dim3({threads})"}


#: The reload kernel's two reads of x with L2 cache policies as Inductor's looped reduction loads them
#: (``tl.load(..., eviction_policy='evict_last')`` then ``'evict_first'``: createpolicy and an L2::cache_hint), on
#: top of the L1 hints they carry, so the first read keeps the row in L2 for the second (sm_80 and newer).
#: The reload kernel's reads of x with their L1 hints alone, as shipped before the L2 policies (measured against them).
NORM_RELOAD_L1_ONLY = {
    'uint64_t policy;\n  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));\n'
    '  asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"\n'
    '               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(policy));':
    'asm volatile("ld.global.L1::evict_last.v4.u32 {%0, %1, %2, %3}, [%4];"\n'
    '               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));',
    'uint64_t policy;\n  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));\n'
    '  asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"\n'
    '               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(policy));':
    'asm volatile("ld.global.L1::evict_first.v4.u32 {%0, %1, %2, %3}, [%4];"\n'
    '               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));',
}


def norm_cluster(cluster: int) -> dict[str, str]:
    """At few rows (rows x ``cluster`` CTAs no more than one CTA an SM), each row split across a thread block
    cluster of ``cluster`` CTAs (sm_90): each CTA loads its share of the row (x, the residual and the weight) and the CTAs' sums of
    squares meet through distributed shared memory, so a decode step's row is read by ``cluster`` SMs, not one.
    The sum of squares adds in another order than the row kernel's (per CTA, then the CTAs in rank order)."""
    kernel = """// Few rows, each split across a cluster of kCluster CTAs (a variant; sm_90 thread block clusters).
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// *p in the shared memory of the cluster's CTA of rank `rank`.
__device__ __forceinline__ float cluster_peer(const float* p, unsigned rank) {
  unsigned remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote) : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p))), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

template <typename T, int kThreads, int kVecs, bool kAdd, bool kStreamOut, int kCluster>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads)
    rms_norm_cluster_kernel(row_in<T, kAdd> x, const T* __restrict__ weight, T* __restrict__ dst, int x_stride,
                            int dst_stride, int hidden, float eps) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kStep = kThreads * kCluster;  // vectors between a thread's two
  __shared__ float partials[kWarps];
  __shared__ float cta_sum_sq;
  rl::wait_for_prior_grids();
  const int64_t row = blockIdx.x / kCluster;
  const int first = static_cast<int>(blockIdx.x % kCluster) * kThreads + static_cast<int>(threadIdx.x);
  const int n_vec = hidden / Vec<T>::kN;
  const uint4* x_v = reinterpret_cast<const uint4*>(x + row * x_stride);
  const uint4* w_v = reinterpret_cast<const uint4*>(weight);
  uint4* d_v = reinterpret_cast<uint4*>(dst + row * dst_stride);
  Vec<T> xv[kVecs];
  Vec<T> rv[kAdd ? kVecs : 1];
  Vec<T> wv[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = first + k * kStep;
    const bool in = i < n_vec;
    *reinterpret_cast<uint4*>(&xv[k]) = in ? x_v[i] : make_uint4(0, 0, 0, 0);
    if constexpr (kAdd) *reinterpret_cast<uint4*>(&rv[k]) = in ? d_v[i] : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(&wv[k]) = in ? __ldg(w_v + i) : make_uint4(0, 0, 0, 0);
  }
  rl::allow_dependent_grids();
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    Vec<T> sum;
    add_squares<T, kAdd>(xv[k], rv[kAdd ? k : 0], sum, sum_sq);
    if constexpr (kAdd) {
      const int i = first + k * kStep;
      if (i < n_vec) d_v[i] = *reinterpret_cast<const uint4*>(&sum);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  if ((threadIdx.x & 31) == 0) partials[threadIdx.x >> 5] = sum_sq;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += partials[w];
    cta_sum_sq = t;
  }
  cluster_arrive();
  cluster_wait();
  float total = 0.0f;
#pragma unroll
  for (int r = 0; r < kCluster; ++r) total += cluster_peer(&cta_sum_sq, r);  // rank order in every CTA
  cluster_arrive();  // this CTA has read its peers' sums
  const float scale = inv_rms(total, hidden, eps);
  uint4* out_v;
  if constexpr (kAdd) {
    out_v = reinterpret_cast<uint4*>(x + row * x_stride);
  } else {
    out_v = d_v;
  }
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = first + k * kStep;
    if (i < n_vec) {
      const Vec<T> y = normalised<T, kAdd>(xv[k], rv[kAdd ? k : 0], wv[k], scale);
      if constexpr (kStreamOut) {
        __stcs(out_v + i, *reinterpret_cast<const uint4*>(&y));
      } else {
        out_v[i] = *reinterpret_cast<const uint4*>(&y);
      }
    }
  }
  cluster_wait();  // no CTA leaves (its shared memory with it) while a peer may still read it
}

"""
    decl = f"""template <typename T, int kThreads, int kVecs, bool kAdd, bool kStreamOut, int kCluster>
__global__ void __launch_bounds__(kThreads)
    rms_norm_cluster_kernel(row_in<T, kAdd> x, const T* __restrict__ weight, T* __restrict__ dst, int x_stride,
                            int dst_stride, int hidden, float eps);

template <typename T, bool kAdd, bool kStreamOut>
void launch_cluster(int64_t n_vec, int64_t rows, row_in<T, kAdd> xa, const T* weight, T* dst, int x_s, int d_s,
                    int h, float e) {{
  constexpr int kC = {cluster};
  const dim3 grid(static_cast<unsigned>(rows * kC));
  const int64_t per = rl::cdiv(n_vec, kC);
  if (per <= 64) {{
    rl::launch_dependent(rms_norm_cluster_kernel<T, 64, 1, kAdd, kStreamOut, kC>, grid, dim3(64), 0, xa, weight, dst,
                         x_s, d_s, h, e);
  }} else if (per <= 128) {{
    rl::launch_dependent(rms_norm_cluster_kernel<T, 64, 2, kAdd, kStreamOut, kC>, grid, dim3(64), 0, xa, weight, dst,
                         x_s, d_s, h, e);
  }} else if (per <= 256) {{
    rl::launch_dependent(rms_norm_cluster_kernel<T, 128, 2, kAdd, kStreamOut, kC>, grid, dim3(128), 0, xa, weight,
                         dst, x_s, d_s, h, e);
  }} else if (per <= 512) {{
    rl::launch_dependent(rms_norm_cluster_kernel<T, 256, 2, kAdd, kStreamOut, kC>, grid, dim3(256), 0, xa, weight,
                         dst, x_s, d_s, h, e);
  }} else {{
    rl::launch_dependent(rms_norm_cluster_kernel<T, 256, 4, kAdd, kStreamOut, kC>, grid, dim3(256), 0, xa, weight,
                         dst, x_s, d_s, h, e);
  }}
}}

"""
    launch = (f"    if (rows * {cluster} <= rl::sm_count()) {{  // the variant: a cluster a row\n"
              "      launch_cluster<T, kAdd, kAdd>(n_vec, rows, xa, weight, dst, x_s, d_s, h, e);\n"
              "      return;\n    }\n")
    return {NORM_GENERIC: kernel + NORM_GENERIC, NORM_ALIGNED16: decl + NORM_ALIGNED16,
            NORM_DECODE_STORE: launch + NORM_DECODE_STORE}


NORM_GENERIC = "// Any hidden size and alignment: two passes with scalar accesses (see the file comment).\n"
NORM_ALIGNED16 = "inline bool aligned16(const void* p)"
NORM_DECODE_STORE = "    if (kAdd && rows <= rl::sm_count()) {"


def norm_split(shares: int) -> dict[str, str]:
    """rms_norm at few rows (rows x ``shares`` CTAs no more than one CTA an SM): each row's output split over
    ``shares`` CTAs with no exchange between them. Every CTA reads the whole row of x and sums its squares exactly as
    the row kernel does (same threads, same order: the same bits out), but loads the weight and stores the output
    for its own share only, so one SM moves the row once and a share of the rest, not all of it. Not for
    fused_add_rms_norm: it writes over x and the residual, which the other CTAs of the row may still be reading."""
    kernel = """// Few rms_norm rows, each row's output split over gridDim.y CTAs that all read the row (a variant).
template <typename T, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads)
    rms_norm_split_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out, int x_stride,
                          int out_stride, int hidden, float eps) {
  __shared__ float partials[kThreads / 32];
  rl::wait_for_prior_grids();
  const int64_t row = blockIdx.x;
  const int n_vec = hidden / Vec<T>::kN;
  const int share = (n_vec + static_cast<int>(gridDim.y) - 1) / static_cast<int>(gridDim.y);
  const int lo = static_cast<int>(blockIdx.y) * share;
  const int hi = min(n_vec, lo + share);
  const uint4* x_v = reinterpret_cast<const uint4*>(x + row * x_stride);
  const uint4* w_v = reinterpret_cast<const uint4*>(weight);
  uint4* out_v = reinterpret_cast<uint4*>(out + row * out_stride);
  Vec<T> xv[kVecs], wv[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * kThreads;
    *reinterpret_cast<uint4*>(&xv[k]) = i < n_vec ? x_v[i] : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(&wv[k]) = i >= lo && i < hi ? __ldg(w_v + i) : make_uint4(0, 0, 0, 0);
  }
  rl::allow_dependent_grids();
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    Vec<T> unused;
    add_squares<T, false>(xv[k], xv[0], unused, sum_sq);
  }
  const float scale = inv_rms(cta_sum<kThreads>(sum_sq, partials), hidden, eps);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * kThreads;
    if (i >= lo && i < hi) {
      const Vec<T> y = normalised<T, false>(xv[k], xv[0], wv[k], scale);
      out_v[i] = *reinterpret_cast<const uint4*>(&y);
    }
  }
}

"""
    decl = """template <typename T, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads)
    rms_norm_split_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out, int x_stride,
                          int out_stride, int hidden, float eps);

"""
    launch = (f"    if (!kAdd && n_vec > 128 && n_vec <= 1024 && rows * {shares} <= rl::sm_count()) {{  // the variant\n"
              f"      const dim3 split_grid(static_cast<unsigned>(rows), {shares}u);\n"
              "      if (n_vec <= 256) {\n"
              "        rl::launch_dependent(rms_norm_split_kernel<T, 128, 2>, split_grid, dim3(128), 0, x, weight, out, x_s, d_s, h, e);\n"
              "      } else if (n_vec <= 512) {\n"
              "        rl::launch_dependent(rms_norm_split_kernel<T, 256, 2>, split_grid, dim3(256), 0, x, weight, out, x_s, d_s, h, e);\n"
              "      } else {\n"
              "        rl::launch_dependent(rms_norm_split_kernel<T, 512, 2>, split_grid, dim3(512), 0, x, weight, out, x_s, d_s, h, e);\n"
              "      }\n      return;\n    }\n")
    return {NORM_GENERIC: kernel + NORM_GENERIC, NORM_ALIGNED16: decl + NORM_ALIGNED16,
            NORM_DECODE_STORE: launch + NORM_DECODE_STORE}


def row_fat(factor: int) -> dict[str, str]:
    """The norms' row kernel at decode sizes (a CTA an SM at most) with ``factor`` times fewer threads, each holding
    ``factor`` times the vectors (2 * factor): a shorter reduction (fewer warps to meet) for the same loads in flight."""
    head = ("void launch_row(int64_t n_vec, dim3 grid, row_in<T, kAdd> xa, const T* weight, T* dst, int x_s, int d_s, int h,\n"
            "                float e) {\n")
    body = "  if (grid.x <= static_cast<unsigned>(rl::sm_count())) {  // the variant\n"
    for lo, hi, threads in [(128, 256, 128), (256, 512, 256), (512, 1024, 512)]:
        t, v = threads // factor, 2 * factor
        body += (f"    if (n_vec > {lo} && n_vec <= {hi}) {{\n"
                 f"      rl::launch_dependent(rms_norm_row_kernel<T, {t}, {v}, kAdd, kStreamOut>, grid, dim3({t}), 0, xa, weight,"
                 " dst, x_s, d_s, h, e);\n      return;\n    }\n")
    body += "  }\n"
    return {head: head + body}


def row_occupancy(blocks: str) -> dict[str, str]:
    """The norms' row kernel held to the registers that ``blocks`` CTAs an SM need (``__launch_bounds__``' second
    argument, an expression of kThreads and kVecs): ncu put Inductor's rms_norm kernel at T = 1024 (Llama-3-8B)
    at full occupancy (22 registers) where the row kernel's 36 registers allow 75 %."""
    return {f"__launch_bounds__(kThreads)\n    rms_norm_row_kernel(row_in<T, kAdd> x,":
            f"__launch_bounds__(kThreads, {blocks})\n    rms_norm_row_kernel(row_in<T, kAdd> x,"}


#: The shipped launch of rms_norm_reload_kernel (rms_norm rows of 513-1024 vectors, one wave of 256-thread CTAs).
RELOAD_LAUNCH = "  if (reload_rows && rows * 256 <= wave) {\n"
#: ... and its launch past four waves of 512-thread CTAs (512 threads of two vectors).
RELOAD_WIDE_LAUNCH = "  if (reload_rows && rows * 512 > 4 * wave) {\n"


#: The shipped kernels started as plain launches, not programmatic dependent ones (rl::launch_dependent): a
#: difference only where dependent launches are on (the default; RAPID_LLM_DEPENDENT_LAUNCH=0 turns them off).
PLAIN_LAUNCH = ("plain_launch", {"rl::launch_dependent(": "rl::launch("})

#: silu_and_mul's wave kernel launches: items for a 256-thread CTA on every SM, and fewer.
WAVE_WIDE = "launch_wave_cta<T, kItemBytes, 256, 1>("
WAVE_FEW = "launch_wave_cta<T, kItemBytes, 128, 1>("
WAVE_ROWS_FASTEST = {
    "const int j0 = static_cast<int>(blockIdx.x) * (kCta * kItems)":
        "const int j0 = static_cast<int>(blockIdx.y) * (kCta * kItems)",
    "const int64_t t = blockIdx.y;": "const int64_t t = blockIdx.x;",
    "const dim3 grid(static_cast<unsigned>(rl::cdiv(row_items, kCta * kItems)), static_cast<unsigned>(tokens));":
        "const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(rl::cdiv(row_items, kCta * kItems)));"}

#: rotary_embedding: the launcher's choice of the decode grid, and the decode kernel's register bound.
ROPE_ONE_HEAD = "const bool one_head = tokens * rounds <= 4 * static_cast<int64_t>(rl::sm_count());"
ROPE_WIDE = "const bool wide = !one_head && vec && tokens < (int64_t{1} << 31);"
#: ... its lean decode kernel (the variants of the general decode kernel at decode sizes turn it off)
ROPE_NO_LEAN = {"if (one_head && lean) {": "if (false) {"}
#: ... cos/sin read at the token's own row, not its position's (wrong results unless positions are 0..T-1: a
#: measurement of the positions -> cache round trip; no 64-bit modulo, which an earlier form paid for)
ROPE_NO_POSITION_HOP = {"const int64_t cache_row = pos * cache_stride_p;": "const int64_t cache_row = t * cache_stride_p;",
                        "if (pos < 0 || pos >= max_pos) continue;": "if (t >= max_pos) continue;",
                        "if (pos < 0 || pos >= max_pos) return;": "if (t >= max_pos) return;"}

#: ... each rotated element with one fused multiply-add (x*c - y*s as fma(x, c, -(y*s))), as Liger-Kernel's Triton rope
#: compiles: one rounding fewer than the numerics contract allows (a measurement of what the contract costs, never a row)
ROPE_FMA = {"xr = static_cast<T>(__fsub_rn(__fmul_rn(x, c[j]), __fmul_rn(y, s[j])));":
            "xr = static_cast<T>(__fmaf_rn(x, c[j], -__fmul_rn(y, s[j])));",
            "yr = static_cast<T>(__fadd_rn(__fmul_rn(y, c[j]), __fmul_rn(x, s[j])));":
            "yr = static_cast<T>(__fmaf_rn(y, c[j], __fmul_rn(x, s[j])));"}

ROPE_WIDE_LOADS = """    for (int u = 0; u < kHeads; ++u) {  // every head's loads before the position is used
      const int h = h0 + u * h_step;
      if (h < heads) {
        a[u] = load_run<T, kN, kVector>(head(h) + first * elem_stride(h), elem_stride(h));
        b[u] = load_run<T, kN, kVector>(head(h) + second * elem_stride(h), elem_stride(h));
      }
    }
    if (pos < 0 || pos >= max_pos) return;  // out of range: leave the token, never read outside the cache
    const int64_t cache_row = pos * cache_stride_p;
    float c[kN], s[kN];
    load_cache_run<T, kN>(cache, cache_mode, cache_row + static_cast<int64_t>(r * kN) * cache_stride_e,
                          cache_stride_e, c);
    load_cache_run<T, kN>(cache, cache_mode, cache_row + static_cast<int64_t>(half + r * kN) * cache_stride_e,
                          cache_stride_e, s);
"""


def rope_cos_after(early: int) -> dict[str, str]:
    """The wide grid (kHeads > 1) with only ``early`` heads' loads before the position: the cos/sin loads go out as
    soon as the position is back, ahead of the other heads' loads, which wait for the position too (a zero formed
    from it; the one-head grids unchanged). The idea: issued after every q/k load of every resident thread, the
    cos/sin loads queue behind them in the memory system and hold every store back to the end of the reads."""
    new = ROPE_WIDE_LOADS.replace("for (int u = 0; u < kHeads; ++u) {  // every head's loads before the position is used",
                                  f"constexpr int kEarly = kHeads > 1 ? {early} : kHeads;\n"
                                  "    for (int u = 0; u < kEarly; ++u) {")
    rest = """    const int64_t zero = pos >> 62;  // 0 for any position in range, but the compiler cannot know it
    asm volatile("" ::: "memory");
#pragma unroll
    for (int u = kEarly; u < kHeads; ++u) {
      const int h = h0 + u * h_step;
      if (h < heads) {
        a[u] = load_run<T, kN, kVector>(head(h) + first * elem_stride(h) + zero, elem_stride(h));
        b[u] = load_run<T, kN, kVector>(head(h) + second * elem_stride(h) + zero, elem_stride(h));
      }
    }
"""
    return {ROPE_WIDE_LOADS: new + rest}


#: ... the wide grid through the lean kernel: that kernel at kWideHeads heads a thread (its 64-byte parameter line and
#: 32-bit offsets), sent the wide launch where its layouts hold
ROPE_LEAN_WIDE = {
    """template <typename T, bool kNeox>
__global__ void __launch_bounds__(kThreads) rotary_embedding_lean_kernel(const LeanDecodeArgs<T> a) {
  constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  const int h = blockIdx.y * blockDim.y + threadIdx.y;
  const int t = blockIdx.x;
  if (h >= a.heads) return;""": """template <typename T, bool kNeox, int kHeads>
__global__ void __launch_bounds__(kThreads, kHeads > 1 ? kWideMinBlocks : 1) rotary_embedding_lean_kernel(
    const LeanDecodeArgs<T> a) {
  constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  const int h0 = blockIdx.y * blockDim.y + threadIdx.y;
  const int h_step = gridDim.y * blockDim.y;
  const int t = blockIdx.x;
  if (h0 >= a.heads) return;""",
    """  T* head = h < a.q_heads ? a.q + static_cast<int64_t>(t) * a.q_stride_t + h * a.stride_h
                          : a.k + static_cast<int64_t>(t) * a.k_stride_t + (h - a.q_heads) * a.stride_h;""":
    """  auto head = [&](int h) {
    return h < a.q_heads ? a.q + static_cast<int64_t>(t) * a.q_stride_t + h * a.stride_h
                         : a.k + static_cast<int64_t>(t) * a.k_stride_t + (h - a.q_heads) * a.stride_h;
  };""",
    """    Run<T, kN> x = load_run<T, kN, true>(head + first, 1);  // before the position is used, as above
    Run<T, kN> y = load_run<T, kN, true>(head + second, 1);""": """    Run<T, kN> x[kHeads], y[kHeads];
#pragma unroll
    for (int u = 0; u < kHeads; ++u) {
      const int h = h0 + u * h_step;
      if (u == 0 || h < a.heads) {
        x[u] = load_run<T, kN, true>(head(h) + first, 1);
        y[u] = load_run<T, kN, true>(head(h) + second, 1);
      }
    }""",
    """    rotate_run<T, kN, kNeox>(x, y, c, s);
    store_run<T, kN, true>(head + first, 1, x);
    store_run<T, kN, true>(head + second, 1, y);""": """#pragma unroll
    for (int u = 0; u < kHeads; ++u) {
      const int h = h0 + u * h_step;
      if (u > 0 && h >= a.heads) continue;
      rotate_run<T, kN, kNeox>(x[u], y[u], c, s);
      store_run<T, kN, true>(head(h) + first, 1, x[u]);
      store_run<T, kN, true>(head(h) + second, 1, y[u]);
    }""",
    """template <typename T, bool kNeox>
__global__ void __launch_bounds__(kThreads) rotary_embedding_lean_kernel(const LeanDecodeArgs<T> a);""":
    """template <typename T, bool kNeox, int kHeads>
__global__ void __launch_bounds__(kThreads, kHeads > 1 ? kWideMinBlocks : 1) rotary_embedding_lean_kernel(
    const LeanDecodeArgs<T> a);""",
    """        if (wide) return go(rotary_embedding_decode_kernel<T, kNeox, kVector, kWideHeads>, wide_grid, wide_block);
        if (one_head && lean) {""": """        if (wide && !lean) return go(rotary_embedding_decode_kernel<T, kNeox, kVector, kWideHeads>, wide_grid, wide_block);
        if ((one_head || wide) && lean) {""",
    "          return rl::launch_dependent(rotary_embedding_lean_kernel<T, kNeox>, grid, block, 0, args);":
    """          if (wide) return rl::launch_dependent(rotary_embedding_lean_kernel<T, kNeox, kWideHeads>, wide_grid, wide_block, 0, args);
          return rl::launch_dependent(rotary_embedding_lean_kernel<T, kNeox, 1>, grid, block, 0, args);""",
}
#: ... past the decode sizes with the lean kernel's layouts, a block a token whose threads take q's heads and k's apart
#: (two of q's, rows apart, and at most one of k's): a thread's heads sit a fixed step from one base, so its addresses
#: are a few adds where the decode kernel selects q or k and multiplies 64-bit strides for each head, at loads and
#: again at stores (ncu on an H200: 2.16 M warp instructions at Llama-3-8B T = 1024 against Liger-Kernel's 1.04 M)
ROPE_TOKEN_KERNEL = """
// A block a token (threads (run, row)), q's heads row and row + rows, k's head row: see bench_launch_variants.py.
template <typename T, bool kNeox>
__global__ void __launch_bounds__(1024) rotary_embedding_token_kernel(const LeanDecodeArgs<T> a) {
  constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  const int r = threadIdx.x, row = threadIdx.y, rows = blockDim.y;
  const int t = blockIdx.x;
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  const int64_t pos = (a.flags & kLeanPos64) ? static_cast<const int64_t*>(a.positions)[t]
                                             : static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[t]);
  const int first = kNeox ? r * kN : 2 * r * kN;
  const int apart = kNeox ? a.half : kN;  // the run's second 16 bytes, from its first
  T* const q0 = a.q + static_cast<int64_t>(t) * a.q_stride_t + (row * a.stride_h + first);
  T* const k0 = a.k + static_cast<int64_t>(t) * a.k_stride_t + (row * a.stride_h + first);
  auto at = [&](int u) { return u == 2 ? k0 : q0 + u * (rows * a.stride_h); };
  auto in = [&](int u) { return u == 2 ? row < a.heads - a.q_heads : row + u * rows < a.q_heads; };
  Run<T, kN> x[3], y[3];
#pragma unroll
  for (int u = 0; u < 3; ++u) {
    if (in(u)) {
      x[u] = load_run<T, kN, true>(at(u), 1);
      y[u] = load_run<T, kN, true>(at(u) + apart, 1);
    }
  }
  if (pos < 0 || pos >= a.max_pos) return;
  const int64_t cache_row = pos * (2 * a.half);
  float c[kN], s[kN];  // an fp32 cache only (the launcher's condition)
  load_cache_run<T, kN>(a.cache, kCacheVecF32, cache_row + r * kN, 1, c);
  load_cache_run<T, kN>(a.cache, kCacheVecF32, cache_row + a.half + r * kN, 1, s);
#pragma unroll
  for (int u = 0; u < 3; ++u) {
    if (!in(u)) continue;
    rotate_run<T, kN, kNeox>(x[u], y[u], c, s);
    store_run<T, kN, true>(at(u), 1, x[u]);
    store_run<T, kN, true>(at(u) + apart, 1, y[u]);
  }
}
#endif

#if RL_HOST"""
ROPE_TOKEN = {
    "}\n#endif\n\n#if RL_HOST": "}" + ROPE_TOKEN_KERNEL,
    "__global__ void __launch_bounds__(kThreads) rotary_embedding_lean_kernel(const LeanDecodeArgs<T> a);":
    "__global__ void __launch_bounds__(kThreads) rotary_embedding_lean_kernel(const LeanDecodeArgs<T> a);\n"
    "template <typename T, bool kNeox>\n"
    "__global__ void __launch_bounds__(1024) rotary_embedding_token_kernel(const LeanDecodeArgs<T> a);",
    "        if (wide) return go(rotary_embedding_decode_kernel<T, kNeox, kVector, kWideHeads>, wide_grid, wide_block);":
    """        const int64_t token_rows = std::max(rl::cdiv(qv.heads, 2), kv.heads);
        if (wide && lean && cache_fp32 && runs * token_rows <= 1024) {
          const LeanDecodeArgs<T> args{positions.data_ptr(), q.data<T>(), k.data<T>(), cos_sin_cache.data_ptr(),
                                       static_cast<int>(qv.stride_t), static_cast<int>(kv.stride_t),
                                       static_cast<int>(qv.stride_h), static_cast<int>(qv.heads), heads, half,
                                       static_cast<int>(cos_sin_cache.size(0)),
                                       (pos64 ? kLeanPos64 : 0) | (cache_fp32 ? kLeanCacheF32 : 0)};
          return rl::launch_dependent(rotary_embedding_token_kernel<T, kNeox>, dim3(static_cast<unsigned>(tokens)),
                                      dim3(static_cast<unsigned>(runs), static_cast<unsigned>(token_rows)), 0, args);
        }
        if (wide) return go(rotary_embedding_decode_kernel<T, kNeox, kVector, kWideHeads>, wide_grid, wide_block);""",
}

def rope_decode_cta(threads: int) -> dict[str, str]:
    """The one-head decode grid in CTAs of about ``threads`` threads (its rounds of heads over more, smaller blocks:
    more SMs share a decode step's loads); where that grid runs is unchanged."""
    block = "const dim3 block(static_cast<unsigned>(threads_x), static_cast<unsigned>(threads_y));"
    small = (block + f"\n    const int small_rounds = static_cast<int>(rl::cdiv(heads, std::max(1, {threads} / threads_x)));"
             "\n    const dim3 small_block(static_cast<unsigned>(threads_x), static_cast<unsigned>(rl::cdiv(heads, small_rounds)));"
             "\n    const dim3 small_grid(static_cast<unsigned>(std::min<int64_t>(tokens, int64_t{1} << 30)),"
             " static_cast<unsigned>(small_rounds));")
    call = "one_head ? go(rotary_embedding_decode_kernel<T, kNeox, kVector, kDecodeHeads>, grid, block)"
    return {block: small, call: call.replace("grid, block)", "small_grid, small_block)")}


def rope_decode_bound(min_blocks: int) -> dict[str, str]:
    """The decode kernel's __launch_bounds__ asking for ``min_blocks`` 256-thread blocks an SM (its register cap)."""
    old = "__launch_bounds__(kThreads, kHeads > 1 ? kWideMinBlocks : 1) rotary_embedding_decode_kernel("
    return {old: old.replace(": 1)", f": {min_blocks})")}


#: Every op's control: the shipped source unchanged, built and timed as a variant (an A/A comparison: how far a
#: variant's slot alone moves its figure against the K and jit columns).
CONTROL = ("shipped_copy", {})

#: op -> [(label, {shipped text: replacement})]: each variant is the shipped source with these replacements.
VARIANTS: dict[str, list[tuple[str, dict[str, str]]]] = {
    "silu_and_mul": [
        PLAIN_LAUNCH,
        # past one wave: two 16-byte items a thread over half the CTAs (the general kernel), as before
        ("two_items", {"if (tokens * row_items <= thread_slots || bytes == kVecBytes) return bytes;":
                       "if (tokens * row_items <= thread_slots) return bytes;"}),
        # Inductor's cheaper division (changes the numerics: a measurement, never a row)
        ("fastdiv", {"return a / (1.0f + expf(-a)) * b;": "return __fdividef(a, 1.0f + expf(-a)) * b;"}),
        ("cta128", {"if (tokens * row_items >= int64_t{256} * rl::sm_count()) {": "if (false) {"}),
        # the wave kernel at two items a thread (kCta apart) over half the CTAs: 256-thread CTAs, 128-thread
        # ones (the Triton row's tile: 2048 elements a program), and at few items too (128-thread CTAs)
        ("wave256x2", {WAVE_WIDE: WAVE_WIDE.replace("256, 1>", "256, 2>")}),
        ("wave128x2", {WAVE_WIDE: WAVE_WIDE.replace("256, 1>", "128, 2>")}),
        ("few128x2", {WAVE_FEW: WAVE_FEW.replace("128, 1>", "128, 2>")}),
        # the wave kernel's CTAs numbered row-fastest (blockIdx.x the row), as the Triton row's grid is
        ("rows_fastest", WAVE_ROWS_FASTEST),
        ("rows_fastest_128x2", {**WAVE_ROWS_FASTEST, WAVE_WIDE: WAVE_WIDE.replace("256, 1>", "128, 2>")}),
        # x loaded through the plain global path (ld.global, as Triton and Inductor load), not the read-only one
        # the wave kernel element by element (each expf waiting on the division before it), as before its two passes
        ("per_word", {SILU_TWO_PASS_LINE: SILU_PER_WORD}),
        ("plain_ld", {"__launch_bounds__(kCta) silu_and_mul_wave_kernel(const T* __restrict__ x, T* __restrict__ out,":
                      "__launch_bounds__(kCta) silu_and_mul_wave_kernel(const T* x, T* out,",
                      "const Item* __restrict__ a_v": "const Item* a_v", "Item* __restrict__ out_v": "Item* out_v"}),
    ],
    "rms_norm": [
        PLAIN_LAUNCH,
        ("plain_ld", NORM_PLAIN_LD),
        ("one_vec_one_wave", ROW_TWO),
        # rows of 1024 vectors and more (Llama-3-70B): the row kernel past one wave too
        ("row_every_t", {"const bool row_any_t = n_vec <= 512 || kAdd;": "const bool row_any_t = true;"}),
        # rows of 513-1024 vectors: the row kernel at 256 threads of four vectors, not 512 of two
        ("row_256x4", {"rl::launch_dependent(rms_norm_row_kernel<T, 512, 2, kAdd, kStreamOut>, grid, dim3(512)":
                       "rl::launch_dependent(rms_norm_row_kernel<T, 256, 4, kAdd, kStreamOut>, grid, dim3(256)"}),
        # rows of 129-256 vectors (Llama-3.2-1B): 256 threads of one vector, Inductor's CTA width there
        ("row_256x1", {"rl::launch_dependent(rms_norm_row_kernel<T, 128, 2, kAdd, kStreamOut>, grid, dim3(128)":
                       "rl::launch_dependent(rms_norm_row_kernel<T, 256, 1, kAdd, kStreamOut>, grid, dim3(256)"}),
        # rows of 513-1024 vectors past one wave: the vector kernel at 512 threads of two vectors, not 256 of four
        ("vec_512x2", {"const int vecs = n_vec <= 256 ? 1 : n_vec <= 512 ? 2 : 4;":
                       "const int vecs = n_vec <= 256 ? 1 : n_vec <= 1024 ? 2 : 4;"}),
        # rows past one wave at 4 vectors a thread: the weight loaded after the reduction, as fused_add_rms_norm does
        ("late_weight", {"constexpr bool kWeightEarly = !(kAdd && kVecs == 4);": "constexpr bool kWeightEarly = kVecs != 4;",
                         "if constexpr (!kAdd) *reinterpret_cast<uint4*>(&wv[k]) =":
                         "if constexpr (!kAdd && kWeightEarly) *reinterpret_cast<uint4*>(&wv[k]) =",
                         "if constexpr (kAdd && !kWeightEarly) *reinterpret_cast<uint4*>(&copy)":
                         "if constexpr (!kWeightEarly) *reinterpret_cast<uint4*>(&copy)",
                         "const Vec<T>& w = kAdd ? copy : wv[kAdd ? 0 : k];":
                         "const Vec<T>& w = (kAdd || !kWeightEarly) ? copy : wv[kAdd || !kWeightEarly ? 0 : k];"}),
        # rows of 513-1024 vectors within one wave of 256-thread CTAs: the vector kernel (4 vectors a thread,
        # x held across the barrier), as before the reload kernel
        ("no_reload", {RELOAD_LAUNCH: "  if (false) {\n"}),
        # the reload kernel's form at every T past the row path's wave, at 512 threads of two vectors and 1024 of one;
        # and the vector kernel past four waves of 512-thread CTAs, where the reload kernel at 512x2 runs since
        ("reload_512x2", norm_reload(512, 2)),
        ("no_reload_512x2", {RELOAD_WIDE_LAUNCH: "  if (false) {\n"}),
        # the reload kernel (256 threads of four vectors) at every T past the row path's wave, its L1 hints alone and
        # with Inductor's L2 policies added; and those policies on the shipped launch (within one wave)
        ("reload_256x4", norm_reload(256, 4)),
        ("reload_256x4_l1_only", {**norm_reload(256, 4), **NORM_RELOAD_L1_ONLY}),
        ("reload_l1_only", NORM_RELOAD_L1_ONLY),
        ("reload_1024x1", norm_reload(1024, 1)),
        ("loop_512", norm_loop(512)),
        ("loop_256", norm_loop(256)),
        # x read and out written with the streaming cache hints (evict first): each is touched once
        ("streaming", {"*reinterpret_cast<uint4*>(&xv[k]) = in ? x_v[i] : make_uint4(0, 0, 0, 0);":
                       "*reinterpret_cast<uint4*>(&xv[k]) = in ? __ldcs(x_v + i) : make_uint4(0, 0, 0, 0);",
                       "out_v[i] = *reinterpret_cast<const uint4*>(&y);":
                       "__stcs(out_v + i, *reinterpret_cast<const uint4*>(&y));"}),
        # few rows, a row split across a thread block cluster of 2, 4 or 8 CTAs
        ("cluster2", norm_cluster(2)), ("cluster4", norm_cluster(4)), ("cluster8", norm_cluster(8)),
        # few rows, each row's output split over 2, 4 or 8 CTAs that each read the whole row (no exchange): level on an
        # H200 (benchmarks/results/logs/launch_variants_rms_norm_split.log)
        ("split2", norm_split(2)), ("split4", norm_split(4)), ("split8", norm_split(8)),
        # decode sizes: the row kernel at half or a quarter of the threads, four or eight vectors each: level or slower
        # on an H200 (benchmarks/results/logs/launch_variants_norms_row_fat.log)
        ("row_fat4", row_fat(2)), ("row_fat8", row_fat(4)),
        # the row kernel at two vectors a thread held to 32 registers: 2048 threads an SM (full occupancy)
        ("row_full_occupancy", row_occupancy("kVecs <= 2 ? 2048 / kThreads : 1")),
    ],
    "fused_add_rms_norm": [PLAIN_LAUNCH,
                           ("plain_ld", NORM_PLAIN_LD), ("one_vec_one_wave", ROW_TWO),
                           # at most a CTA per SM: the output stored plainly, as before the streaming store
                           ("plain_store", {"if (kAdd && rows <= rl::sm_count()) {": "if (false) {"}),
                           ("cluster2", norm_cluster(2)), ("cluster4", norm_cluster(4)), ("cluster8", norm_cluster(8)),
                           ("row_fat4", row_fat(2)), ("row_fat8", row_fat(4))],
    "rotary_embedding": [
        PLAIN_LAUNCH,
        ("decode_2_per_sm", {ROPE_ONE_HEAD: ROPE_ONE_HEAD.replace("<= 4 *", "<= 2 *")}),
        # the decode grid (q/k loads before the position test) at every T: a measurement only (no token loop)
        ("decode_every_t", {ROPE_ONE_HEAD: "const bool one_head = true;"}),
        # the decode kernel at two heads a thread (twice the q/k bytes in flight a thread, half the blocks), at
        # the decode grid's present reach and at every T
        ("decode_x2", {**ROPE_NO_LEAN, ROPE_DECODE_HEADS: ROPE_DECODE_HEADS.replace("= 1;", "= 2;")}),
        ("decode_x2_every_t", {**ROPE_NO_LEAN, ROPE_DECODE_HEADS: ROPE_DECODE_HEADS.replace("= 1;", "= 2;"),
                               ROPE_ONE_HEAD: "const bool one_head = true;"}),
        # the token-looping kernel past the decode grid: two heads' loads in flight a thread, at the present
        # register bound (6 blocks an SM) and at 4
        ("in_flight2", {"constexpr int kHeadsInFlight = 1;": "constexpr int kHeadsInFlight = 2;"}),
        ("in_flight2_min4", {"constexpr int kHeadsInFlight = 1;": "constexpr int kHeadsInFlight = 2;",
                             "constexpr int kMinBlocks = 6;": "constexpr int kMinBlocks = 4;"}),
        # the decode kernel held to 40 registers (it takes 48 unbounded: 8 blocks of 160 threads an SM, 10 held)
        ("decode_min6", {**ROPE_NO_LEAN, **rope_decode_bound(6)}),
        # the one-head decode grid in smaller CTAs (64 and 128 threads, not 256): more SMs a decode step; on an H200
        # no lead outside the A/A control's spread (benchmarks/results/logs/launch_variants_rotary_embedding_decode_cta.log)
        ("decode_cta64", {**ROPE_NO_LEAN, **rope_decode_cta(64)}),
        ("decode_cta128", {**ROPE_NO_LEAN, **rope_decode_cta(128)}),
        # the one-head decode grid through the general decode kernel (20 parameters over three constant lines, 72
        # registers), as before the lean kernel
        ("no_lean", ROPE_NO_LEAN),
        # cos/sin read at the token's index, not its position: the position -> cos/sin round trip removed (wrong
        # results unless positions are 0..T-1; a measurement of what that dependent load costs, never a row)
        # (the general decode kernel at decode sizes too: the lean kernel off)
        ("no_position_hop", {**ROPE_NO_LEAN, **ROPE_NO_POSITION_HOP}),
        # the two things Liger-Kernel's timed call does not pay, one at a time and together: a fused multiply-add
        # (the numerics contract forbids it) and the position -> cos/sin round trip (its cos/sin come pre-gathered).
        # On an H200 the first bought nothing, the second most of the T = 1024 gap to Liger
        # (benchmarks/results/logs/launch_variants_rotary_embedding_fma.log)
        ("fma", ROPE_FMA),
        ("fma_no_position_hop", {**ROPE_NO_LEAN, **ROPE_NO_POSITION_HOP, **ROPE_FMA}),
        # the wide grid's cos/sin loads sent before the other heads' q/k loads: after one head's, two heads', or first;
        # 0-19 % slower on an H200 (benchmarks/results/logs/launch_variants_rotary_embedding_cos_order.log)
        ("cos_after_head0", rope_cos_after(1)), ("cos_after_head1", rope_cos_after(2)), ("cos_first", rope_cos_after(0)),
        # past the decode sizes: the token-looping kernel, as before the wide decode grid; that grid at every T and
        # past 16 blocks an SM of the one-head grid (where it first shipped); at two and four heads a thread
        ("token_loop", {ROPE_WIDE: "const bool wide = false;"}),
        ("wide_every_t", {ROPE_WIDE: ROPE_WIDE.replace("!one_head && ", "")}),
        ("wide_past_16_per_sm", {ROPE_ONE_HEAD: ROPE_ONE_HEAD.replace("<= 4 *", "<= 16 *")}),
        # the wide grid through the lean kernel: 13-17 % slower on an H200, where it spills at the 64-register cap
        # (benchmarks/results/logs/launch_variants_rotary_embedding_lean_wide.log)
        ("lean_wide", ROPE_LEAN_WIDE),
        # a block a token, q's and k's heads apart: 0.6-2.5 % slower on an H200
        # (benchmarks/results/logs/launch_variants_rotary_embedding_token_kernel.log)
        ("token_kernel", ROPE_TOKEN),
        ("wide_x2", {"constexpr int kWideHeads = 3;": "constexpr int kWideHeads = 2;"}),
        ("wide_x4", {"constexpr int kWideHeads = 3;": "constexpr int kWideHeads = 4;",
                     "constexpr int kWideMinBlocks = 4;": "constexpr int kWideMinBlocks = 3;"}),
    ],
    "scaled_fp8_quant": [
        ("block256", {"const int64_t per = n_groups * kBlock > rl::resident_threads() ? 128 : kBlock;":
                      "const int64_t per = kBlock;"}),
    ],
}
SOURCES = {"silu_and_mul": ("activation/silu_and_mul.cu", []), "rms_norm": ("norm/rms_norm.cu", [NORM_CUH]),
           "fused_add_rms_norm": ("norm/fused_add_rms_norm.cu", [NORM_CUH]),
           "rotary_embedding": ("rope/rotary_embedding.cu", []),
           "scaled_fp8_quant": ("quant/scaled_fp8_quant.cu", [])}
OUT_RULE = {"silu_and_mul": "half_last_dim", "rms_norm": "like_input", "fused_add_rms_norm": "none",
            "rotary_embedding": "none", "scaled_fp8_quant": "none"}


def variant_sources(op: str, subs: dict[str, str]) -> dict[str, str]:
    """file name -> text of one variant: the op's shipped source (and its local header) with ``subs`` applied.

    Raises ValueError naming any replacement whose shipped text is gone (the table went stale)."""
    main, extra = SOURCES[op]
    texts, done = {}, set()
    for rel in [main, *extra]:
        text = (SH / rel).read_text()
        for old, new in subs.items():
            if old in text:
                text = text.replace(old, new)
                done.add(old)
        texts[Path(rel).name] = text
    missing = [old for old in subs if old not in done]
    if missing:
        raise ValueError(f"{op}: the shipped source no longer has {missing[0]!r}")
    return texts


def build_variant(op: str, label: str, subs: dict[str, str], work: Path) -> JitRow:
    """The variant as a row of its own, built by the project's JIT in ``work/<op>_<label>/``."""
    d = work / f"{op}_{label}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    main = Path(SOURCES[op][0]).name
    for name, text in variant_sources(op, subs).items():
        (d / (f"{Path(main).stem}_{label}.cu" if name == main else name)).write_text(text)
    row = JitRow(d / f"{Path(main).stem}_{label}.cu", op, out=OUT_RULE[op])
    row.bound()  # build now, outside the timing
    return row


def call_for(op: str, fn: Callable[..., Any]) -> Callable[[dict], Any]:
    """One timed call of ``fn`` (the op's calling convention) on an implementation's own inputs."""
    if op == "scaled_fp8_quant":
        return lambda s: fn(s["out"], s["x"], s["scales"], False)
    if op == "rms_norm":
        return lambda s: fn(s["x"], s["w"], bp.EPS)
    if op == "fused_add_rms_norm":
        return lambda s: fn(s["x"], s["residual"], s["w"], bp.EPS)
    if op == "silu_and_mul":
        return lambda s: fn(s["x"])
    return lambda s: fn(s["positions"], s["q"], s["k"], bp.HEAD, s["cache"], True)


def fp8_inputs(t: int) -> dict[str, torch.Tensor]:
    """scaled_fp8_quant per token at the model's hidden size (and 1x128 groups' scales for comparison)."""
    x = torch.randn(t, bp.HIDDEN, device="cuda").to(torch.bfloat16)
    return {"x": x, "out": torch.empty(t, bp.HIDDEN, device="cuda", dtype=torch.float8_e4m3fn),
            "scales": torch.empty(t, 1, device="cuda"), "g128": torch.empty(t, bp.HIDDEN // 128, device="cuda")}


def liger_impl(op: str) -> tuple[Callable[[dict], None] | None, Callable[[dict], Any]] | None:
    """Liger-Kernel's call of ``op`` as the peer benchmark makes it (its preparation untimed), if it imports."""
    if op == "scaled_fp8_quant":
        return None
    try:
        from liger_kernel.ops import (LigerFusedAddRMSNormFunction, LigerRMSNormFunction, LigerRopeFunction,
                                      LigerSiLUMulFunction)
    except Exception as exc:  # noqa: BLE001
        print(f"liger: {exc}")
        return None
    if op == "rms_norm":
        return None, lambda s: LigerRMSNormFunction.apply(s["x"], s["w"], bp.EPS)
    if op == "fused_add_rms_norm":
        return None, lambda s: LigerFusedAddRMSNormFunction.apply(s["x"], s["residual"], s["w"], bp.EPS)
    if op == "silu_and_mul":
        def prep(s):
            x = s["x"]
            s["a"], s["b"] = x[:, :bp.INTER].contiguous(), x[:, bp.INTER:].contiguous()
        return prep, lambda s: LigerSiLUMulFunction.apply(s["a"], s["b"])

    def prep(s):
        cs = s["cache"].index_select(0, s["positions"])
        s["cos"] = cs[:, : bp.HEAD // 2].contiguous()[None]
        s["sin"] = cs[:, bp.HEAD // 2:].contiguous()[None]

    def run(s):
        t = s["q"].shape[0]
        q4 = s["q"].view(1, t, bp.Q_HEADS, bp.HEAD).transpose(1, 2)
        k4 = s["k"].view(1, t, bp.KV_HEADS, bp.HEAD).transpose(1, 2)
        return LigerRopeFunction.apply(q4, k4, s["cos"], s["sin"], None, 1, bp.HEAD)
    return prep, run


def schedule(n: int, rounds: int, rotate: bool = True, seed: int = 0) -> list[list[tuple[int, int]]]:
    """Per round, (implementation, input copy) in the order they run: a fresh random order each round (no
    implementation keeps its neighbours); with ``rotate`` implementation i takes copy (i + round) % n, so every
    copy serves every implementation, otherwise copy i always."""
    rng = random.Random(seed)
    return [[(i, (i + r) % n if rotate else i) for i in rng.sample(range(n), n)] for r in range(rounds)]


def time_round_robin(impls: dict[str, Callable[[dict], Any]], states: list[dict], rounds: int,
                     rotate: bool = True, full_flush: bool = True) -> dict[str, list[float]]:
    """Device microseconds of each implementation's call, ``rounds`` samples each (see the module docstring);
    ``states`` holds one copy of the inputs per implementation, dealt out by :func:`schedule`."""
    names = list(impls)
    flush: Any = torch.empty(bp.FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    if full_flush:
        flush = l2_flush.FullFlush(flush)
    for i, name in enumerate(names):
        for copy in range(3):
            impls[name](states[(i + copy) % len(states)])
    torch.cuda.synchronize()
    host = {}
    for i, name in enumerate(names):
        t = time.perf_counter()
        impls[name](states[i])
        torch.cuda.synchronize()
        host[name] = (time.perf_counter() - t) * 1e6
    per_round = sum(host.values()) + (40 + (l2_flush.SWEEP_HOST_US if full_flush else 0)) * len(impls)
    ev = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(rounds)]
          for n in impls}
    for r, order in enumerate(schedule(len(names), rounds, rotate)):
        torch.cuda._sleep(int(per_round * 1.5 * 2000))
        for i, copy in order:
            name = names[i]
            flush.zero_()
            s, e = ev[name][r]
            s.record()
            impls[name](states[copy])
            e.record()
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) * 1e3 for s, e in ev[n]] for n in impls}


def check_outputs(impls: dict[str, Callable[[dict], Any]], preps: dict[str, Callable[[dict], None] | None],
                  master: dict) -> str:
    """One call of each implementation on fresh copies of ``master``, its result (or, for an in-place op, the
    inputs it wrote) against K's (or jit's) within 0.02: a variant that times well but computes wrongly is named."""
    def run(name: str) -> Any:
        state = bp._clone(master)
        if preps.get(name):
            preps[name](state)
        out = impls[name](state)
        return out if out is not None else {k: state[k] for k in master if isinstance(state[k], torch.Tensor)}

    base = "K" if "K" in impls else "jit"
    want = run(base)
    wrong, unchecked = [], []
    for name in impls:
        if name == base:
            continue
        got = run(name)
        if isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor):
            pairs = [(want, got)]
        elif isinstance(want, dict) and isinstance(got, dict):
            pairs = [(want[k], got[k]) for k in want]
        else:
            unchecked.append(name)
            continue
        if not all(w.shape == g.shape and torch.allclose(w.float(), g.float(), atol=0.02, rtol=0.02)
                   for w, g in pairs):
            wrong.append(name)
    return (f"outputs against {base}: " + (f"WRONG {', '.join(wrong)}" if wrong else "all match")
            + (f" (not compared: {', '.join(unchecked)})" if unchecked else ""))


def set_model(peer: Any, model: str) -> None:
    """Point the peer benchmark's module at ``model``'s shapes, the rope cache's width included (its builder may
    take the head size as a default fixed when it was defined)."""
    peer.HIDDEN, peer.INTER, peer.Q_HEADS, peer.KV_HEADS, peer.HEAD = MODELS[model]
    build = getattr(peer, "_rope_cache_as_defined", None) or peer.rope_cache
    peer._rope_cache_as_defined = build

    def rope_cache(device: Any, max_pos: int = peer.MAX_POS, rot: int | None = None) -> torch.Tensor:
        return build(device, max_pos, peer.HEAD if rot is None else rot)

    peer.rope_cache = rope_cache


def _import_peer_bench(folder: str) -> Any:
    path = Path(folder) / "bench_peers.py"
    if not path.is_file():
        raise SystemExit(f"bench_launch_variants: no bench_peers.py in {folder} (the peer benchmark's folder)")
    spec = importlib.util.spec_from_file_location("bench_peers", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_peers"] = module
    spec.loader.exec_module(module)
    return module


def main(argv: Sequence[str] | None = None) -> int:
    global bp
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peer-bench", required=True, help="the folder of the peer benchmark (its bench_peers.py)")
    p.add_argument("--ops", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--tokens", nargs="+", type=int, default=[1, 16, 128, 1024, 4096, 16384])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--model", default="llama3-8b", choices=list(MODELS), help="the shapes (MODELS)")
    p.add_argument("--only", nargs="*", default=None,
                   help="variant labels to build, and triton for the Triton row (default: all; none: no variant)")
    p.add_argument("--inputs", choices=["rotate", "fixed"], default="rotate",
                   help="rotate: the copies of the inputs change hands each round; fixed: one copy per implementation")
    p.add_argument("--flush", choices=["full", "plain"], default="full",
                   help="full: an evict_last sweep before the memset (l2_flush); plain: the memset alone, as before")
    p.add_argument("--work", default=None, help="where the variants' sources go (default: a temporary folder)")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_launch_variants: needs a CUDA device")
        return 2
    bp = _import_peer_bench(a.peer_bench)
    set_model(bp, a.model)
    work = Path(a.work or tempfile.mkdtemp(prefix="rapid_llm_variants_"))
    print(f"model {a.model}: {MODELS[a.model]}  {torch.cuda.get_device_name()}  torch {torch.__version__}",
          flush=True)
    for op in a.ops:
        t0 = time.perf_counter()
        impls: dict[str, Callable[[dict], Any]] = {}
        preps: dict[str, Callable[[dict], None] | None] = {}
        base = JitRow(SH / SOURCES[op][0], op, out=OUT_RULE[op])
        if op == "scaled_fp8_quant":
            impls["jit"] = call_for(op, base)
            impls["jit_1x128"] = lambda s, _b=base: _b(s["out"], s["x"], s["g128"], False)
        else:
            impls["K"] = call_for(op, getattr(K, op))
            impls["jit"] = call_for(op, base)
        if f"triton/{op}" in registry.shipped_rows(op) and (a.only is None or "triton" in a.only):
            impls["triton"] = call_for(op, registry.get_row(f"triton/{op}").load())
        for label, subs in [*VARIANTS[op], CONTROL]:
            if a.only is not None and label not in a.only:
                continue
            impls[label] = call_for(op, build_variant(op, label, subs, work))
        if op in bp.PLAIN:
            impls["compile"] = call_for(op, torch.compile(bp.PLAIN[op]))
        lg = liger_impl(op)
        if lg is not None:
            preps["liger"], impls["liger"] = lg
        print(f"== {op} (built in {time.perf_counter() - t0:.1f} s); us per call, cold L2, median of {a.rounds} "
              "interleaved rounds [p20-p80], x = against the best of torch.compile and Liger (jit for fp8)", flush=True)
        for t in a.tokens:
            master = fp8_inputs(t) if op == "scaled_fp8_quant" else bp.make_inputs(op, t, "cuda")
            print(f"T={t:5d}: {check_outputs(impls, preps, master)}", flush=True)
            timed = dict(impls)
            if op != "scaled_fp8_quant":  # the peer benchmark's roofline: a device copy of the op's bytes
                src = torch.empty(max(16, bp.bytes_moved(op, t) // 2), dtype=torch.uint8, device="cuda")
                timed["copy"] = lambda s, _src=src, _dst=torch.empty_like(src): _dst.copy_(_src)
            states = []
            for _ in timed:  # every implementation's preparation on every copy: any copy serves any of them
                states.append(bp._clone(master))
                for prep in preps.values():
                    if prep:
                        prep(states[-1])
            us = time_round_robin(timed, states, a.rounds, rotate=a.inputs == "rotate", full_flush=a.flush == "full")
            med = {n: statistics.median(v) for n, v in us.items()}
            peers = [med[n] for n in ("compile", "liger") if n in med] or [med["jit"]]
            best = min(peers)
            cells = []
            for n, v in us.items():
                v = sorted(v)
                q = lambda f: v[int(round(f * (len(v) - 1)))]  # noqa: E731
                cells.append(f"{n} {med[n]:.2f} [{q(0.2):.2f}-{q(0.8):.2f}] x{med[n] / best:.3f}")
            if op == "scaled_fp8_quant":
                cells.append(f"roofline {t * bp.HIDDEN * 3 / 4249e3:.2f} us")
            print(f"T={t:5d}: " + " | ".join(cells), flush=True)
            if "copy" in med:
                print(f"T={t:5d}: against the copy ({med['copy']:.2f} us): "
                      + " | ".join(f"{n} x{med[n] / med['copy']:.3f}" for n in med if n != "copy"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
