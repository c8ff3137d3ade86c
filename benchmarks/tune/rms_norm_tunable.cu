// rapid_llm tune: {"THREADS": [32, 64, 128, 256, 512, 1024], "ROWS": [1, 2, 4, 8], "VEC_BYTES": [4, 8, 16], "STREAM": [0, 1], "where": "THREADS * ROWS <= 1024"}
// rms_norm with its launch shape left open: out = x / sqrt(mean(x^2) + eps) * weight over the last dim,
// fp16 / bf16 / fp32, the sum of squares in fp32 and the product rounded once (the op's numerics).
//
// One token row per block row (threadIdx.y), THREADS threads across it, ROWS rows a block; each thread
// reads VEC_BYTES at a time where the hidden size and the pointers allow it (else one element), sums
// its squares, the block reduces each row, and a second pass reads the row again (from L1/L2) to scale
// and store it, with the streaming hint when STREAM is 1. The line above is the space tune searches
// (108 candidates); the defaults below are the untuned row.
#include "common/rapid_llm.cuh"

#ifndef THREADS
#define THREADS 256
#endif
#ifndef ROWS
#define ROWS 1
#endif
#ifndef VEC_BYTES
#define VEC_BYTES 16
#endif
#ifndef STREAM
#define STREAM 0
#endif

#if RL_DEVICE
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <int B> struct Word;
template <> struct Word<2> { using type = unsigned short; };
template <> struct Word<4> { using type = unsigned int; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<16> { using type = uint4; };
template <> struct Word<32> { using type = uint4; };  // never launched (fp32 packs of 8); compiles only

template <typename P>
__device__ __forceinline__ void store(P* dst, const P& v) {
  using W = typename Word<sizeof(P)>::type;
  if (STREAM && sizeof(P) <= 16) {
    __stcs(reinterpret_cast<W*>(dst), *reinterpret_cast<const W*>(&v));
  } else {
    *dst = v;
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(THREADS * ROWS)
    rms_norm_tunable_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                            int64_t rows, int hidden, float eps) {
  __shared__ float partials[ROWS][THREADS / 32];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * ROWS + threadIdx.y;
  const bool live = row < rows;  // a block's last rows may be past the end; they still meet the barrier
  const int n_pack = hidden / V;
  const Pack<T, V>* xp = reinterpret_cast<const Pack<T, V>*>(x) + (live ? row * n_pack : 0);
  const Pack<T, V>* wp = reinterpret_cast<const Pack<T, V>*>(weight);
  float sum_sq = 0.0f;
  if (live) {
    for (int i = threadIdx.x; i < n_pack; i += THREADS) {
      const Pack<T, V> p = xp[i];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float t = static_cast<float>(p.v[j]);
        sum_sq += t * t;
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  if ((threadIdx.x & 31) == 0) partials[threadIdx.y][threadIdx.x >> 5] = sum_sq;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < THREADS / 32; ++w) total += partials[threadIdx.y][w];
  const float scale = rsqrtf(total / static_cast<float>(hidden) + eps);
  if (!live) return;  // past the only barrier
  Pack<T, V>* op = reinterpret_cast<Pack<T, V>*>(out) + row * n_pack;
  for (int i = threadIdx.x; i < n_pack; i += THREADS) {
    const Pack<T, V> p = xp[i];
    const Pack<T, V> w = wp[i];
    Pack<T, V> y;
#pragma unroll
    for (int j = 0; j < V; ++j) {  // weight times the fp32 normalised value, rounded once
      y.v[j] = static_cast<T>(static_cast<float>(p.v[j]) * scale * static_cast<float>(w.v[j]));
    }
    store(op + i, y);
  }
}
#endif

#if RL_HOST
#include <cstdint>
#include <type_traits>

template <typename T, int V>
__global__ void __launch_bounds__(THREADS * ROWS)
    rms_norm_tunable_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                            int64_t rows, int hidden, float eps);

inline bool aligned(const void* p, int64_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

void rms_norm_tunable(rl::Tensor out, rl::Tensor x, rl::Tensor weight, double eps) {
  static_assert(THREADS % 32 == 0 && THREADS * ROWS <= 1024, "THREADS: whole warps; THREADS * ROWS <= 1024");
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
  rl::check_contiguous("rms_norm", {out, x, weight});
  const int64_t rows = n / hidden;
  const int h = static_cast<int>(hidden);
  const float e = static_cast<float>(eps);
  const int64_t es = x.element_size();
  const dim3 grid(static_cast<unsigned>(rl::cdiv(rows, ROWS))), block(THREADS, ROWS);

  // Step 3: launch on torch's current stream; rl::launch checks every launch.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T* xp = x.data<T>();
    const T* w = weight.data<T>();
    auto go = [&](auto width) {
      constexpr int V = decltype(width)::value;
      rl::launch(rms_norm_tunable_kernel<T, V>, grid, block, 0, o, xp, w, rows, h, e);
    };
    const int64_t per = VEC_BYTES / es;  // elements a vector holds (1 where VEC_BYTES is one element)
    const bool vec = per > 1 && hidden % per == 0 && aligned(o, VEC_BYTES) && aligned(xp, VEC_BYTES) &&
                     aligned(w, VEC_BYTES);
    if (!vec) go(std::integral_constant<int, 1>{});
    else if (es == 2) go(std::integral_constant<int, VEC_BYTES / 2>{});
    else go(std::integral_constant<int, (VEC_BYTES / 4 > 0 ? VEC_BYTES / 4 : 1)>{});
  });
}
RL_EXPORT(rms_norm_tunable, "rms_norm_tunable(out, x, weight, eps): rms_norm with its launch shape left to tune")
#endif
