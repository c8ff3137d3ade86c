// rapid_llm row: {"name": "jit/merge_attn_states", "op": "merge_attn_states", "fn": "merge_attn_states", "dtypes": ["bf16", "fp16", "fp32"], "golden": {"verified": true, "max_abs_diff": 0.03125, "baseline": "native/merge_attn_states", "per_dtype": [["bf16", 0.03125], ["fp16", 0.00390625], ["fp32", 1.9073486328125e-06]]}, "graph_safe": true, "description": "one thread per 16-byte vector of a head, both sides' LSEs from L1, 32-bit indexing where it fits", "out": "none"}
// merge_attn_states(out, out_lse, v_a, lse_a, v_b, lse_b): two partial attention results over disjoint keys
// merged (vLLM's contract, out-first). v_a, v_b, out: [T, H, D] bf16 / fp16 / fp32; lse_a, lse_b, out_lse:
// [H, T] fp32. m = max(a, b), w = exp(lse - m), s = w_a + w_b; out = v_a w_a / s + v_b w_b / s (fp32,
// rounded once), out_lse = m + log(s). Special values as the native floor states them: +-inf LSE is an
// empty side, whose values are never read into the result (one side empty: the other passes through bit for
// bit); both empty: 0 and -inf; a NaN LSE: NaN out and LSE.
//
// Memory bound: each element of v_a and v_b is read once and out written once (3 x 2 bytes for bf16); the
// LSEs are 8 bytes per token and head, read by every thread of the head from L1. One thread per 16-byte
// vector (D = 128 bf16: 16 threads per head), all of a thread's loads issued before any is used; a head
// size that is no multiple of the vector, or an unaligned tensor, takes one thread per element.
#include "common/rapid_llm.cuh"

namespace merge_detail {

constexpr int kVecBytes = 16;
constexpr int kThreads = 256;

}  // namespace merge_detail

#if RL_DEVICE
namespace merge_detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T, int kN>
struct alignas(sizeof(T) * kN) Vec {
  T v[kN];
};

// How to merge one token and head: the weights of each side, the merged LSE, and which rule applies.
struct Merge {
  float p_a, p_b, lse;
  int mode;  // 0 both present, 1 only a, 2 only b, 3 neither, 4 NaN
};

__device__ __forceinline__ Merge merge_of(float a, float b) {
  Merge r{0.0f, 0.0f, 0.0f, 0};
  const float inf = __int_as_float(0x7f800000);
  const bool a_empty = fabsf(a) == inf, b_empty = fabsf(b) == inf;
  if (a != a || b != b) {
    r.mode = 4;
    r.lse = __int_as_float(0x7fffffff);
  } else if (a_empty && b_empty) {
    r.mode = 3;
    r.lse = -inf;
  } else if (b_empty) {
    r.mode = 1;
    r.lse = a;
  } else if (a_empty) {
    r.mode = 2;
    r.lse = b;
  } else {
    const float m = fmaxf(a, b);
    const float w_a = expf(a - m), w_b = expf(b - m);  // one of them is exactly 1
    const float s = w_a + w_b;
    r.p_a = w_a / s;
    r.p_b = w_b / s;
    r.lse = m + logf(s);
  }
  return r;
}

// kN elements per thread (kN = 16 bytes / sizeof(T) on the vector path, 1 otherwise). I: the index type
// (32-bit where T * H * D / kN fits, which saves the 64-bit divisions of the index split).
template <typename T, int kN, typename I>
__global__ void __launch_bounds__(kThreads)
    merge_kernel(T* __restrict__ out, float* __restrict__ out_lse, const T* __restrict__ v_a,
                 const float* __restrict__ lse_a, const T* __restrict__ v_b, const float* __restrict__ lse_b,
                 int64_t tokens, int64_t heads, int64_t head_size) {
  const I per_head = static_cast<I>(head_size / kN);
  const I i = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x;
  const I total = static_cast<I>(tokens) * static_cast<I>(heads) * per_head;
  if (i >= total) return;
  rl::wait_for_prior_grids();
  const I th = i / per_head;   // token * heads + head
  const I j = i - th * per_head;
  const I t = th / static_cast<I>(heads);
  const I h = th - t * static_cast<I>(heads);
  const int64_t lse_at = static_cast<int64_t>(h) * tokens + static_cast<int64_t>(t);
  const int64_t at = static_cast<int64_t>(th) * head_size + static_cast<int64_t>(j) * kN;
  using V = Vec<T, kN>;
  const V a = *reinterpret_cast<const V*>(v_a + at);  // both loads in flight before the LSEs are used
  const V b = *reinterpret_cast<const V*>(v_b + at);
  const Merge w = merge_of(lse_a[lse_at], lse_b[lse_at]);
  rl::allow_dependent_grids();
  V o;
  if (w.mode == 0) {
#pragma unroll
    for (int k = 0; k < kN; ++k) o.v[k] = from_float<T>(to_float(a.v[k]) * w.p_a + to_float(b.v[k]) * w.p_b);
  } else if (w.mode == 1 || w.mode == 2) {
    o = w.mode == 1 ? a : b;  // the other side passes through bit for bit (a -0.0 stays -0.0)
  } else {
    const float fill = w.mode == 3 ? 0.0f : __int_as_float(0x7fffffff);
#pragma unroll
    for (int k = 0; k < kN; ++k) o.v[k] = from_float<T>(fill);
  }
  *reinterpret_cast<V*>(out + at) = o;
  if (j == 0) out_lse[lse_at] = w.lse;
}

}  // namespace merge_detail
#endif  // RL_DEVICE

#if RL_HOST
#include <cstdint>
#include <type_traits>
#include <utility>

namespace merge_detail {

template <typename T, int kN, typename I>
__global__ void __launch_bounds__(kThreads)
    merge_kernel(T* __restrict__ out, float* __restrict__ out_lse, const T* __restrict__ v_a,
                 const float* __restrict__ lse_a, const T* __restrict__ v_b, const float* __restrict__ lse_b,
                 int64_t tokens, int64_t heads, int64_t head_size);

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kVecBytes == 0; }

template <typename T, int kN>
void launch_with(T* out, float* out_lse, const T* v_a, const float* lse_a, const T* v_b, const float* lse_b,
                 int64_t tokens, int64_t heads, int64_t head_size) {
  const int64_t threads = tokens * heads * (head_size / kN);
  const dim3 grid(static_cast<unsigned>(rl::cdiv(threads, kThreads)));
  if (threads + kThreads <= 0xffffffffLL) {
    rl::launch_dependent(merge_kernel<T, kN, uint32_t>, grid, dim3(kThreads), 0, out, out_lse, v_a, lse_a, v_b, lse_b,
                         tokens, heads, head_size);
  } else {
    rl::launch_dependent(merge_kernel<T, kN, int64_t>, grid, dim3(kThreads), 0, out, out_lse, v_a, lse_a, v_b, lse_b,
                         tokens, heads, head_size);
  }
}

}  // namespace merge_detail

void merge_attn_states(rl::Tensor out, rl::Tensor out_lse, rl::Tensor v_a, rl::Tensor lse_a, rl::Tensor v_b,
                       rl::Tensor lse_b) {
  // Step 1: validate.
  const char* op = "merge_attn_states";
  RL_CHECK(v_a.dim() == 3, op, ": v_a must be [tokens, heads, head_size], got ", v_a.describe());
  for (const auto& [name, t] : {std::pair<const char*, const rl::Tensor*>{"output", &out}, {"v_b", &v_b}}) {
    RL_CHECK(t->same_shape(v_a) && t->dtype() == v_a.dtype(), op, ": ", name, " must match v_a's shape and dtype, got ",
             t->describe(), " vs ", v_a.describe());  // platform.must_match's words
  }
  const int64_t tokens = v_a.size(0), heads = v_a.size(1), head_size = v_a.size(2);
  for (const rl::Tensor* t : {&out_lse, &lse_a, &lse_b}) {
    RL_CHECK(t->dim() == 2 && t->size(0) == heads && t->size(1) == tokens && t->dtype() == RL_FP32, op,
             ": out_lse, lse_a and lse_b must be [heads, tokens] = [", heads, ", ", tokens, "] fp32, got ",
             t->describe());
  }
  rl::check_cuda(op, {out, out_lse, v_a, lse_a, v_b, lse_b});  // device last: a CPU build checks the words above
  rl::check_contiguous(op, {out, out_lse, v_a, lse_a, v_b, lse_b});

  // Step 2: extract. An empty tensor launches nothing.
  if (v_a.numel() == 0) return;

  // Step 3: launch on torch's current stream (rl::launch_dependent checks the launch).
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(v_a, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T* a = v_a.data<T>();
    const T* b = v_b.data<T>();
    const bool vec = (head_size * v_a.element_size()) % merge_detail::kVecBytes == 0 &&
                     merge_detail::aligned16(o) && merge_detail::aligned16(a) && merge_detail::aligned16(b);
    constexpr int kN = std::is_same<T, float>::value ? 4 : 8;  // 16 bytes of T
    if (vec) {
      merge_detail::launch_with<T, kN>(o, out_lse.data<float>(), a, lse_a.data<float>(), b, lse_b.data<float>(),
                                       tokens, heads, head_size);
    } else {
      merge_detail::launch_with<T, 1>(o, out_lse.data<float>(), a, lse_a.data<float>(), b, lse_b.data<float>(),
                                      tokens, heads, head_size);
    }
  });
}
RL_EXPORT(merge_attn_states, "merge_attn_states(out, out_lse, v_a, lse_a, v_b, lse_b): merge two partial "
                             "attention results (LSEs [heads, tokens]) into out and out_lse")
#endif  // RL_HOST
