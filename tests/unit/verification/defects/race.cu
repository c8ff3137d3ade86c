// DEFECT race: each thread puts its element into shared memory and then reads its neighbour's slot
// with no barrier in between (no __syncthreads, not even __syncwarp). The neighbour is in the same
// warp, which usually runs in lockstep, so the result is right on (nearly) every run and verify passes;
// only compute-sanitizer --tool racecheck reports it (a read-after-write hazard on `tile`).
// Fixed twin: race_fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_race(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;  // the block size; one shared slot per thread
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_race_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  __shared__ float tile[kThreads];
  volatile float* slots = tile;  // volatile: the compiler keeps the store before the load, as written
  const int t = threadIdx.x;
  const int partner = t ^ 1;  // the neighbour in the same warp: thread t writes element base + partner
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads; base < n;
       base += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t i = base + t;
    slots[t] = i < n ? static_cast<float>(in[i]) : 0.0f;
    // DEFECT: a barrier belongs here; the partner's slot may not be written yet
    const int64_t j = base + partner;
    if (j < n) out[j] = static_cast<T>(slots[partner] * factor);
    // DEFECT: and here, before the next tile overwrites a slot the partner may still read
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_race_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_race(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_race", {out, input});
  rl::check_contiguous("scale_race", {out, input});
  rl::check_same("scale_race", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_race", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_race_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(), input.data<T>(),
               static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_race, "DEFECT: out = input * factor through shared memory, without a barrier")
#endif
