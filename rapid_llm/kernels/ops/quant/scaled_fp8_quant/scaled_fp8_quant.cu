// rapid_llm row: {"name": "jit/scaled_fp8_quant", "op": "scaled_fp8_quant", "fn": "scaled_fp8_quant", "dtypes": ["bf16", "fp16", "fp32"], "golden": {"verified": true, "max_abs_diff": 32.0, "baseline": "native/scaled_fp8_quant"}, "graph_safe": true, "description": "small groups (1x128): a few lanes of a warp per group, amax by shuffles; tokens: one block per row in registers; per tensor: atomic amax, then quantise", "out": "none"}
// scaled_fp8_quant(out, x, scales, static): x [..., H] (bf16 / fp16 / fp32) into out (float8_e4m3fn), fp32
// scales per tensor ([1]) or G groups per token ([..., G]: G = 1 per token, H / 128 DeepSeek's 1x128).
// The contract is the native floor's (ops/quant/scaled_fp8_quant/native.py): dynamic scale
// max(amax / 448, 1 / 229376), amax over |x| with NaN left out (fmaxf drops a NaN), the division IEEE
// rounded; values x * (1 / scale) cast with saturation to +-448 and round to nearest even (NaN stays NaN).
//
// Memory bound: bf16 in, fp8 out is 3 bytes an element, read once and written once. Three layouts:
//  - Small groups (up to 64 vectors of 16 bytes: 1x128 bf16 is 16): L lanes of a warp per group, each with
//    kP vectors in registers; amax by xor shuffles inside the L lanes; no shared memory, no barrier.
//  - Groups up to 2048 vectors (a token of hidden 16384 bf16): one block per group, the group in registers
//    (kP vectors a thread, every load issued before any is used), amax by shuffles and one barrier.
//  - Anything else (odd sizes, unaligned pointers, wider groups, per tensor): per tensor and single wide
//    groups by three short launches (clear, atomic amax, quantise, then the scale is written); other groups
//    two passes over the group with scalar accesses, the second from L2.
#include "common/rapid_llm.cuh"

namespace fp8q {

constexpr int kVecBytes = 16;
constexpr int kBlock = 256;                 // threads of the warp-group and per-tensor kernels
constexpr int kMaxThreads = 512;            // of the block-per-group kernels
constexpr int kMaxWarpVecs = 64;            // the widest group a warp handles
constexpr int kMaxRowVecs = 8 * kBlock;     // the widest group kept in registers by one block

}  // namespace fp8q

#if RL_DEVICE
#include <cuda_fp8.h>

namespace fp8q {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// The dynamic scale: IEEE division (nvcc and NVRTC default to -prec-div=true) and vLLM's floor.
__device__ __forceinline__ float scale_of(float amax) { return fmaxf(amax / 448.0f, 1.0f / (448.0f * 512.0f)); }

__device__ __forceinline__ uint8_t quantise(float v, float inv) {
  return __nv_cvt_float_to_fp8(v * inv, __NV_SATFINITE, __NV_E4M3);
}

template <typename T>
struct alignas(kVecBytes) Vec {
  static constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  T v[kN];
};

// kN fp8 bytes: one 8-byte (half types) or 4-byte (fp32) store.
template <int kN>
struct alignas(kN) Bytes {
  __nv_fp8x2_storage_t pair[kN / 2];
};

template <typename T>
__device__ __forceinline__ float vec_amax(const Vec<T>& v, float amax) {
#pragma unroll
  for (int j = 0; j < Vec<T>::kN; ++j) amax = fmaxf(amax, fabsf(to_float(v.v[j])));
  return amax;
}

template <typename T>
__device__ __forceinline__ void store_vec(uint8_t* out, const Vec<T>& v, float inv) {
  constexpr int kN = Vec<T>::kN;
  Bytes<kN> b;
#pragma unroll
  for (int j = 0; j < kN; j += 2) {
    b.pair[j / 2] = __nv_cvt_float2_to_fp8x2(make_float2(to_float(v.v[j]) * inv, to_float(v.v[j + 1]) * inv),
                                             __NV_SATFINITE, __NV_E4M3);
  }
  *reinterpret_cast<Bytes<kN>*>(out) = b;
}

// The largest value over the block; every thread gets it. red: 32 floats of shared memory.
__device__ __forceinline__ float block_max(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) m = fmaxf(m, red[w]);
  return m;
}

// kL lanes per group, kP vectors each (a group is kL * kP vectors). Groups never straddle a warp.
template <typename T, int kL, int kP, bool kStatic>
__global__ void __launch_bounds__(kBlock)
    groups_warp_kernel(uint8_t* __restrict__ out, const T* __restrict__ x, float* __restrict__ scales,
                       int64_t n_groups) {
  constexpr int kN = Vec<T>::kN;
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  const int64_t g = t / kL;
  const int lane = static_cast<int>(t % kL);
  const bool live = g < n_groups;
  const int64_t base = g * (kL * kP * kN);
  Vec<T> v[kP];
#pragma unroll
  for (int k = 0; k < kP; ++k) {
    const int64_t at = base + static_cast<int64_t>(k * kL + lane) * kN;
    *reinterpret_cast<uint4*>(&v[k]) = live ? *reinterpret_cast<const uint4*>(x + at) : make_uint4(0, 0, 0, 0);
  }
  float scale;
  if constexpr (kStatic) {
    scale = live ? scales[g] : 1.0f;
  } else {
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kP; ++k) amax = vec_amax(v[k], amax);
#pragma unroll
    for (int o = kL / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    scale = scale_of(amax);
    if (live && lane == 0) scales[g] = scale;
  }
  if (!live) return;
  const float inv = 1.0f / scale;
#pragma unroll
  for (int k = 0; k < kP; ++k) store_vec(out + base + static_cast<int64_t>(k * kL + lane) * kN, v[k], inv);
}

// One block per group of n_vec vectors, kP per thread, in registers.
template <typename T, int kP, bool kStatic>
__global__ void __launch_bounds__(kMaxThreads)
    groups_block_kernel(uint8_t* __restrict__ out, const T* __restrict__ x, float* __restrict__ scales,
                        int64_t size) {
  constexpr int kN = Vec<T>::kN;
  __shared__ float red[32];
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  const int64_t g = blockIdx.x;
  const int n_vec = static_cast<int>(size / kN);
  const uint4* xg = reinterpret_cast<const uint4*>(x + g * size);
  Vec<T> v[kP];
#pragma unroll
  for (int k = 0; k < kP; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    *reinterpret_cast<uint4*>(&v[k]) = i < n_vec ? xg[i] : make_uint4(0, 0, 0, 0);
  }
  float scale;
  if constexpr (kStatic) {
    scale = scales[g];
  } else {
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kP; ++k) amax = vec_amax(v[k], amax);
    scale = scale_of(block_max(amax, red));
    if (threadIdx.x == 0) scales[g] = scale;
  }
  const float inv = 1.0f / scale;
  uint8_t* og = out + g * size;
#pragma unroll
  for (int k = 0; k < kP; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n_vec) store_vec(og + static_cast<int64_t>(i) * kN, v[k], inv);
  }
}

// Any group size and alignment: pass 1 the amax, pass 2 (from L2) the values.
template <typename T, bool kStatic>
__global__ void __launch_bounds__(kMaxThreads)
    groups_generic_kernel(uint8_t* __restrict__ out, const T* __restrict__ x, float* __restrict__ scales,
                          int64_t size) {
  __shared__ float red[32];
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  const int64_t g = blockIdx.x;
  const T* xg = x + g * size;
  float scale;
  if constexpr (kStatic) {
    scale = scales[g];
  } else {
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) amax = fmaxf(amax, fabsf(to_float(xg[i])));
    scale = scale_of(block_max(amax, red));
    if (threadIdx.x == 0) scales[g] = scale;
  }
  const float inv = 1.0f / scale;
  uint8_t* og = out + g * size;
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) og[i] = quantise(to_float(xg[i]), inv);
}

// Per tensor, dynamic: clear the slot, fold each block's amax into it (as bits: for floats >= 0 the unsigned
// order is the float order), quantise with the amax read back, then turn the slot into the scale.
__global__ void clear_kernel(float* __restrict__ slot) {
  rl::wait_for_prior_grids();
  *slot = 0.0f;
}

__global__ void finish_scale_kernel(float* __restrict__ slot) {
  rl::wait_for_prior_grids();
  *slot = scale_of(*slot);
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kBlock) tensor_amax_kernel(const T* __restrict__ x, float* __restrict__ slot,
                                                             int64_t n) {
  constexpr int kN = Vec<T>::kN;
  __shared__ float red[32];
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kBlock;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  float amax = 0.0f;
  int64_t done = 0;
  if constexpr (kVec) {
    const int64_t n_vec = n / kN;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (int64_t i = first; i < n_vec; i += stride) {
      Vec<T> v;
      *reinterpret_cast<uint4*>(&v) = xv[i];
      amax = vec_amax(v, amax);
    }
    done = n_vec * kN;
  }
  for (int64_t i = done + first; i < n; i += stride) amax = fmaxf(amax, fabsf(to_float(x[i])));
  amax = block_max(amax, red);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(slot), __float_as_uint(amax));
}

// kFromAmax: the slot holds the amax (the scale is derived here); else it holds a static scale.
// stride is the grid's thread count, given rather than read from gridDim: every parameter a thread needs then
// sits in one 64-byte constant line (the norms' decode kernels showed immediate-constant misses on an H200
// costing a memory round trip each before the first load, where a few tokens are all latency).
template <typename T, bool kVec, bool kFromAmax>
__global__ void __launch_bounds__(kBlock) tensor_quant_kernel(uint8_t* __restrict__ out, const T* __restrict__ x,
                                                              const float* __restrict__ slot, int64_t n,
                                                              int64_t stride) {
  constexpr int kN = Vec<T>::kN;
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  const int64_t n_vec = kVec ? n / kN : 0;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  // The thread's first vector is loaded before the scale is read: 1 / scale is a division with a slow path,
  // and its branch would hold every later load until the scale arrives (two memory round trips at few tokens).
  Vec<T> v;
  if (kVec && first < n_vec) *reinterpret_cast<uint4*>(&v) = xv[first];
  const float scale = kFromAmax ? scale_of(*slot) : *slot;
  const float inv = 1.0f / scale;
  int64_t done = 0;
  if constexpr (kVec) {
    for (int64_t i = first; i < n_vec; i += stride) {
      if (i != first) *reinterpret_cast<uint4*>(&v) = xv[i];
      store_vec(out + i * kN, v, inv);
    }
    done = n_vec * kN;
  }
  for (int64_t i = done + first; i < n; i += stride) out[i] = quantise(to_float(x[i]), inv);
}

}  // namespace fp8q
#endif  // RL_DEVICE

#if RL_HOST
#include <algorithm>
#include <cstdint>

namespace fp8q {

template <typename T, int kL, int kP, bool kStatic>
__global__ void __launch_bounds__(kBlock)
    groups_warp_kernel(uint8_t* __restrict__ out, const T* __restrict__ x, float* __restrict__ scales,
                       int64_t n_groups);
template <typename T, int kP, bool kStatic>
__global__ void __launch_bounds__(kMaxThreads)
    groups_block_kernel(uint8_t* __restrict__ out, const T* __restrict__ x, float* __restrict__ scales,
                        int64_t size);
template <typename T, bool kStatic>
__global__ void __launch_bounds__(kMaxThreads)
    groups_generic_kernel(uint8_t* __restrict__ out, const T* __restrict__ x, float* __restrict__ scales,
                          int64_t size);
__global__ void clear_kernel(float* __restrict__ slot);
__global__ void finish_scale_kernel(float* __restrict__ slot);
template <typename T, bool kVec>
__global__ void __launch_bounds__(kBlock) tensor_amax_kernel(const T* __restrict__ x, float* __restrict__ slot,
                                                             int64_t n);
template <typename T, bool kVec, bool kFromAmax>
__global__ void __launch_bounds__(kBlock) tensor_quant_kernel(uint8_t* __restrict__ out, const T* __restrict__ x,
                                                              const float* __restrict__ slot, int64_t n,
                                                              int64_t stride);

inline bool aligned(const void* p, int64_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

inline unsigned round_up_warp(int64_t threads) { return static_cast<unsigned>(rl::cdiv(threads, 32) * 32); }

template <typename T, int kL, int kP, bool kStatic>
void launch_warp(uint8_t* out, const T* x, float* scales, int64_t n_groups) {
  rl::launch_dependent(groups_warp_kernel<T, kL, kP, kStatic>,
                       dim3(static_cast<unsigned>(rl::cdiv(n_groups * kL, kBlock))), dim3(kBlock), 0, out, x, scales,
                       n_groups);
}

// kL lanes of kP vectors each for a group of n_vec vectors (a power of two up to kMaxWarpVecs).
template <typename T, bool kStatic>
void launch_warp_groups(uint8_t* out, const T* x, float* scales, int64_t n_groups, int64_t n_vec) {
  switch (n_vec) {  // two vectors a lane where there are two, for loads in flight
    case 1: return launch_warp<T, 1, 1, kStatic>(out, x, scales, n_groups);
    case 2: return launch_warp<T, 1, 2, kStatic>(out, x, scales, n_groups);
    case 4: return launch_warp<T, 2, 2, kStatic>(out, x, scales, n_groups);
    case 8: return launch_warp<T, 4, 2, kStatic>(out, x, scales, n_groups);
    case 16: return launch_warp<T, 8, 2, kStatic>(out, x, scales, n_groups);
    case 32: return launch_warp<T, 16, 2, kStatic>(out, x, scales, n_groups);
    default: return launch_warp<T, 32, 2, kStatic>(out, x, scales, n_groups);
  }
}

template <typename T, bool kStatic>
void launch_block_groups(uint8_t* out, const T* x, float* scales, int64_t n_groups, int64_t size, int64_t n_vec) {
  // Groups enough to fill the GPU at kBlock threads each: 128 threads with more vectors each. On an H200
  // (per token, bf16, H = 4096, cold L2) that measured 52.9 against 56.6 us at T = 16384, 18.1 against 18.6
  // at 4096.
  const int64_t per = n_groups * kBlock > rl::resident_threads() ? 128 : kBlock;
  const int vecs = n_vec <= per ? 1 : n_vec <= 2 * per ? 2 : n_vec <= 4 * per ? 4 : 8;
  const dim3 grid(static_cast<unsigned>(n_groups));
  const dim3 block(round_up_warp(rl::cdiv(n_vec, vecs)));
  if (vecs == 1) rl::launch_dependent(groups_block_kernel<T, 1, kStatic>, grid, block, 0, out, x, scales, size);
  else if (vecs == 2) rl::launch_dependent(groups_block_kernel<T, 2, kStatic>, grid, block, 0, out, x, scales, size);
  else if (vecs == 4) rl::launch_dependent(groups_block_kernel<T, 4, kStatic>, grid, block, 0, out, x, scales, size);
  else rl::launch_dependent(groups_block_kernel<T, 8, kStatic>, grid, block, 0, out, x, scales, size);
}

template <typename T>
void launch_tensor(uint8_t* out, const T* x, float* slot, int64_t n, int64_t esize, bool is_static) {
  const int64_t kN = kVecBytes / esize;
  const bool vec = aligned(x, kVecBytes) && aligned(out, kN);
  const int64_t work = vec ? n / kN + n % kN : n;
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(rl::cdiv(work, kBlock),
                                                                                          8LL * rl::sm_count())));
  const int64_t stride = static_cast<int64_t>(blocks) * kBlock;  // tensor_quant_kernel's grid, in threads
  if (is_static) {
    if (n == 0) return;
    auto quant = vec ? tensor_quant_kernel<T, true, false> : tensor_quant_kernel<T, false, false>;
    rl::launch_dependent(quant, dim3(blocks), dim3(kBlock), 0, out, x, slot, n, stride);
    return;
  }
  rl::launch_dependent(clear_kernel, dim3(1), dim3(1), 0, slot);
  if (n > 0) {
    auto amax = vec ? tensor_amax_kernel<T, true> : tensor_amax_kernel<T, false>;
    auto quant = vec ? tensor_quant_kernel<T, true, true> : tensor_quant_kernel<T, false, true>;
    rl::launch_dependent(amax, dim3(blocks), dim3(kBlock), 0, x, slot, n);
    rl::launch_dependent(quant, dim3(blocks), dim3(kBlock), 0, out, x, slot, n, stride);
  }
  rl::launch_dependent(finish_scale_kernel, dim3(1), dim3(1), 0, slot);
}

template <typename T>
void launch_quant(uint8_t* out, const T* x, float* scales, int64_t n_groups, int64_t size, int64_t esize,
                  bool is_static) {
  const int64_t kN = kVecBytes / esize;
  const int64_t n_vec = size / kN;
  const bool vec = size % kN == 0 && aligned(x, kVecBytes) && aligned(out, kN);
  // One group: spread it over the GPU when it is wide, unaligned or static (no amax to reduce, so nothing
  // gains from keeping it in one block).
  if (n_groups == 1 && (is_static || size == 0 || !vec || n_vec > kMaxRowVecs)) {
    return launch_tensor<T>(out, x, scales, size, esize, is_static);
  }
  if (n_groups == 0 || size == 0) return;
  const bool pow2 = (n_vec & (n_vec - 1)) == 0;
  if (vec && pow2 && n_vec <= kMaxWarpVecs) {
    if (is_static) launch_warp_groups<T, true>(out, x, scales, n_groups, n_vec);
    else launch_warp_groups<T, false>(out, x, scales, n_groups, n_vec);
  } else if (vec && n_vec <= kMaxRowVecs) {
    if (is_static) launch_block_groups<T, true>(out, x, scales, n_groups, size, n_vec);
    else launch_block_groups<T, false>(out, x, scales, n_groups, size, n_vec);
  } else {
    const dim3 block(std::min<unsigned>(kMaxThreads, round_up_warp(size)));
    auto kernel = is_static ? groups_generic_kernel<T, true> : groups_generic_kernel<T, false>;
    rl::launch_dependent(kernel, dim3(static_cast<unsigned>(n_groups)), block, 0, out, x, scales, size);
  }
}

}  // namespace fp8q

void scaled_fp8_quant(rl::Tensor out, rl::Tensor x, rl::Tensor scales, bool is_static) {
  // Step 1: validate. The groups follow from the scales' shape: [1] one for the tensor, [..., G] G per token.
  const char* op = "scaled_fp8_quant";
  RL_CHECK(out.dtype() == RL_FP8_E4M3, op, ": out must be float8_e4m3fn, got ", out.describe());
  RL_CHECK(scales.dtype() == RL_FP32, op, ": scales must be float32, got ", scales.describe());
  RL_CHECK(out.same_shape(x), op, ": out must have x's shape, got ", out.describe(), " for x ", x.describe());
  RL_CHECK(x.dim() >= 1 && x.size(-1) >= 1, op, ": x must be [..., H] with H >= 1, got ", x.shape_str());
  rl::check_contiguous(op, {out, x, scales});
  const int64_t hidden = x.size(-1);
  int64_t n_groups = 1, size = x.numel();
  if (!(scales.dim() == 1 && scales.size(0) == 1 && x.dim() > 1)) {
    bool ok = scales.dim() == x.dim() && scales.size(-1) >= 1 && hidden % scales.size(-1) == 0;
    for (int64_t d = 0; ok && d + 1 < x.dim(); ++d) ok = scales.size(d) == x.size(d);
    RL_CHECK(ok, op, ": scales must be [1] (per tensor) or [..., G] with x's leading dims and G dividing H = ", hidden,
             " (G groups per token), got ", scales.shape_str(), " for x ", x.shape_str());
    n_groups = scales.numel();
    size = hidden / scales.size(-1);
  }
  rl::check_cuda(op, {out, x, scales});  // device last: a CPU build checks the words above
  RL_CHECK(n_groups <= 0x7fffffffLL, op, ": ", n_groups, " groups is past the grid's 2^31 - 1 blocks");

  // Step 2: extract; Step 3: launch on torch's current stream (rl::launch_dependent checks each launch).
  uint8_t* o = static_cast<uint8_t*>(out.data_ptr());
  float* s = scales.data<float>();
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fp8q::launch_quant<T>(o, x.data<T>(), s, n_groups, size, x.element_size(), is_static);
  });
}
RL_EXPORT(scaled_fp8_quant, "scaled_fp8_quant(out, x, scales, static): x into fp8 e4m3 out with fp32 scales per "
                            "tensor ([1]) or G groups per token ([..., G]), written unless static")
#endif  // RL_HOST
