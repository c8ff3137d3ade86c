// scaled_fp8_quant as a cell: x [..., H] (bf16 / fp16 / fp32) into fp8 e4m3 `out` with fp32 `scales`,
// one for the tensor ([1]) or G groups per token ([..., G]). Dynamic scales are max(amax / 448, 1 / 229376),
// amax over |x| with NaN left out; static ones are read. out = fp8(clamp(x / scale, -448, 448)), NaN kept.
// One block per group, two passes over it (the amax, then the values): the plainest kernel that keeps
// the contract, not a fast one (a per-tensor call is a single block).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;

#if RL_DEVICE
#include <cuda_fp8.h>

template <typename T>
__global__ void fp8_quant_cell_kernel(uint8_t* __restrict__ out, const T* __restrict__ x,
                                      float* __restrict__ scales, int64_t size, bool is_static) {
  __shared__ float warp_max[kThreads / 32];
  __shared__ float group_scale;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * size;
  if (is_static) {
    if (threadIdx.x == 0) group_scale = scales[blockIdx.x];
  } else {
    float amax = 0.0f;  // fmaxf drops a NaN operand: a NaN element is left out of the amax
    for (int64_t i = threadIdx.x; i < size; i += kThreads) amax = fmaxf(amax, fabsf(static_cast<float>(x[base + i])));
    for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
      const float scale = fmaxf(amax / 448.0f, 1.0f / 229376.0f);  // IEEE division: the scales compare exactly
      scales[blockIdx.x] = scale;
      group_scale = scale;
    }
  }
  __syncthreads();
  const float scale = group_scale;
  for (int64_t i = threadIdx.x; i < size; i += kThreads) {
    float q = static_cast<float>(x[base + i]) / scale;
    q = q > 448.0f ? 448.0f : (q < -448.0f ? -448.0f : q);  // comparisons, not fminf: a NaN stays NaN
    out[base + i] = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
  }
}
#endif

#if RL_HOST
template <typename T>
__global__ void fp8_quant_cell_kernel(uint8_t* __restrict__ out, const T* __restrict__ x,
                                      float* __restrict__ scales, int64_t size, bool is_static);

void fp8_quant_cell(rl::Tensor out, rl::Tensor x, rl::Tensor scales, bool is_static) {
  // Step 1: validate, in the op's own words (its floor says the same for the same bad input).
  const char* op = "scaled_fp8_quant";
  RL_CHECK(out.dtype() == RL_FP8_E4M3, op, ": out must be float8_e4m3fn, got ", out.describe());
  RL_CHECK(scales.dtype() == RL_FP32, op, ": scales must be float32, got ", scales.describe());
  RL_CHECK(out.same_shape(x), op, ": out must have x's shape, got ", out.describe(), " for x ", x.describe());
  RL_CHECK(x.dim() >= 1 && x.size(-1) >= 1, op, ": x must be [..., H] with H >= 1, got ", x.shape_str());
  const int64_t hidden = x.size(-1);
  int64_t groups = 1, size = x.numel();  // scales [1]: the whole tensor is one group
  if (!(scales.dim() == 1 && scales.size(0) == 1 && x.dim() > 1)) {
    bool ok = scales.dim() == x.dim() && scales.size(-1) >= 1 && hidden % scales.size(-1) == 0;
    for (int64_t d = 0; ok && d + 1 < x.dim(); ++d) ok = scales.size(d) == x.size(d);
    RL_CHECK(ok, op, ": scales must be [1] (per tensor) or [..., G] with x's leading dims and G dividing H = ", hidden,
             " (G groups per token), got ", scales.shape_str(), " for x ", x.shape_str());
    groups = scales.numel();
    size = hidden / scales.size(-1);
  }
  rl::check_cuda(op, {out, x, scales});
  rl::check_contiguous(op, {out, x, scales});
  RL_CHECK(groups < (int64_t{1} << 31), op, ": ", groups, " groups is past the grid's 2^31 - 1 blocks");

  // Step 2: extract. No group launches nothing (an empty per-tensor call still writes its floor scale).
  if (groups == 0) return;

  // Step 3: launch on torch's current stream; rl::launch checks the launch.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(fp8_quant_cell_kernel<T>, static_cast<unsigned>(groups), kThreads, 0,
               static_cast<uint8_t*>(out.data_ptr()), x.data<T>(), scales.data<float>(), size, is_static);
  });
}
RL_EXPORT(fp8_quant_cell, "scaled_fp8_quant(out, x, scales, static) as a cell: one block per group")
#endif
