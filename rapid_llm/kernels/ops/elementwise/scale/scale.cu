// rapid_llm row: {"name": "jit/scale", "op": "scale", "fn": "scale_vec", "dtypes": ["bf16", "fp16", "fp32"], "golden": {"verified": true, "max_abs_diff": 0.0, "baseline": "native/scale", "per_dtype": [["bf16", 0.0], ["fp16", 0.0], ["fp32", 0.0]]}, "graph_safe": true, "description": "promoted from scale_vec.cu, launcher scale_vec()"}
// scale_vec: out = input * factor, fp16 / bf16 / fp32.
// Each thread moves 16 bytes per load and per store (128-bit accesses), keeps
// several of them in flight, and walks the tensor in a grid-stride loop, so
// one full wave of blocks covers any size.
#include "common/rapid_llm.cuh"

constexpr int kVecBytes = 16;  // one 128-bit load or store
constexpr int kUnroll = 4;     // 128-bit loads in flight per thread

#if RL_DEVICE
// kN elements of T that travel as one 128-bit access.
template <typename T>
struct alignas(kVecBytes) Vec {
  static constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  T v[kN];
};

template <typename T>
__device__ __forceinline__ T scale_one(T x, float factor) {
  return static_cast<T>(static_cast<float>(x) * factor);  // fp32 math, one rounding
}

// Both pointers 16-byte aligned: the body in 128-bit steps, then a scalar tail.
// Each thread keeps kUnroll independent 128-bit loads in flight per step of the
// grid-stride loop (one load at a time leaves HBM idle between round trips), and
// the loads and stores are streaming (__ldcs/__stcs): the data is touched once,
// so it should not push anything else out of L2.
template <typename T>
__global__ void scale_vec_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  static_assert(kVecBytes % sizeof(T) == 0, "the element size must divide 16 bytes");
  static_assert(sizeof(Vec<T>) == sizeof(uint4), "a Vec must travel as one 128-bit access");
  constexpr int kN = Vec<T>::kN;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t n_vec = n / kN;
  const uint4* __restrict__ in_v = reinterpret_cast<const uint4*>(in);
  uint4* __restrict__ out_v = reinterpret_cast<uint4*>(out);
  for (int64_t base = tid; base < n_vec; base += stride * kUnroll) {
    Vec<T> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // issue every load before using any
      const int64_t i = base + u * stride;
      if (i < n_vec) *reinterpret_cast<uint4*>(&x[u]) = __ldcs(in_v + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * stride;
      if (i < n_vec) {
#pragma unroll
        for (int k = 0; k < kN; ++k) {
          x[u].v[k] = scale_one(x[u].v[k], factor);
        }
        __stcs(out_v + i, *reinterpret_cast<const uint4*>(&x[u]));
      }
    }
  }
  for (int64_t i = n_vec * kN + tid; i < n; i += stride) {  // fewer than kN elements left
    out[i] = scale_one(in[i], factor);
  }
}

// Any alignment (a view that starts mid-vector): one element per step.
template <typename T>
__global__ void scale_scalar_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = scale_one(in[i], factor);
  }
}
#endif

#if RL_HOST
#include <algorithm>

// The kernels this launcher starts, declared (the device pass defines them).
template <typename T>
__global__ void scale_vec_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);
template <typename T>
__global__ void scale_scalar_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kVecBytes == 0; }

void scale_vec(rl::Tensor out, rl::Tensor input, double factor) {
  // Step 1: validate.
  rl::check_same("scale", out, input);
  rl::check_cuda("scale", {out, input});  // device last: the shape facts hold anywhere, so a CPU build checks them
  rl::check_contiguous("scale", {out, input});

  // Step 2: extract. An empty tensor launches nothing.
  const int64_t n = input.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t max_blocks = static_cast<int64_t>(rl::sm_count()) * 4;

  // Step 3: launch on torch's current stream; rl::launch checks every launch.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in_p = input.data<T>();
    T* out_p = out.data<T>();
    const bool vec = aligned16(in_p) && aligned16(out_p);
    const int64_t per_thread = vec ? kVecBytes / input.element_size() : 1;  // elements per thread-step
    const int64_t blocks = std::min<int64_t>(rl::cdiv(rl::cdiv(n, per_thread), kThreads), max_blocks);
    const float f = static_cast<float>(factor);
    if (vec) {
      rl::launch(scale_vec_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out_p, in_p, f, n);
    } else {
      rl::launch(scale_scalar_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out_p, in_p, f, n);
    }
  });
}
RL_EXPORT(scale_vec, "out = input * factor, 128-bit accesses (out-first launcher)")
#endif
