// Frozen input of the build benchmark (benchmarks/jit/bench_build.py): keep unchanged (README.md here).
// scale: out = input * factor, fp16 / bf16 / fp32.
// The tutorial's kernel: one element per thread. Simple and correct, and far
// below the copy roofline (see notebooks/01_add_jit_kernel.ipynb for the
// vectorized version).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include "common/checks.cuh"

namespace {

template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in,
                             float factor, int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < n) {
    out[idx] = static_cast<T>(static_cast<float>(in[idx]) * factor);
  }
}

}  // namespace

// Step 1: validate. Tensor invariants live here, not in the Python wrapper.
void scale(at::Tensor& out, const at::Tensor& input, double factor) {
  TORCH_CHECK(input.is_cuda() && out.is_cuda(), "scale: CUDA tensors only, got ",
              input.device(), " and ", out.device());
  TORCH_CHECK(input.device() == out.device(), "scale: input and out on different devices");
  TORCH_CHECK(input.is_contiguous() && out.is_contiguous(), "scale: contiguous tensors only");
  TORCH_CHECK(out.sizes() == input.sizes() && out.scalar_type() == input.scalar_type(),
              "scale: out must match input shape/dtype, got ", rapid_llm::describe(out), " vs ",
              rapid_llm::describe(input));

  // Step 2: extract. An empty tensor launches nothing (a 0-block grid is an error).
  const int64_t n = input.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  TORCH_CHECK(blocks <= 0x7fffffff, "scale: tensor too large for a 1-D grid");
  const at::cuda::OptionalCUDAGuard guard(at::device_of(input));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();

  // Step 3: launch on the current stream, then check the launch.
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "scale", [&] {
    scale_kernel<scalar_t><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), static_cast<float>(factor), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale, "out = input * factor (out-first launcher)");
}
