// rapid_llm row: {"name": "jit/rms_norm", "op": "rms_norm", "fn": "rms_norm", "dtypes": ["bf16", "fp16", "fp32"], "golden": {"verified": true, "max_abs_diff": 0.015625, "baseline": "native/rms_norm", "per_dtype": [["bf16", 0.015625], ["fp16", 0.00390625], ["fp32", 1.9073486328125e-06]]}, "graph_safe": true, "description": "promoted from rms_norm_cell.cu, launcher rms_norm()", "layouts": ["contiguous", "rows"]}
// rms_norm: out = x / sqrt(mean(x^2) + eps) * weight over the last dim, fp16 / bf16 / fp32.
// Sum of squares in fp32; the normalised value times the weight in fp32, rounded once.
//
// One token row per block row (threadIdx.y), blockDim.x threads across the hidden dim.
// Hidden 4096 bf16 is 8 KiB a row, read once and written once: memory bound, so the
// row stays in registers as 16-byte vectors, with every load (the weight's too) in
// flight before any is used. Rows too wide for registers, a hidden size that is not a
// multiple of the vector, or an unaligned view take a two-pass scalar kernel instead.
//
// Since its promotion from notebook 06's cell: x and out are each addressed at their own
// row stride (in elements), so a slice x[:, :H] of a [T, 2H] buffer (vLLM's and
// FlashInfer's strided case) runs without a copy. The last dim must be contiguous and
// the leading dims one uniform stride; a row stride that keeps every row 16-byte aligned
// keeps the vector path, any other takes the scalar one.
#include "common/rapid_llm.cuh"

constexpr int kVecBytes = 16;     // one 128-bit load or store
constexpr int kMaxThreads = 512;  // per block
constexpr int kMaxWarps = kMaxThreads / 32;

#if RL_DEVICE
template <typename T>
struct alignas(kVecBytes) Vec {
  static constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  T v[kN];
};

// The sum of v over this thread's row of the block: shuffles within each warp, one
// partial per warp in shared memory, then every thread adds its row's partials.
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

// The row in registers: kVecs 16-byte vectors per thread (hidden and both row strides multiples of
// Vec<T>::kN, every pointer 16-byte aligned, so every row starts on a vector).
template <typename T, int kVecs>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_vec_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                        int64_t out_stride, int64_t x_stride, int64_t rows, int hidden, float eps) {
  constexpr int kN = Vec<T>::kN;
  __shared__ float partials[kMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < rows;  // a block's last rows may be past the end; they still meet the barrier
  const int n_vec = hidden / kN;
  const uint4* x_v = reinterpret_cast<const uint4*>(x + row * x_stride);  // strides keep rows 16-byte aligned
  const uint4* w_v = reinterpret_cast<const uint4*>(weight);
  Vec<T> xv[kVecs], wv[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {  // every load in flight before any is used
    const int i = threadIdx.x + k * blockDim.x;
    const bool in = live && i < n_vec;
    *reinterpret_cast<uint4*>(&xv[k]) = in ? x_v[i] : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(&wv[k]) = in ? __ldg(w_v + i) : make_uint4(0, 0, 0, 0);
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float t = static_cast<float>(xv[k].v[j]);
      sum_sq += t * t;
    }
  }
  const float scale = rsqrtf(row_sum(sum_sq, partials) / static_cast<float>(hidden) + eps);
  if (!live) return;  // past the only barrier
  uint4* out_v = reinterpret_cast<uint4*>(out + row * out_stride);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n_vec) {
      Vec<T> y;
#pragma unroll
      for (int j = 0; j < kN; ++j) {  // weight times the fp32 normalised value, rounded once
        y.v[j] = static_cast<T>(static_cast<float>(xv[k].v[j]) * scale * static_cast<float>(wv[k].v[j]));
      }
      out_v[i] = *reinterpret_cast<const uint4*>(&y);
    }
  }
}

// Any hidden size and alignment: the sum of squares in one pass, scale and store in a second.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_generic_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                            int64_t out_stride, int64_t x_stride, int64_t rows, int hidden, float eps) {
  __shared__ float partials[kMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < rows;
  const T* x_row = x + row * x_stride;
  float sum_sq = 0.0f;
  if (live) {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
      const float t = static_cast<float>(x_row[i]);
      sum_sq += t * t;
    }
  }
  const float scale = rsqrtf(row_sum(sum_sq, partials) / static_cast<float>(hidden) + eps);
  if (!live) return;
  T* out_row = out + row * out_stride;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    out_row[i] = static_cast<T>(static_cast<float>(x_row[i]) * scale * static_cast<float>(weight[i]));
  }
}
#endif

#if RL_HOST
#include <algorithm>
#include <cstdint>

template <typename T, int kVecs>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_vec_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                        int64_t out_stride, int64_t x_stride, int64_t rows, int hidden, float eps);
template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_generic_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                            int64_t out_stride, int64_t x_stride, int64_t rows, int hidden, float eps);

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kVecBytes == 0; }
inline unsigned round_up_warp(int64_t threads) { return static_cast<unsigned>(rl::cdiv(threads, 32) * 32); }


void rms_norm(rl::Tensor out, rl::Tensor x, rl::Tensor weight, double eps) {
  // Step 1: validate.
  rl::check_cuda("rms_norm", {out, x, weight});
  rl::check_same("rms_norm", out, x);
  RL_CHECK(x.dim() >= 1, "rms_norm: x must have a hidden dimension, got ", x.describe());
  const int64_t hidden = x.size(-1);
  RL_CHECK(weight.dim() == 1 && weight.size(0) == hidden, "rms_norm: weight must be [", hidden,
           "] (x's last dim), got ", weight.describe());
  RL_CHECK(weight.dtype() == x.dtype(), "rms_norm: weight must have x's dtype, got ", weight.describe(), " vs ",
           x.describe());
  RL_CHECK(hidden <= INT32_MAX, "rms_norm: hidden size ", hidden, " is past 2^31 - 1");

  // Step 2: extract. An empty tensor launches nothing.
  const int64_t n = x.numel();
  if (n == 0) return;
  rl::check_contiguous("rms_norm", {weight});
  const int64_t x_stride = rl::row_stride("rms_norm", "x", x);
  const int64_t out_stride = rl::row_stride("rms_norm", "out", out);
  const int64_t rows = n / hidden;
  const int h = static_cast<int>(hidden);
  const float e = static_cast<float>(eps);

  // Step 3: launch on torch's current stream; rl::launch checks every launch.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T* xp = x.data<T>();
    const T* w = weight.data<T>();
    const int64_t kN = kVecBytes / x.element_size();
    const int64_t n_vec = hidden / kN;
    const bool rows_aligned = hidden % kN == 0 && x_stride % kN == 0 && out_stride % kN == 0;
    if (rows_aligned && aligned16(o) && aligned16(xp) && aligned16(w) && n_vec <= 4 * kMaxThreads) {
      const int vecs = n_vec <= 256 ? 1 : n_vec <= 512 ? 2 : 4;         // ~256 threads a row at hidden 4096
      const unsigned tpr = round_up_warp(rl::cdiv(n_vec, vecs));        // threads per row
      const unsigned rpb = std::max(1u, 128u / tpr);                    // narrow rows share a block
      const dim3 grid(static_cast<unsigned>(rl::cdiv(rows, rpb))), block(tpr, rpb);
      if (vecs == 1) {
        rl::launch(rms_norm_vec_kernel<T, 1>, grid, block, 0, o, xp, w, out_stride, x_stride, rows, h, e);
      } else if (vecs == 2) {
        rl::launch(rms_norm_vec_kernel<T, 2>, grid, block, 0, o, xp, w, out_stride, x_stride, rows, h, e);
      } else {
        rl::launch(rms_norm_vec_kernel<T, 4>, grid, block, 0, o, xp, w, out_stride, x_stride, rows, h, e);
      }
    } else {
      const unsigned tpr = std::min<unsigned>(kMaxThreads, round_up_warp(std::min<int64_t>(hidden, kMaxThreads)));
      const unsigned rpb = std::max(1u, 128u / tpr);
      rl::launch(rms_norm_generic_kernel<T>, dim3(static_cast<unsigned>(rl::cdiv(rows, rpb))), dim3(tpr, rpb), 0,
                 o, xp, w, out_stride, x_stride, rows, h, e);
    }
  });
}
RL_EXPORT(rms_norm, "rms_norm(out, x, weight, eps): out = x / sqrt(mean(x^2) + eps) * weight over the last dim")
#endif
