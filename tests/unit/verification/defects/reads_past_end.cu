// DEFECT out_of_bounds_read: the last element is computed from in[n], one past the end of the input (an
// off-by-one in the index of a tail), so out[n - 1] is whatever lies after the input. verify names it
// "out_of_bounds_read" (the result changes with the bytes after argument 1), not only a wrong value;
// compute-sanitizer memcheck sees it when the next byte is not allocated. Fixed twin: fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_reads_past_end(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;

#if RL_DEVICE
template <typename T>
__global__ void scale_reads_past_end_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const int64_t source = i == n - 1 ? n : i;  // DEFECT: meant i
    out[i] = static_cast<T>(static_cast<float>(in[source]) * factor);
  }
}
#endif

#if RL_HOST
template <typename T>
__global__ void scale_reads_past_end_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_reads_past_end(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_reads_past_end", {out, input});
  rl::check_contiguous("scale_reads_past_end", {out, input});
  rl::check_same("scale_reads_past_end", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_reads_past_end", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_reads_past_end_kernel<T>, static_cast<unsigned>(rl::cdiv(n, kThreads)), kThreads, 0,
               out.data<T>(), input.data<T>(), static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_reads_past_end, "DEFECT: out = input * factor, the last element read from one past the input")
#endif
