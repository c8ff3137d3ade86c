// rapid_llm tune: {"THREADS": [128, 256, 512], "VEC_BYTES": [8, 16], "STREAM": [0, 1]}
// rms_norm with its launch shape left open: one row per block of THREADS threads, VEC_BYTES a load where
// the hidden size and the pointers allow it (else one element), the output stored streaming when STREAM.
#include "common/rapid_llm.cuh"

#ifndef THREADS
#define THREADS 256
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
  if (STREAM && sizeof(P) <= 16) {
    using W = typename Word<sizeof(P)>::type;
    __stcs(reinterpret_cast<W*>(dst), *reinterpret_cast<const W*>(&v));
  } else {
    *dst = v;
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(THREADS)
    rms_norm_tuned_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                          int64_t rows, int hidden, float eps) {
  __shared__ float partials[THREADS / 32];
  const int64_t row = blockIdx.x;
  const int n_pack = hidden / V;
  const Pack<T, V>* xp = reinterpret_cast<const Pack<T, V>*>(x) + row * n_pack;
  const Pack<T, V>* wp = reinterpret_cast<const Pack<T, V>*>(weight);
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < n_pack; i += THREADS) {
    const Pack<T, V> p = xp[i];
#pragma unroll
    for (int j = 0; j < V; ++j) sum_sq += static_cast<float>(p.v[j]) * static_cast<float>(p.v[j]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  if ((threadIdx.x & 31) == 0) partials[threadIdx.x >> 5] = sum_sq;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < THREADS / 32; ++w) total += partials[w];
  const float scale = rsqrtf(total / static_cast<float>(hidden) + eps);
  Pack<T, V>* op = reinterpret_cast<Pack<T, V>*>(out) + row * n_pack;
  for (int i = threadIdx.x; i < n_pack; i += THREADS) {
    const Pack<T, V> p = xp[i], w = wp[i];
    Pack<T, V> y;
#pragma unroll
    for (int j = 0; j < V; ++j) y.v[j] = static_cast<T>(static_cast<float>(p.v[j]) * scale * static_cast<float>(w.v[j]));
    store(op + i, y);
  }
}
#endif

#if RL_HOST
#include <cstdint>
#include <type_traits>

template <typename T, int V>
__global__ void __launch_bounds__(THREADS)
    rms_norm_tuned_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                          int64_t rows, int hidden, float eps);

inline bool aligned(const void* p, int64_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

void rms_norm_tuned(rl::Tensor out, rl::Tensor x, rl::Tensor weight, double eps) {
  rl::check_cuda("rms_norm", {out, x, weight});
  rl::check_same("rms_norm", out, x);
  RL_CHECK(x.dim() >= 1, "rms_norm: x must have a hidden dimension, got ", x.describe());
  const int64_t hidden = x.size(-1);
  RL_CHECK(weight.dim() == 1 && weight.size(0) == hidden, "rms_norm: weight must be [", hidden,
           "] (x's last dim), got ", weight.describe());
  RL_CHECK(weight.dtype() == x.dtype(), "rms_norm: weight must have x's dtype, got ", weight.describe());
  RL_CHECK(hidden <= INT32_MAX, "rms_norm: hidden size ", hidden, " is past 2^31 - 1");
  const int64_t n = x.numel();
  if (n == 0) return;
  rl::check_contiguous("rms_norm", {out, x, weight});
  const int64_t rows = n / hidden, es = x.element_size();
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T* xp = x.data<T>();
    const T* w = weight.data<T>();
    auto go = [&](auto width) {
      rl::launch(rms_norm_tuned_kernel<T, decltype(width)::value>, dim3(static_cast<unsigned>(rows)), dim3(THREADS),
                 0, o, xp, w, rows, static_cast<int>(hidden), static_cast<float>(eps));
    };
    const int64_t per = VEC_BYTES / es;
    const bool vec = per > 1 && hidden % per == 0 && aligned(o, VEC_BYTES) && aligned(xp, VEC_BYTES) &&
                     aligned(w, VEC_BYTES);
    if (!vec) go(std::integral_constant<int, 1>{});
    else if (es == 2) go(std::integral_constant<int, VEC_BYTES / 2>{});
    else go(std::integral_constant<int, VEC_BYTES / 4>{});
  });
}
RL_EXPORT(rms_norm_tuned, "rms_norm_tuned(out, x, weight, eps): rms_norm with its launch shape left to tune")
#endif
