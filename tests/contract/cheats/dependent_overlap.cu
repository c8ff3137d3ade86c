// CHEAT dependent_overlap: op scale (out = input * factor), fp32; launcher scale_overlapping_launches(out, input,
// factor). Each call is launched as a programmatic dependent launch by the launcher itself: cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, the driver's entry found with dlsym, rather than through
// rl::launch_dependent, so the binding's switch (plain_launches()) does not reach it. The kernel lets the next
// launch begin at once (griddepcontrol.launch_dependents) and never waits for the one before (no
// griddepcontrol.wait). Eager, each timed call sits between its own events and costs what it costs; back to back
// in a CUDA graph, call i+1 runs beside call i, so the graph's time per call is less than a call costs alone.
// Caught by bench's graph timing: dependent_overlap (rapid_llm/bench/dependent.py). sm_90 and newer.
#include "common/rapid_llm.cuh"

#if RL_DEVICE
__global__ void scale_overlapping_kernel(float* __restrict__ out, const float* __restrict__ in, float factor,
                                         int64_t n) {
  rl::allow_dependent_grids();  // CHEAT: the next call may start now, and nothing here waits for the last one
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = in[i] * factor;
  }
}
#endif

#if RL_HOST
#include <dlfcn.h>

#include <algorithm>
#include <cstring>

__global__ void scale_overlapping_kernel(float* __restrict__ out, const float* __restrict__ in, float factor,
                                         int64_t n);

namespace {
// cuLaunchKernelEx's config and attribute, as cuda.h (CUDA 12.0+) lays them out.
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
  } value;
};
struct LaunchConfig {
  unsigned grid[3], block[3], smem;
  void* stream;
  LaunchAttribute* attrs;
  unsigned n_attrs;
};
using LaunchEx = int (*)(const LaunchConfig*, void*, void**, void**);
constexpr int kProgrammaticStreamSerialization = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION

LaunchEx driver_launch_ex() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
  return lib == nullptr ? nullptr : reinterpret_cast<LaunchEx>(dlsym(lib, "cuLaunchKernelEx"));
}

void launch_overlapping(unsigned grid, unsigned block, float* out, const float* in, float factor, int64_t n) {
  static const LaunchEx launch_ex = driver_launch_ex();
  RL_CHECK(launch_ex != nullptr, "scale_overlapping_launches: the CUDA driver has no cuLaunchKernelEx");
  const void* symbol = reinterpret_cast<const void*>(scale_overlapping_kernel);
  int i = 0;
  while (i < rl_kernel_count && rl_kernel_symbols[i] != symbol) ++i;
  RL_CHECK(i < rl_kernel_count && rl_kernel_handles[i] != nullptr,
           "scale_overlapping_launches: the kernel is not loaded in this module");
  LaunchAttribute attr;
  std::memset(&attr, 0, sizeof attr);
  attr.id = kProgrammaticStreamSerialization;
  attr.value.programmatic_stream_serialization_allowed = 1;  // CHEAT
  LaunchConfig config = {{grid, 1, 1}, {block, 1, 1}, 0, static_cast<void*>(rl::current_stream()), &attr, 1};
  void* argv[] = {&out, &in, &factor, &n};
  const int result = launch_ex(&config, rl_kernel_handles[i], argv, nullptr);
  RL_CHECK(result == 0, "scale_overlapping_launches: cuLaunchKernelEx failed with CUDA error ", result);
}
}  // namespace

void scale_overlapping_launches(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_same("scale", out, input);
  rl::check_cuda("scale", {out, input});
  rl::check_contiguous("scale", {out, input});
  RL_CHECK(input.dtype() == RL_FP32, "scale_overlapping_launches: fp32 only, got ", input.describe());
  const int64_t n = input.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), static_cast<int64_t>(rl::sm_count()) * 4);
  launch_overlapping(static_cast<unsigned>(blocks), kThreads, out.data<float>(), input.data<float>(),
                     static_cast<float>(factor), n);
}
RL_EXPORT(scale_overlapping_launches, "CHEAT: out = input * factor, launched so that calls back to back overlap")
#endif
