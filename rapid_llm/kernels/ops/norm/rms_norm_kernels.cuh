// The kernels of rms_norm.cu (kAdd = false) and fused_add_rms_norm.cu (kAdd = true), and their launch:
// both launchers are a few checks over launch_rms_norm below.
//
// out = total / sqrt(mean(total^2) + eps) * weight per token row, where total is x
// (rms_norm) or x + residual formed in fp32 (fused_add_rms_norm, which also writes
// residual = total rounded once, and normalises the fp32 total, not the rounded
// residual). Sum of squares in fp32; the normalised value times the weight in fp32,
// rounded once to the dtype.
//
// One token row per thread row of the block (threadIdx.y), blockDim.x threads across
// the hidden dim (a multiple of 32: a warp never spans two rows). A row is memory
// bound: hidden 4096 bf16 is 8 KiB, read once and written once. Each of out, x and
// residual is addressed at its own row stride (in elements; rl::row_stride), so a
// slice x[:, :H] of a [T, 2H] buffer runs without a copy.
//  - Vector path (hidden and every row stride a multiple of the 16-byte vector, every
//    pointer 16-byte aligned, so every row starts on a vector): the row stays in
//    registers as raw 16-byte vectors, kVecs of them per thread, all loads (the
//    weight's too) issued before any is used; warp-shuffle plus shared-memory
//    reduction of the sum of squares; then scale and store. Hidden 4096
//    bf16 is 256 threads x 2 vectors of 8. Narrow rows (hidden 128 bf16: one warp)
//    share a block of 128 threads with other rows, so a block is never a lone warp.
//    It serves the rows the row path below does not take (fewer than 128 vectors, strides
//    past 32 bits, rms_norm rows of more than 512 vectors past one wave but for the reload path's reach).
//  - Row path (row strides that fit 32 bits, 128 to 2048 vectors a row): rms_norm_row_kernel, one row per
//    CTA of a compile-time width, two vectors a thread (128, 256 or 512 threads; 4 vectors at 512 past
//    1024). A decode step is latency-bound, and ncu on an H200 (rms_norm at T = 128 bf16: 4.00 us
//    against torch.compile's 3.49 at base clocks) showed the vector path's block-shape reads (blockDim)
//    and its 72 bytes of parameters over two 64-byte constant lines stalling threads (immediate-constant
//    misses) before their first load; this kernel reads no blockDim and its parameters (40 bytes:
//    fused_add_rms_norm writes its output over x, rms_norm has no residual) fit one line. Two vectors a
//    thread rather than one measured faster at every T on an H200 (cold L2, bf16, hidden 4096: T = 1
//    4.77 against 4.90 us, T = 256 6.27 against 6.46), and at rows of 256 and 512 vectors this path
//    beats the vector path at every T (hidden 2048, T = 16384: 36.7 against 42.1 us). At rows of 1024
//    and more rms_norm keeps it to one wave of thread slots (past it the vector path measured 1-3 %
//    faster at hidden 8192), fused_add_rms_norm takes it at every T (10 % faster at T = 1024 there).
//    At most a CTA per SM (decode sizes), fused_add_rms_norm stores its output (over x) with the streaming hint
//    (evict first). On an H200 (hidden 4096 bf16, cold L2, CUDA graphs, interleaved) that kept a row-strided
//    x (x[:, :H] of a [T, 2H] buffer, vLLM's test) at 0.963, 0.991 and 0.968 of contiguous bandwidth at
//    T = 1, 16, 128, where plain stores gave 0.954, 0.976 and 0.946, contiguous calls level; from T = 1024 up it
//    cost contiguous calls 1-2 % (T = 16384: 3918 against 3997 GB/s), so bigger calls store plainly.
//  - Reload path (rms_norm rows of 513-1024 vectors, Llama-3-70B's hidden 8192 in bf16, past the row path's
//    wave of 512-thread CTAs and within one wave of 256-thread CTAs: 529-1056 rows on an H200, a chunked
//    prefill's size): rms_norm_reload_kernel, one row per CTA of 256 threads of four vectors. x is read for
//    the sum of squares, then read again (from L1, with Inductor's cache hints) with the weight, so no row
//    waits in registers across the barrier: few enough registers for 2048 threads an SM, where the vector
//    path holds x and the weight (64 registers, 1024 threads) and so needs two waves. On an H200 (cold L2,
//    two runs, against the vector path): T = 768 11.49 and 11.39 us against 12.05 and 12.14, T = 1056 14.05
//    and 14.14 against 14.59 and 14.59, T = 1024 14.00 and 13.86 against 14.05 and 14.00 (13.63 and 13.66
//    against 14.24 and 14.35 in two runs before), T = 529 level. Past four waves of 512-thread CTAs (2112 rows on an H200)
//    it runs again, at 512 threads of two vectors (2048 threads an SM, as Inductor's looped reduction runs):
//    with the L2 policies below that measured 129.10 us at T = 16384 against the vector path's 133.33 and
//    torch.compile's 129.12, 37.18 at T = 4096 against 37.70 (torch.compile 37.23), and 22.13 at T = 2048
//    against 21.89 (launch_variants_llama3-70b_rms_norm_reload_512x2.log); with the L1 hints alone it had
//    measured no faster than the vector path (134.0 and 135.2 us at T = 16384 against 134.9 and 134.2).
//    benchmarks/results/logs/launch_variants_llama3-70b_rms_norm_*.
//    Like the row path's figures above, these come from bench_launch_variants.py before its rounds took a random
//    order: in its old fixed order one slot measured up to 7 % fast at T = 1024-4096 whatever its code
//    (benchmarks/results/logs/launch_variants_order_effect.log), and neither choice was measured again since.
//  - Generic path (any hidden, any alignment, rows too wide for registers): two passes
//    over the row with scalar accesses; pass 2 reads the inputs again (from L2 for
//    rows of ordinary width) and is the only one that writes, so the fp32 total it
//    normalises is formed from the original x and residual.
#pragma once
#include "common/rapid_llm.cuh"

namespace rms_norm_detail {

constexpr int kVecBytes = 16;            // one 128-bit load or store
constexpr int kMaxThreads = 512;         // per block; __launch_bounds__ below
constexpr int kMaxWarps = kMaxThreads / 32;

// out and x of a kernel: fused_add_rms_norm writes out over x (kAdd: they alias, plain pointers);
// rms_norm's are distinct tensors, so they are __restrict__ and x loads through the read-only path.
template <typename P, bool kAlias>
struct RowPtr {
  using type = P* __restrict__;
};
template <typename P>
struct RowPtr<P, true> {
  using type = P*;
};
template <typename P, bool kAlias>
using row_ptr = typename RowPtr<P, kAlias>::type;

// x of rms_norm_row_kernel: fused_add_rms_norm writes its output over x, rms_norm only reads it.
template <typename T, bool kAdd>
struct RowIn {
  using type = const T* __restrict__;
};
template <typename T>
struct RowIn<T, true> {
  using type = T*;
};
template <typename T, bool kAdd>
using row_in = typename RowIn<T, kAdd>::type;

}  // namespace rms_norm_detail

#if RL_DEVICE
namespace rms_norm_detail {

template <typename T>
__device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v) { return static_cast<T>(v); }  // round to nearest even

// kN elements of T that travel as one 128-bit access.
template <typename T>
struct alignas(kVecBytes) Vec {
  static constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  T v[kN];
};

// The sum of v over the blockDim.x threads of this thread's row; every thread of the row gets it.
// Each warp reduces by shuffles, its lane 0 writes one partial, and after one barrier every thread
// adds its row's partials in the same order (a broadcast read): the same total in every thread.
__device__ __forceinline__ float row_sum(float v, float* partials) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warps_per_row = blockDim.x >> 5;
  const int first = threadIdx.y * warps_per_row;
  if ((threadIdx.x & 31) == 0) partials[first + (threadIdx.x >> 5)] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps_per_row; ++w) total += partials[first + w];
  return total;
}

// row_sum for a CTA of one row whose kThreads are known at compile time (no blockDim read: see the row path);
// partials holds kThreads / 32 floats.
template <int kThreads>
__device__ __forceinline__ float cta_sum(float v, float* partials) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if ((threadIdx.x & 31) == 0) partials[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partials[w];
  return total;
}

__device__ __forceinline__ float inv_rms(float sum_sq, int hidden, float eps) {
  return rsqrtf(sum_sq / static_cast<float>(hidden) + eps);
}

// One 16-byte vector of a row, the arithmetic both kernels share. Its fp32 total (x, plus the residual r when
// kAdd) squared into sum_sq, and (kAdd) that total rounded once into sum: the new residual.
template <typename T, bool kAdd>
__device__ __forceinline__ void add_squares(const Vec<T>& x, const Vec<T>& r, Vec<T>& sum, float& sum_sq) {
#pragma unroll
  for (int j = 0; j < Vec<T>::kN; ++j) {
    float t = to_float(x.v[j]);
    if constexpr (kAdd) {
      t += to_float(r.v[j]);
      sum.v[j] = from_float<T>(t);
    }
    sum_sq += t * t;
  }
}

// The output of one vector: the same fp32 total (not the rounded residual) times scale and the weight, rounded
// once to T.
template <typename T, bool kAdd>
__device__ __forceinline__ Vec<T> normalised(const Vec<T>& x, const Vec<T>& r, const Vec<T>& w, float scale) {
  Vec<T> y;
#pragma unroll
  for (int j = 0; j < Vec<T>::kN; ++j) {
    float t = to_float(x.v[j]);
    if constexpr (kAdd) t += to_float(r.v[j]);
    y.v[j] = from_float<T>(t * scale * to_float(w.v[j]));
  }
  return y;
}

// The row in registers. kAdd: x + residual, with residual written back (rounded) and x overwritten
// (out == x). Pointers are 16-byte aligned, hidden and the row strides multiples of Vec<T>::kN (the
// launcher checks).
template <typename T, int kVecs, bool kAdd>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_vec_kernel(row_ptr<T, kAdd> out, row_ptr<const T, kAdd> x, T* residual, const T* __restrict__ weight,
                        int64_t out_stride, int64_t x_stride, int64_t res_stride, int64_t rows, int hidden, float eps) {
  static_assert(sizeof(Vec<T>) == sizeof(uint4), "a Vec must travel as one 128-bit access");
  constexpr int kN = Vec<T>::kN;
  __shared__ float partials[kMaxWarps];
  rl::wait_for_prior_grids();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < rows;  // the last block may hold fewer rows; its threads still meet the barrier
  const int n_vec = hidden / kN;
  const uint4* x_v = reinterpret_cast<const uint4*>(x + row * x_stride);
  uint4* res_v = reinterpret_cast<uint4*>(residual + row * res_stride);

  // The weight's loads join the row's before the reduction, so the scale-and-store after the barrier waits
  // on no memory; except with x, residual and weight all at 4 vectors a thread (48 registers of raw data),
  // where on an H200 the lost occupancy cost more (fp32 hidden 4096: 1% slower) than the early load saved.
  // rms_norm issues each weight vector beside its x vector, fused_add_rms_norm after all of x and residual
  // (the orders each was measured in).
  constexpr bool kWeightEarly = !(kAdd && kVecs == 4);
  const uint4* w_v = reinterpret_cast<const uint4*>(weight);
  Vec<T> xv[kVecs];
  Vec<T> rv[kAdd ? kVecs : 1];
  Vec<T> wv[kWeightEarly ? kVecs : 1];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {  // every load in flight before any is used
    const int i = threadIdx.x + k * blockDim.x;
    const bool in = live && i < n_vec;
    *reinterpret_cast<uint4*>(&xv[k]) = in ? x_v[i] : make_uint4(0, 0, 0, 0);
    if constexpr (kAdd) *reinterpret_cast<uint4*>(&rv[k]) = in ? res_v[i] : make_uint4(0, 0, 0, 0);
    if constexpr (!kAdd) *reinterpret_cast<uint4*>(&wv[k]) = in ? __ldg(w_v + i) : make_uint4(0, 0, 0, 0);
  }
  if constexpr (kAdd && kWeightEarly) {
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      *reinterpret_cast<uint4*>(&wv[k]) = live && i < n_vec ? __ldg(w_v + i) : make_uint4(0, 0, 0, 0);
    }
  }
  rl::allow_dependent_grids();
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    Vec<T> sum;
    add_squares<T, kAdd>(xv[k], rv[kAdd ? k : 0], sum, sum_sq);
    if constexpr (kAdd) {
      if (live && i < n_vec) res_v[i] = *reinterpret_cast<const uint4*>(&sum);
    }
  }
  const float scale = inv_rms(row_sum(sum_sq, partials), hidden, eps);
  if (!live) return;  // past the last barrier
  uint4* out_v = reinterpret_cast<uint4*>(out + row * out_stride);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n_vec) {
      // The weight (read by every row: __ldg keeps it in the read-only cache). rms_norm reads its early
      // vector in place, fused_add_rms_norm through a copy: the code each was measured as (bf16 schedules differ).
      Vec<T> copy;
      if constexpr (kAdd && kWeightEarly) copy = wv[k];
      if constexpr (kAdd && !kWeightEarly) *reinterpret_cast<uint4*>(&copy) = __ldg(w_v + i);
      const Vec<T>& w = kAdd ? copy : wv[kAdd ? 0 : k];
      const Vec<T> y = normalised<T, kAdd>(xv[k], rv[kAdd ? k : 0], w, scale);
      out_v[i] = *reinterpret_cast<const uint4*>(&y);
    }
  }
}

// Few rows (see the file comment): row blockIdx.x, kThreads threads across it, kVecs 16-byte vectors each.
// dst is out (rms_norm) or residual (kAdd: read, then written with the rounded total, and out is x).
// The same arithmetic in the same order per thread as rms_norm_vec_kernel; the sum of squares meets over
// kThreads / 32 warps. kStreamOut: out is stored with the streaming hint (evict first; see the launch).
template <typename T, int kThreads, int kVecs, bool kAdd, bool kStreamOut>
__global__ void __launch_bounds__(kThreads)
    rms_norm_row_kernel(row_in<T, kAdd> x, const T* __restrict__ weight, T* __restrict__ dst, int x_stride,
                        int dst_stride, int hidden, float eps) {
  constexpr int kN = Vec<T>::kN;
  constexpr int kWarps = kThreads / 32;
  __shared__ float partials[kWarps];
  rl::wait_for_prior_grids();
  const int64_t row = blockIdx.x;
  const int n_vec = hidden / kN;
  const uint4* x_v = reinterpret_cast<const uint4*>(x + row * x_stride);
  const uint4* w_v = reinterpret_cast<const uint4*>(weight);
  uint4* d_v = reinterpret_cast<uint4*>(dst + row * dst_stride);
  Vec<T> xv[kVecs];
  Vec<T> rv[kAdd ? kVecs : 1];
  Vec<T> wv[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {  // every load in flight before any is used
    const int i = static_cast<int>(threadIdx.x) + k * kThreads;
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
      const int i = static_cast<int>(threadIdx.x) + k * kThreads;
      if (i < n_vec) d_v[i] = *reinterpret_cast<const uint4*>(&sum);
    }
  }
  const float scale = inv_rms(cta_sum<kThreads>(sum_sq, partials), hidden, eps);
  uint4* out_v;
  if constexpr (kAdd) {
    out_v = reinterpret_cast<uint4*>(x + row * x_stride);
  } else {
    out_v = d_v;
  }
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * kThreads;
    if (i < n_vec) {
      const Vec<T> y = normalised<T, kAdd>(xv[k], rv[kAdd ? k : 0], wv[k], scale);
      if constexpr (kStreamOut) {
        __stcs(out_v + i, *reinterpret_cast<const uint4*>(&y));
      } else {
        out_v[i] = *reinterpret_cast<const uint4*>(&y);
      }
    }
  }
}

// One 16-byte vector read with cache hints: kept for a second read (evict_last) or at its last use (evict_first),
// in L1 and, from sm_80, in L2 through an access policy (as Inductor's reductions load): where L1 cannot hold the
// rows between the two reads, L2 keeps them. Llama-3-70B rows (hidden 8192) at T = 1024 measured 13.0 us with the
// L2 policies against 14.4 with the L1 hints alone, flushed L2 (launch_variants_llama3-70b_rms_norm_reload_l2.log).
// volatile: the compiler must not fold the second read of x into registers held across the barrier.
__device__ __forceinline__ uint4 load_keep(const uint4* p) {
  uint4 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(policy));
#else
  asm volatile("ld.global.L1::evict_last.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
#endif
  return r;
}
__device__ __forceinline__ uint4 load_last(const uint4* p) {
  uint4 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(policy));
#else
  asm volatile("ld.global.L1::evict_first.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
#endif
  return r;
}

// Wide rms_norm rows past one wave (see the file comment): row blockIdx.x, kThreads threads of kVecs vectors.
// x is read for the sum of squares only, then read again (from L1) with the weight for the output.
template <typename T, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads, 2048 / kThreads)
    rms_norm_reload_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out, int x_stride,
                           int out_stride, int hidden, float eps) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float partials[kWarps];
  rl::wait_for_prior_grids();
  const int64_t row = blockIdx.x;
  const int n_vec = hidden / Vec<T>::kN;
  const uint4* x_v = reinterpret_cast<const uint4*>(x + row * x_stride);
  const uint4* w_v = reinterpret_cast<const uint4*>(weight);
  uint4* out_v = reinterpret_cast<uint4*>(out + row * out_stride);
  Vec<T> xv[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {  // every load in flight before any is used
    const int i = static_cast<int>(threadIdx.x) + k * kThreads;
    *reinterpret_cast<uint4*>(&xv[k]) = i < n_vec ? load_keep(x_v + i) : make_uint4(0, 0, 0, 0);
  }
  rl::allow_dependent_grids();
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    Vec<T> unused;
    add_squares<T, false>(xv[k], xv[k], unused, sum_sq);
  }
  const float scale = inv_rms(cta_sum<kThreads>(sum_sq, partials), hidden, eps);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * kThreads;
    if (i < n_vec) {
      Vec<T> v, w;
      *reinterpret_cast<uint4*>(&v) = load_last(x_v + i);
      *reinterpret_cast<uint4*>(&w) = __ldg(w_v + i);
      const Vec<T> y = normalised<T, false>(v, v, w, scale);
      out_v[i] = *reinterpret_cast<const uint4*>(&y);
    }
  }
}

// Any hidden size and alignment: two passes with scalar accesses (see the file comment).
template <typename T, bool kAdd>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_generic_kernel(row_ptr<T, kAdd> out, row_ptr<const T, kAdd> x, T* residual,
                            const T* __restrict__ weight, int64_t out_stride, int64_t x_stride, int64_t res_stride,
                            int64_t rows, int hidden, float eps) {
  __shared__ float partials[kMaxWarps];
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < rows;
  const T* x_row = x + row * x_stride;
  T* res_row = residual + row * res_stride;
  float sum_sq = 0.0f;
  if (live) {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
      float t = to_float(x_row[i]);
      if constexpr (kAdd) t += to_float(res_row[i]);
      sum_sq += t * t;
    }
  }
  const float scale = inv_rms(row_sum(sum_sq, partials), hidden, eps);
  if (!live) return;
  T* out_row = out + row * out_stride;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float t = to_float(x_row[i]);
    if constexpr (kAdd) {
      t += to_float(res_row[i]);
      res_row[i] = from_float<T>(t);
    }
    out_row[i] = from_float<T>(t * scale * to_float(weight[i]));
  }
}

}  // namespace rms_norm_detail
#endif  // RL_DEVICE

#if RL_HOST
#include <algorithm>
#include <cstdint>

namespace rms_norm_detail {

// The kernels the launch below starts, declared (the device pass defines them).
template <typename T, int kVecs, bool kAdd>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_vec_kernel(row_ptr<T, kAdd> out, row_ptr<const T, kAdd> x, T* residual, const T* __restrict__ weight,
                        int64_t out_stride, int64_t x_stride, int64_t res_stride, int64_t rows, int hidden, float eps);
template <typename T, bool kAdd>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_generic_kernel(row_ptr<T, kAdd> out, row_ptr<const T, kAdd> x, T* residual,
                            const T* __restrict__ weight, int64_t out_stride, int64_t x_stride, int64_t res_stride,
                            int64_t rows, int hidden, float eps);
template <typename T, int kThreads, int kVecs, bool kAdd, bool kStreamOut>
__global__ void __launch_bounds__(kThreads)
    rms_norm_row_kernel(row_in<T, kAdd> x, const T* __restrict__ weight, T* __restrict__ dst, int x_stride,
                        int dst_stride, int hidden, float eps);

template <typename T, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads, 2048 / kThreads)
    rms_norm_reload_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out, int x_stride,
                           int out_stride, int hidden, float eps);

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kVecBytes == 0; }

inline unsigned round_up_warp(int64_t threads) { return static_cast<unsigned>(rl::cdiv(threads, 32) * 32); }

// Rows of one block: enough that a block holds at least 128 threads when a row needs fewer.
inline unsigned rows_per_block(unsigned threads_per_row) { return std::max(1u, 128u / threads_per_row); }

// Row strides in elements (rl::row_stride). esize: bytes per element (the host pass sees the half types only
// as incomplete declarations).
struct RowStrides {
  int64_t out, x, residual;
};

// Declared variants (rms_norm.cu's search space; tune pins one per GPU kind): 0 keeps the rules below.
// RL_ROW_VECS: 1, 2 or 4 vectors a thread on the row path, in the narrowest CTA of 128, 256 or 512 threads
// that holds the row. RL_ROW_STREAM: 1 also stores rms_norm's output streaming at decode sizes, as
// fused_add_rms_norm does.
#ifndef RL_ROW_VECS
#define RL_ROW_VECS 0
#endif
#ifndef RL_ROW_STREAM
#define RL_ROW_STREAM 0
#endif

// The row path's launch (see launch_rms_norm): CTA width and vectors a thread by the row's vector count.
template <typename T, bool kAdd, bool kStreamOut>
void launch_row(int64_t n_vec, dim3 grid, row_in<T, kAdd> xa, const T* weight, T* dst, int x_s, int d_s, int h,
                float e) {
#if RL_ROW_VECS > 0
  constexpr int kV = RL_ROW_VECS;
  if (n_vec <= 128 * kV) {
    rl::launch_dependent(rms_norm_row_kernel<T, 128, kV, kAdd, kStreamOut>, grid, dim3(128), 0, xa, weight, dst,
                         x_s, d_s, h, e);
    return;
  }
  if (n_vec <= 256 * kV) {
    rl::launch_dependent(rms_norm_row_kernel<T, 256, kV, kAdd, kStreamOut>, grid, dim3(256), 0, xa, weight, dst,
                         x_s, d_s, h, e);
    return;
  }
  if (n_vec <= 512 * kV) {
    rl::launch_dependent(rms_norm_row_kernel<T, 512, kV, kAdd, kStreamOut>, grid, dim3(512), 0, xa, weight, dst,
                         x_s, d_s, h, e);
    return;
  }
#endif
  if (n_vec <= 128) {
    rl::launch_dependent(rms_norm_row_kernel<T, 128, 1, kAdd, kStreamOut>, grid, dim3(128), 0, xa, weight, dst, x_s,
                         d_s, h, e);
  } else if (n_vec <= 256) {
    rl::launch_dependent(rms_norm_row_kernel<T, 128, 2, kAdd, kStreamOut>, grid, dim3(128), 0, xa, weight, dst, x_s,
                         d_s, h, e);
  } else if (n_vec <= 512) {
    rl::launch_dependent(rms_norm_row_kernel<T, 256, 2, kAdd, kStreamOut>, grid, dim3(256), 0, xa, weight, dst, x_s,
                         d_s, h, e);
  } else if (n_vec <= 1024) {
    rl::launch_dependent(rms_norm_row_kernel<T, 512, 2, kAdd, kStreamOut>, grid, dim3(512), 0, xa, weight, dst, x_s,
                         d_s, h, e);
  } else {
    rl::launch_dependent(rms_norm_row_kernel<T, 512, 4, kAdd, kStreamOut>, grid, dim3(512), 0, xa, weight, dst, x_s,
                         d_s, h, e);
  }
}

// kAdd = false (rms_norm): residual is null and s.residual unused; out and x must not overlap.
template <bool kAdd, typename T>
void launch_rms_norm(T* out, const T* x, T* residual, const T* weight, RowStrides s, int64_t rows, int64_t hidden,
                     int64_t esize, double eps) {
  const int64_t kN = kVecBytes / esize;
  const float e = static_cast<float>(eps);
  const int h = static_cast<int>(hidden);
  const int64_t n_vec = hidden / kN;
  const bool rows_aligned = hidden % kN == 0 && s.out % kN == 0 && s.x % kN == 0 && (!kAdd || s.residual % kN == 0);
  const bool vec = rows_aligned && aligned16(out) && aligned16(x) && aligned16(weight) &&
                   (!kAdd || aligned16(residual)) && n_vec <= 4 * kMaxThreads;
  const bool fits32 = s.x <= INT32_MAX && (kAdd ? s.residual : s.out) <= INT32_MAX;
  const int64_t wave = rl::resident_threads();
  const unsigned row_threads = n_vec <= 256 ? 128 : n_vec <= 512 ? 256 : 512;
  const bool row_any_t = n_vec <= 512 || kAdd;  // else one wave at most (the file comment)
  if (vec && fits32 && (!kAdd || (out == x && s.out == s.x)) && n_vec >= 128 && rows <= INT32_MAX &&
      (row_any_t || rows * row_threads <= wave)) {
    // One row per CTA (the row path of the file comment).
    T* dst = kAdd ? residual : out;
    const auto xa = [&]() -> row_in<T, kAdd> {  // fused_add_rms_norm: x is out (checked above)
      if constexpr (kAdd) {
        return out;
      } else {
        return x;
      }
    }();
    const int x_s = static_cast<int>(s.x), d_s = static_cast<int>(kAdd ? s.residual : s.out);
    const dim3 grid(static_cast<unsigned>(rows));
    if ((kAdd || RL_ROW_STREAM) && rows <= rl::sm_count()) {  // decode sizes: the output stored streaming
      launch_row<T, kAdd, kAdd>(n_vec, grid, xa, weight, dst, x_s, d_s, h, e);
    } else {
      launch_row<T, kAdd, false>(n_vec, grid, xa, weight, dst, x_s, d_s, h, e);
    }
    return;
  }
  // rms_norm rows of 513-1024 vectors past the row path's wave: the reload path of the file comment, within one
  // wave of 256-thread CTAs at 256 threads of four vectors, past four waves of 512-thread CTAs at 512 of two.
  const bool reload_rows = vec && !kAdd && fits32 && n_vec > 512 && n_vec <= 1024 && rows <= INT32_MAX;
  if (reload_rows && rows * 256 <= wave) {
    rl::launch_dependent(rms_norm_reload_kernel<T, 256, 4>, dim3(static_cast<unsigned>(rows)), dim3(256), 0, x,
                         weight, out, static_cast<int>(s.x), static_cast<int>(s.out), h, e);
    return;
  }
  if (reload_rows && rows * 512 > 4 * wave) {
    rl::launch_dependent(rms_norm_reload_kernel<T, 512, 2>, dim3(static_cast<unsigned>(rows)), dim3(512), 0, x,
                         weight, out, static_cast<int>(s.x), static_cast<int>(s.out), h, e);
    return;
  }
  if (vec) {
    // About 256 threads per row of the benchmark width, each with 1, 2 or 4 vectors in flight.
    const int vecs = n_vec <= 256 ? 1 : n_vec <= 512 ? 2 : 4;
    const unsigned tpr = round_up_warp(rl::cdiv(n_vec, vecs));
    const unsigned rpb = rows_per_block(tpr);
    const dim3 grid(static_cast<unsigned>(rl::cdiv(rows, rpb)));
    const dim3 block(tpr, rpb);
    if (vecs == 1) {
      rl::launch_dependent(rms_norm_vec_kernel<T, 1, kAdd>, grid, block, 0, out, x, residual, weight, s.out, s.x,
                           s.residual, rows, h, e);
    } else if (vecs == 2) {
      rl::launch_dependent(rms_norm_vec_kernel<T, 2, kAdd>, grid, block, 0, out, x, residual, weight, s.out, s.x,
                           s.residual, rows, h, e);
    } else {
      rl::launch_dependent(rms_norm_vec_kernel<T, 4, kAdd>, grid, block, 0, out, x, residual, weight, s.out, s.x,
                           s.residual, rows, h, e);
    }
    return;
  }
  const unsigned tpr = std::min<unsigned>(kMaxThreads, round_up_warp(std::min<int64_t>(hidden, kMaxThreads)));
  const unsigned rpb = rows_per_block(tpr);
  rl::launch_dependent(rms_norm_generic_kernel<T, kAdd>, dim3(static_cast<unsigned>(rl::cdiv(rows, rpb))),
                       dim3(tpr, rpb), 0, out, x, residual, weight, s.out, s.x, s.residual, rows, h, e);
}

// Shape and dtype checks both launchers share: weight is [hidden] of x's dtype. Returns hidden.
inline int64_t check_weight(const char* op, const rl::Tensor& x, const rl::Tensor& weight) {
  RL_CHECK(x.dim() >= 1, op, ": x must have a hidden dimension, got ", x.describe());
  const int64_t hidden = x.size(-1);
  RL_CHECK(weight.dim() == 1 && weight.size(0) == hidden, op, ": weight must be [", hidden,
           "] (x's last dim), got ", weight.shape_str());  // the native row's words
  RL_CHECK(weight.dtype() == x.dtype(), op, ": weight must have x's dtype, got ", weight.describe(), " vs ",
           x.describe());
  RL_CHECK(hidden <= INT32_MAX, op, ": hidden size ", hidden, " is past 2^31 - 1");
  return hidden;
}

}  // namespace rms_norm_detail
#endif  // RL_HOST
