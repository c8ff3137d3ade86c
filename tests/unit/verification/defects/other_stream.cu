// DEFECT other_stream: the kernel is launched on the legacy default stream (cudaStreamLegacy), not on
// torch's current stream. It is right when the current stream is the default one, and wrong when the
// inputs are produced on another current stream that the legacy stream does not wait for: torch's
// streams are non-blocking (verify: "other_stream", often "unwritten" too). Fixed twin: fixed.cu.
//
// rl::launch takes no stream: it always uses torch's current stream (rapid_llm.cuh). This source
// therefore launches the way rl::launch does inside (rapid_llm_runtime.cpp: find the kernel's handle in
// the module's kernel table, call the binding's launch), with another stream. A fast-path source
// cannot pick a stream any other way; that is the point of the rule.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_other_stream(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_other_stream_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(static_cast<float>(in[i]) * factor);
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_other_stream_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

// The module's kernel table (rl_kernel_count, rl_kernel_symbols, rl_kernel_handles, rl_runtime_slot) is declared
// in rapid_llm_abi.h; the fast path's builder writes it, the binding fills the handles at load.

namespace {
// cudaStreamLegacy / CU_STREAM_LEGACY: the legacy default stream, whatever stream torch has current.
void* const kLegacyStream = reinterpret_cast<void*>(0x1);

template <typename... P>
void launch_on_legacy_stream(void (*kernel)(P...), unsigned grid, unsigned block, P... params) {
  void* argv[] = {static_cast<void*>(&params)...};
  int i = 0;
  while (i < rl_kernel_count && rl_kernel_symbols[i] != reinterpret_cast<const void*>(kernel)) ++i;
  RL_CHECK(i < rl_kernel_count, "scale_other_stream: the kernel is not in this module's table");
  RL_CHECK(rl_runtime_slot != nullptr && rl_kernel_handles[i] != nullptr,
           "scale_other_stream: the kernels of this module are not loaded (no CUDA driver in this process)");
  const unsigned g[3] = {grid, 1, 1}, b[3] = {block, 1, 1};
  const int result = rl_runtime_slot->launch(rl_kernel_handles[i], g, b, 0, kLegacyStream, argv, -1, 0);  // DEFECT
  RL_CHECK(result == 0, "scale_other_stream: CUDA error launching: ", rl_runtime_slot->error_string(result));
}
}  // namespace

void scale_other_stream(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_other_stream", {out, input});
  rl::check_contiguous("scale_other_stream", {out, input});
  rl::check_same("scale_other_stream", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_other_stream", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out_p = out.data<T>();
    const T* in_p = input.data<T>();
    launch_on_legacy_stream(scale_other_stream_kernel<T>, static_cast<unsigned>(blocks), kThreads, out_p, in_p,
                            static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_other_stream, "DEFECT: out = input * factor, launched on the legacy default stream")
#endif
