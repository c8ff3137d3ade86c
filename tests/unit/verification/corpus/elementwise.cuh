// The corpus's kernels: one element per thread-step of a grid-stride loop, the op's math in fp32 on the
// upcast inputs (Op::apply, defined by each source), rounded once to T; out-first launchers that check
// their tensors and launch on torch's current stream.
#pragma once

constexpr int kThreads = 256;
constexpr int64_t kBlocksPerSm = 8;  // a grid-stride loop covers any size beyond one wave of these

#if RL_DEVICE
template <typename Op, typename T>
__global__ void unary_kernel(T* __restrict__ out, const T* __restrict__ x, float param, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(Op::apply(static_cast<float>(x[i]), param));
  }
}

template <typename Op, typename T>
__global__ void binary_kernel(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(Op::apply(static_cast<float>(a[i]), static_cast<float>(b[i])));
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename Op, typename T>
__global__ void unary_kernel(T* __restrict__ out, const T* __restrict__ x, float param, int64_t n);
template <typename Op, typename T>
__global__ void binary_kernel(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, int64_t n);

inline unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>(rl::cdiv(n, kThreads), rl::sm_count() * kBlocksPerSm));
}

// out = Op(x; param), fp32 / fp16 / bf16.
template <typename Op>
void launch_unary(const char* name, rl::Tensor out, rl::Tensor x, double param) {
  // Step 1: validate (the device last: the shape facts hold anywhere, so a CPU build checks them).
  rl::check_same(name, out, x);
  rl::check_cuda(name, {out, x});
  rl::check_contiguous(name, {out, x});
  // Step 2: extract. An empty tensor launches nothing.
  const int64_t n = x.numel();
  if (n == 0) return;
  // Step 3: launch.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(unary_kernel<Op, T>, grid_for(n), kThreads, 0, out.data<T>(), x.data<T>(), static_cast<float>(param),
               n);
  });
}

// out = Op(a, b), fp32 / fp16 / bf16.
template <typename Op>
void launch_binary(const char* name, rl::Tensor out, rl::Tensor a, rl::Tensor b) {
  rl::check_same(name, out, a);
  rl::check_same(name, a, b);
  rl::check_cuda(name, {out, a, b});
  rl::check_contiguous(name, {out, a, b});
  const int64_t n = a.numel();
  if (n == 0) return;
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(a, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(binary_kernel<Op, T>, grid_for(n), kThreads, 0, out.data<T>(), a.data<T>(), b.data<T>(), n);
  });
}
#endif
