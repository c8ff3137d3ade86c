// rapid_llm row: {"name": "jit/reshape_and_cache_flash", "op": "reshape_and_cache_flash", "fn": "reshape_and_cache_flash", "dtypes": ["bf16", "fp16", "fp32"], "golden": {"verified": true, "max_abs_diff": 0.0, "baseline": "native/reshape_and_cache_flash"}, "graph_safe": true, "description": "one block per token, threads over 16-byte runs of its key then value row (fp8: __nv_cvt_float_to_fp8 of x / scale, saturating); any strides", "out": "none", "layouts": ["contiguous", "strided"]}
// reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale): each token's
// key and value row [H, D] into the paged caches [num_blocks, block_size, H, D] at slot_mapping[t] (block
// slot / block_size, offset slot % block_size); slot -1 is padding, not written. The contract is the native
// floor's (ops/cache/reshape_and_cache_flash/native.py): a cache in key's dtype holds a copy, a
// float8_e4m3fn cache fp8(clamp(x / scale, +-448)) (IEEE division, then round to nearest even, saturating,
// NaN kept), with k_scale / v_scale (fp32, one element each) read on the device.
//
// Verified on an H100 (scatter mode, every dtype and the fp8 cache): every other element kept its bits.
//
// Memory bound and latency bound at decode sizes: a token's two rows are 2 * H * D elements (4 KiB of bf16
// at Llama-3-8B's 8 kv heads of 128). One block per token, each thread a 16-byte run of the row (8 bf16), the
// key's runs then the value's; a slot out of [0, num_slots) (padding, or a bad slot: checking would cost a
// host sync) leaves the token unwritten and never writes outside the caches. Where a row's runs are not
// 16-byte aligned (a head size that is not a multiple of the run, odd strides, an unaligned start) every
// element is copied on its own, at any strides.
#include "common/rapid_llm.cuh"

namespace kvc {

constexpr int kVecBytes = 16;  // one 128-bit load
constexpr int kMaxThreads = 256;

}  // namespace kvc

#if RL_DEVICE
#include <cuda_fp8.h>

namespace kvc {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// x / scale rounded to e4m3: IEEE division (nvcc and NVRTC default to -prec-div=true), saturating to +-448.
__device__ __forceinline__ uint8_t to_e4m3(float x, float scale) {
  return __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}

// kN elements of T as one 16-byte access, and the kN cache elements they become (T, or e4m3 bytes).
template <typename T>
struct alignas(kVecBytes) Run {
  static constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  T v[kN];
};
template <typename C, int kN>
struct alignas(kN * sizeof(C)) Out {
  C v[kN];
};

// One row [heads, head_size] from src into dst, the block's threads over its runs (kVector) or elements.
template <typename T, typename C, bool kFp8, bool kVector>
__device__ __forceinline__ void write_row(const T* __restrict__ src, int64_t src_h, int64_t src_d,
                                          C* __restrict__ dst, int64_t dst_h, int64_t dst_d, int heads,
                                          int head_size, float scale) {
  constexpr int kN = kVector ? Run<T>::kN : 1;
  const int runs = head_size / kN;
  const int64_t total = static_cast<int64_t>(heads) * runs;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    const int64_t h = i / runs;
    const int64_t e = (i % runs) * kN;
    const T* s = src + h * src_h + e * src_d;
    C* d = dst + h * dst_h + e * dst_d;
    if constexpr (kVector) {
      const Run<T> in = *reinterpret_cast<const Run<T>*>(s);
      Out<C, kN> out;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        if constexpr (kFp8) out.v[j] = to_e4m3(to_float(in.v[j]), scale);
        else out.v[j] = in.v[j];
      }
      *reinterpret_cast<Out<C, kN>*>(d) = out;
    } else {
      if constexpr (kFp8) *d = to_e4m3(to_float(*s), scale);
      else *d = *s;
    }
  }
}

// One block per token: its slot, then its key row and its value row.
template <typename T, typename C, bool kFp8, bool kVector>
__global__ void __launch_bounds__(kMaxThreads) reshape_and_cache_flash_kernel(
    const T* __restrict__ key, const T* __restrict__ value, C* __restrict__ key_cache, C* __restrict__ value_cache,
    const int64_t* __restrict__ slot_mapping, const float* __restrict__ k_scale, const float* __restrict__ v_scale,
    int64_t k_t, int64_t k_h, int64_t k_d, int64_t v_t, int64_t v_h, int64_t v_d, int64_t kc_b, int64_t kc_o,
    int64_t kc_h, int64_t kc_d, int64_t vc_b, int64_t vc_o, int64_t vc_h, int64_t vc_d, int heads, int head_size,
    int64_t block_size, int64_t num_slots) {
  rl::wait_for_prior_grids();
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  rl::allow_dependent_grids();
  if (slot < 0 || slot >= num_slots) return;  // padding (or a bad slot): nothing written
  const int64_t block = slot / block_size;
  const int64_t offset = slot - block * block_size;
  const float ks = kFp8 ? __ldg(k_scale) : 1.0f;
  const float vs = kFp8 ? __ldg(v_scale) : 1.0f;
  write_row<T, C, kFp8, kVector>(key + t * k_t, k_h, k_d, key_cache + block * kc_b + offset * kc_o, kc_h, kc_d,
                                 heads, head_size, ks);
  write_row<T, C, kFp8, kVector>(value + t * v_t, v_h, v_d, value_cache + block * vc_b + offset * vc_o, vc_h, vc_d,
                                 heads, head_size, vs);
}

}  // namespace kvc
#endif  // RL_DEVICE

#if RL_HOST
#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace kvc {

// The kernel this launcher starts, declared (the device pass defines it).
template <typename T, typename C, bool kFp8, bool kVector>
__global__ void __launch_bounds__(kMaxThreads) reshape_and_cache_flash_kernel(
    const T* __restrict__ key, const T* __restrict__ value, C* __restrict__ key_cache, C* __restrict__ value_cache,
    const int64_t* __restrict__ slot_mapping, const float* __restrict__ k_scale, const float* __restrict__ v_scale,
    int64_t k_t, int64_t k_h, int64_t k_d, int64_t v_t, int64_t v_h, int64_t v_d, int64_t kc_b, int64_t kc_o,
    int64_t kc_h, int64_t kc_d, int64_t vc_b, int64_t vc_o, int64_t vc_h, int64_t vc_d, int heads, int head_size,
    int64_t block_size, int64_t num_slots);

constexpr const char* kOp = "reshape_and_cache_flash";

// 16-byte runs along the head dim: element stride 1, every other stride a whole number of runs, the data
// aligned to one run (runs elements of the tensor's own type).
bool runs_ok(const rl::Tensor& t, int64_t run, std::initializer_list<int64_t> strides) {
  if (t.stride(-1) != 1 || reinterpret_cast<std::uintptr_t>(t.data_ptr()) % (run * t.element_size()) != 0) return false;
  for (int64_t s : strides)
    if (s % run != 0) return false;
  return true;
}

}  // namespace kvc

void reshape_and_cache_flash(rl::Tensor key, rl::Tensor value, rl::Tensor key_cache, rl::Tensor value_cache,
                             rl::Tensor slot_mapping, rl::Tensor k_scale, rl::Tensor v_scale) {
  using kvc::kOp;
  // Step 1: validate, in the floor's words (the op's checks, run before this launcher, say them first).
  RL_CHECK(key.dim() == 3, kOp, ": key must be [T, H, D], got ", key.describe());
  RL_CHECK(key.dtype() == RL_BF16 || key.dtype() == RL_FP16 || key.dtype() == RL_FP32, kOp,
           ": key must be bf16, fp16, fp32, got ", rl::dtype_name(key.dtype()));
  RL_CHECK(value.same_shape(key) && value.dtype() == key.dtype(), kOp, ": value must have key's shape and dtype, got ",
           value.describe(), " for key ", key.describe());
  RL_CHECK(key_cache.dim() == 4, kOp, ": key_cache must be [num_blocks, block_size, H, D], got ",
           key_cache.describe());
  const bool fp8 = key_cache.dtype() == RL_FP8_E4M3;
  RL_CHECK(key_cache.dtype() == key.dtype() || fp8, kOp, ": key_cache must be key's dtype or float8_e4m3fn, got ",
           key_cache.describe(), " for key ", key.describe());
  RL_CHECK(value_cache.same_shape(key_cache) && value_cache.dtype() == key_cache.dtype(), kOp,
           ": value_cache must have key_cache's shape and dtype, got ", value_cache.describe(), " for key_cache ",
           key_cache.describe());
  const int64_t tokens = key.size(0), heads = key.size(1), head_size = key.size(2);
  RL_CHECK(key_cache.size(2) == heads && key_cache.size(3) == head_size, kOp,
           ": key_cache's heads and head size must be key's [", heads, ", ", head_size, "], got ", key_cache.describe());
  RL_CHECK(key_cache.size(1) >= 1, kOp, ": key_cache's block_size must be >= 1, got ", key_cache.describe());
  RL_CHECK(slot_mapping.dtype() == RL_INT64 && slot_mapping.dim() == 1 && slot_mapping.size(0) == tokens, kOp,
           ": slot_mapping must be int64 [T] with T = ", tokens, " (key's tokens), got ", slot_mapping.describe());
  RL_CHECK(k_scale.dtype() == RL_FP32 && k_scale.numel() == 1, kOp,
           ": k_scale must be a float32 tensor of one element, got ", k_scale.describe());
  RL_CHECK(v_scale.dtype() == RL_FP32 && v_scale.numel() == 1, kOp,
           ": v_scale must be a float32 tensor of one element, got ", v_scale.describe());
  RL_CHECK(heads < (int64_t{1} << 30) && head_size < (int64_t{1} << 30), kOp, ": too many heads or too large a head (",
           key.describe(), ")");
  rl::check_cuda(kOp, {key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale});  // device last

  // Step 2: extract. No tokens, or nowhere to write, launches nothing.
  const int64_t block_size = key_cache.size(1);
  const int64_t num_slots = key_cache.size(0) * block_size;
  if (tokens == 0 || num_slots == 0 || heads * head_size == 0) return;
  RL_CHECK(tokens <= 0x7fffffffLL, kOp, ": ", tokens, " tokens is past the grid's 2^31 - 1 blocks");

  // Step 3: launch on torch's current stream (rl::launch_dependent checks the launch).
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(key, kOp, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t run = kvc::kVecBytes / key.element_size();  // elements of T per 16-byte run
    const bool vec = head_size % run == 0 && kvc::runs_ok(key, run, {key.stride(0), key.stride(1)}) &&
                     kvc::runs_ok(value, run, {value.stride(0), value.stride(1)}) &&
                     kvc::runs_ok(key_cache, run, {key_cache.stride(0), key_cache.stride(1), key_cache.stride(2)}) &&
                     kvc::runs_ok(value_cache, run, {value_cache.stride(0), value_cache.stride(1),
                                                     value_cache.stride(2)});
    const int64_t items = heads * (vec ? head_size / run : head_size);
    const int threads = static_cast<int>(std::min<int64_t>(kvc::kMaxThreads, rl::cdiv(items, 32) * 32));
    auto go = [&](auto cache_tag, auto fp8_tag, auto vector) {
      using C = typename decltype(cache_tag)::type;
      constexpr bool kFp8 = decltype(fp8_tag)::value, kVector = decltype(vector)::value;
      rl::launch_dependent(kvc::reshape_and_cache_flash_kernel<T, C, kFp8, kVector>,
                           dim3(static_cast<unsigned>(tokens)), dim3(static_cast<unsigned>(threads)), 0,
                           key.data<T>(), value.data<T>(), static_cast<C*>(key_cache.data_ptr()),
                           static_cast<C*>(value_cache.data_ptr()), slot_mapping.data<int64_t>(), k_scale.data<float>(),
                           v_scale.data<float>(), key.stride(0), key.stride(1), key.stride(2), value.stride(0),
                           value.stride(1), value.stride(2), key_cache.stride(0), key_cache.stride(1),
                           key_cache.stride(2), key_cache.stride(3), value_cache.stride(0), value_cache.stride(1),
                           value_cache.stride(2), value_cache.stride(3), static_cast<int>(heads),
                           static_cast<int>(head_size), block_size, num_slots);
    };
    using yes = std::true_type;
    using no = std::false_type;
    if (fp8) {
      vec ? go(rl::type_tag<uint8_t>{}, yes{}, yes{}) : go(rl::type_tag<uint8_t>{}, yes{}, no{});
    } else {
      vec ? go(rl::type_tag<T>{}, no{}, yes{}) : go(rl::type_tag<T>{}, no{}, no{});
    }
  });
}
RL_EXPORT(reshape_and_cache_flash, "reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, "
                                   "k_scale, v_scale): each token's key and value rows into its slot of the paged "
                                   "caches (-1 padding), copied or rounded to fp8 e4m3 with the scales")
#endif  // RL_HOST
