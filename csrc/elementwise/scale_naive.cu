// scale_naive: out = input * factor, fp16 / bf16 / fp32 (the seed tutorial's kernel).
// One element per thread: simple and correct, and far below the copy roofline.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

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

// Validate HERE, not in Python: a check costs nothing next to a kernel launch.
void scale_naive(at::Tensor& out, const at::Tensor& input, double factor) {
  TORCH_CHECK(input.is_cuda() && out.is_cuda(), "scale_naive: CUDA tensors only");
  TORCH_CHECK(input.device() == out.device(), "scale_naive: input and out on different devices");
  TORCH_CHECK(input.is_contiguous() && out.is_contiguous(), "scale_naive: contiguous tensors only");
  TORCH_CHECK(out.sizes() == input.sizes() && out.scalar_type() == input.scalar_type(),
              "scale_naive: out must match input shape/dtype");

  const int64_t n = input.numel();
  if (n == 0) return;  // nothing to do, and a 0-block grid is a launch error
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  const at::cuda::OptionalCUDAGuard guard(at::device_of(input));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "scale_naive", [&] {
    scale_kernel<scalar_t><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), static_cast<float>(factor), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale_naive", &scale_naive, "out = input * factor (out-first launcher)");
}
