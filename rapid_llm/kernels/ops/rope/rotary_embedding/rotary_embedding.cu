// rapid_llm row: {"name": "jit/rotary_embedding", "op": "rotary_embedding", "fn": "rotary_embedding", "dtypes": ["bf16", "fp16", "fp32"], "golden": {"verified": true, "max_abs_diff": 0.0, "baseline": "native/rotary_embedding", "per_dtype": [["bf16", 0.0], ["fp16", 0.0], ["fp32", 0.0]]}, "graph_safe": true, "description": "one block per token, threads over (head, 16-byte run of pairs), cos/sin in registers; in place", "out": "none", "layouts": ["contiguous", "strided"]}
// rotary_embedding: rotate q and k in place by each token's position (vLLM's form), fp16 / bf16 / fp32.
//
// One block per token (at decode sizes, per token and round of heads). threadIdx.x walks the runs of pairs
// of a head, threadIdx.y the heads (q's, then k's): a thread reads the cos/sin of its pairs once into registers and reuses them for every head it
// rotates (past the decode sizes, three heads a thread with all their loads in flight: see the launcher). A run is 16 bytes of x and 16 bytes of y (neox: x and y are two contiguous runs half a
// rotation apart; GPT-J: pairs are adjacent, so 32 contiguous bytes hold the run's pairs interleaved),
// and cos/sin come as 16-byte loads too. Elements past rot_dim are neither read nor written.
//
// Bytes in flight: under ncu on an H200, Liger-Kernel's Triton rope (a program per token, 128 threads, each
// holding several heads) moved the same DRAM bytes as the one-head-a-thread kernels here with half the
// instructions, and finished 10-21% sooner (benchmarks/results/logs/profile_rope_vs_liger_nvidia_h200.log).
// Three heads a thread in one block per token (the decode kernel at kWideHeads, 64 registers) closed most of
// that past the decode sizes; two heads a thread were slower, four level or slower, and so were a persistent
// grid prefetching the next token's position and the token-looping kernel with two heads' loads in flight.
// A block reading its token's cos/sin once into shared memory, two heads a thread (fewer registers across
// the position -> cos/sin loads), was level at T=1024 and 10-25% slower elsewhere, at Llama-3-8B, -3.2-1B
// and -70B shapes (benchmarks/results/logs/launch_variants_rotary_embedding_row_kernel.log, in the source
// at 3e31cfd).
//
// Numerics (every row): x' = x*c - y*s, y' = y*c + x*s in fp32, each product rounded before the sum
// (no fused multiply-add), then rounded once to the input dtype.
#include "common/rapid_llm.cuh"

constexpr int kVecBytes = 16;      // one 128-bit load or store
constexpr int kHeadsInFlight = 1;  // heads a thread loads before it computes any (more costs registers, hence blocks)
constexpr int kThreads = 256;      // threads per block, at most
constexpr int kDecodeHeads = 1;   // heads a thread of the decode kernel rotates at decode sizes
constexpr int kWideHeads = 3;     // ... and past them (16-byte runs): a token's heads in one block
constexpr int kWideMinBlocks = 4; // its register bound there (256-thread blocks an SM: <= 64 registers; bf16 neox and
                                  // fp32 do not spill, fp16 and bf16 GPT-J spill 20-24 bytes a thread)
constexpr int kMinBlocks = 6;     // blocks per SM the register budget must allow (<= 42 registers): tokens in flight
// How the kernel reads cos/sin: fp32 or the input dtype, element by element or in 16-byte runs.
constexpr int kCacheF32 = 0, kCacheT = 1, kCacheVecF32 = 2, kCacheVecT = 3;

// The lean decode kernel's parameters: 64 bytes, one line of the constant cache (see that kernel).
template <typename T>
struct LeanDecodeArgs {
  const void* positions;  // [T], contiguous
  T* q;
  T* k;
  const void* cache;      // [max_pos, 2 * half], contiguous rows
  int q_stride_t, k_stride_t, stride_h, q_heads;  // elements; q's and k's heads alike apart
  int heads, half, max_pos, flags;                // flags: kLeanPos64 | kLeanCacheF32
};
constexpr int kLeanPos64 = 1, kLeanCacheF32 = 2;

#if RL_DEVICE
// kN elements of T that travel as one 128-bit access on the vector path (one element otherwise).
template <typename T, int kN>
struct alignas(kN * sizeof(T) >= kVecBytes ? kVecBytes : alignof(T)) Run {
  T v[kN];
};

template <typename T, int kN, bool kVector>
__device__ __forceinline__ Run<T, kN> load_run(const T* p, int64_t elem_stride) {
  Run<T, kN> r;
  if constexpr (kVector) {
    *reinterpret_cast<uint4*>(&r) = *reinterpret_cast<const uint4*>(p);
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) r.v[j] = p[j * elem_stride];
  }
  return r;
}

template <typename T, int kN, bool kVector>
__device__ __forceinline__ void store_run(T* p, int64_t elem_stride, const Run<T, kN>& r) {
  if constexpr (kVector) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&r);
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) p[j * elem_stride] = r.v[j];
  }
}

// kN cos (or sin) values from element `at` of the cache, as fp32. On the vector path a run's values are
// 16-byte aligned (the launcher checks), so they travel as 128-bit loads: 2 for fp32 values of bf16 pairs.
template <typename T, int kN>
__device__ __forceinline__ void load_cache_run(const void* cache, int mode, int64_t at, int64_t stride_e,
                                               float (&v)[kN]) {
  if constexpr (kN % 4 == 0 && kN * sizeof(T) == kVecBytes) {
    if (mode == kCacheVecF32) {
      const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(cache) + at);
#pragma unroll
      for (int i = 0; i < kN / 4; ++i) {
        const float4 f = __ldg(p + i);
        v[4 * i] = f.x;
        v[4 * i + 1] = f.y;
        v[4 * i + 2] = f.z;
        v[4 * i + 3] = f.w;
      }
      return;
    }
    if (mode == kCacheVecT) {
      Run<T, kN> r;
      *reinterpret_cast<uint4*>(&r) = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(cache) + at));
#pragma unroll
      for (int j = 0; j < kN; ++j) v[j] = static_cast<float>(r.v[j]);
      return;
    }
  }
  const bool fp32 = mode == kCacheF32 || mode == kCacheVecF32;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const int64_t i = at + j * stride_e;
    v[j] = fp32 ? __ldg(static_cast<const float*>(cache) + i) : static_cast<float>(static_cast<const T*>(cache)[i]);
  }
}

// Rotate the kN pairs of one run in registers: a and b are the run's two 16-byte halves (see first/second below).
template <typename T, int kN, bool kNeox>
__device__ __forceinline__ void rotate_run(Run<T, kN>& a, Run<T, kN>& b, const float (&c)[kN], const float (&s)[kN]) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    // Pair j: neox (a[j], b[j]); GPT-J elements 2j and 2j+1 of the 2*kN run a then b.
    T& xr = kNeox ? a.v[j] : (2 * j < kN ? a.v[2 * j] : b.v[2 * j - kN]);
    T& yr = kNeox ? b.v[j] : (2 * j + 1 < kN ? a.v[2 * j + 1] : b.v[2 * j + 1 - kN]);
    const float x = static_cast<float>(xr);
    const float y = static_cast<float>(yr);
    xr = static_cast<T>(__fsub_rn(__fmul_rn(x, c[j]), __fmul_rn(y, s[j])));
    yr = static_cast<T>(__fadd_rn(__fmul_rn(y, c[j]), __fmul_rn(x, s[j])));
  }
}

// The kernel over (token, head, run). kVector: 16-byte runs (element stride 1, every start aligned);
// else one pair per run at any element stride. Heads 0..q_heads-1 are q's, the rest k's.
template <typename T, bool kNeox, bool kVector>
__global__ void __launch_bounds__(kThreads, kMinBlocks) rotary_embedding_kernel(
    const void* __restrict__ positions, bool positions_int64, int64_t positions_stride,
    T* __restrict__ q, int64_t q_stride_t, int64_t q_stride_h, int64_t q_stride_e,
    T* __restrict__ k, int64_t k_stride_t, int64_t k_stride_h, int64_t k_stride_e,
    const void* __restrict__ cache, int cache_mode, int64_t cache_stride_p, int64_t cache_stride_e,
    int64_t tokens, int q_heads, int k_heads, int half, int64_t max_pos) {
  constexpr int kN = kVector ? kVecBytes / static_cast<int>(sizeof(T)) : 1;  // pairs per run
  static_assert(!kVector || kN * sizeof(T) == kVecBytes, "a vector run must be one 128-bit access");
  const int runs = half / kN;  // runs per head (the launcher makes kN divide half on the vector path)
  const int heads = q_heads + k_heads;
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const int64_t pos = positions_int64 ? static_cast<const int64_t*>(positions)[t * positions_stride]
                                        : static_cast<int64_t>(static_cast<const int32_t*>(positions)[t * positions_stride]);
    if (pos < 0 || pos >= max_pos) continue;  // out of range: leave the token, never read outside the cache
    const int64_t cache_row = pos * cache_stride_p;
    T* q_token = q + t * q_stride_t;
    T* k_token = k + t * k_stride_t;
    for (int r = threadIdx.x; r < runs; r += blockDim.x) {
      float c[kN], s[kN];
      load_cache_run<T, kN>(cache, cache_mode, cache_row + static_cast<int64_t>(r * kN) * cache_stride_e,
                            cache_stride_e, c);
      load_cache_run<T, kN>(cache, cache_mode, cache_row + static_cast<int64_t>(half + r * kN) * cache_stride_e,
                            cache_stride_e, s);
      // Where the two runs of pairs r start in a head (element offsets, before the element stride):
      // neox x at r*kN, y half a rotation on; GPT-J 2*kN interleaved elements from 2*r*kN.
      const int first = kNeox ? r * kN : 2 * r * kN;
      const int second = kNeox ? half + r * kN : 2 * r * kN + kN;
      for (int h0 = threadIdx.y; h0 < heads; h0 += blockDim.y * kHeadsInFlight) {
        Run<T, kN> a[kHeadsInFlight], b[kHeadsInFlight];
#pragma unroll
        for (int u = 0; u < kHeadsInFlight; ++u) {  // issue every load before using any
          const int h = h0 + u * blockDim.y;
          if (h < heads) {
            const bool is_q = h < q_heads;
            const int64_t es = kVector ? 1 : (is_q ? q_stride_e : k_stride_e);
            const T* p = is_q ? q_token + h * q_stride_h : k_token + static_cast<int64_t>(h - q_heads) * k_stride_h;
            a[u] = load_run<T, kN, kVector>(p + first * es, es);
            b[u] = load_run<T, kN, kVector>(p + second * es, es);
          }
        }
#pragma unroll
        for (int u = 0; u < kHeadsInFlight; ++u) {
          const int h = h0 + u * blockDim.y;
          if (h >= heads) continue;
          rotate_run<T, kN, kNeox>(a[u], b[u], c, s);
          // Recomputed rather than kept from the loads: fewer live registers, more blocks per SM.
          const bool is_q = h < q_heads;
          const int64_t es = kVector ? 1 : (is_q ? q_stride_e : k_stride_e);
          T* p = is_q ? q_token + h * q_stride_h : k_token + static_cast<int64_t>(h - q_heads) * k_stride_h;
          store_run<T, kN, kVector>(p + first * es, es, a[u]);
          store_run<T, kN, kVector>(p + second * es, es, b[u]);
        }
      }
    }
  }
}

// Decode sizes: the grid is a block column per token and blockIdx.y a round of heads, so a thread rotates
// kHeads heads (gridDim.y * blockDim.y apart). Its q/k loads go out before the position is tested: a branch on
// the position would hold them until it arrives, and they do not depend on it, so they overlap the token's
// position -> cos/sin chain of two round trips. One head a thread (kDecodeHeads) at decode sizes, with no
// minimum of resident blocks: the registers keep cos/sin without spilling. Past them the launcher takes
// kWideHeads, held to 64 registers (see the launcher). At decode sizes, on an H200 (bf16, cold L2, random
// round-robin order with an A/A control) two heads a thread measured 2-6 % slower at T = 1-128 at Llama-3.2-1B, -8B and -70B shapes, 3 and
// 8 % slower at T = 1024 (-8B, -3.2-1B), within 1.1 % from T = 4096 up; as the only grid at every T it won 1.6 and
// 2.5 % at two cells and lost up to 10 % at others; two heads' loads in flight a thread in the token-looping kernel
// lost 2-71 % (benchmarks/results/logs/launch_variants_rotary_embedding_two_heads.log).
template <typename T, bool kNeox, bool kVector, int kHeads>
__global__ void __launch_bounds__(kThreads, kHeads > 1 ? kWideMinBlocks : 1) rotary_embedding_decode_kernel(
    const void* __restrict__ positions, bool positions_int64, int64_t positions_stride,
    T* __restrict__ q, int64_t q_stride_t, int64_t q_stride_h, int64_t q_stride_e,
    T* __restrict__ k, int64_t k_stride_t, int64_t k_stride_h, int64_t k_stride_e,
    const void* __restrict__ cache, int cache_mode, int64_t cache_stride_p, int64_t cache_stride_e,
    int64_t tokens, int q_heads, int k_heads, int half, int64_t max_pos) {
  constexpr int kN = kVector ? kVecBytes / static_cast<int>(sizeof(T)) : 1;
  const int runs = half / kN;
  const int heads = q_heads + k_heads;
  const int h0 = blockIdx.y * blockDim.y + threadIdx.y;
  const int h_step = gridDim.y * blockDim.y;
  const int64_t t = blockIdx.x;
  if (h0 >= heads || t >= tokens) return;
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  const int64_t pos = positions_int64 ? static_cast<const int64_t*>(positions)[t * positions_stride]
                                      : static_cast<int64_t>(static_cast<const int32_t*>(positions)[t * positions_stride]);
  auto head = [&](int h) {  // the head's first element (q's heads, then k's)
    return h < q_heads ? q + t * q_stride_t + h * q_stride_h
                       : k + t * k_stride_t + static_cast<int64_t>(h - q_heads) * k_stride_h;
  };
  auto elem_stride = [&](int h) -> int64_t { return kVector ? 1 : (h < q_heads ? q_stride_e : k_stride_e); };
  for (int r = threadIdx.x; r < runs; r += blockDim.x) {
    const int first = kNeox ? r * kN : 2 * r * kN;  // as in the kernel above
    const int second = kNeox ? half + r * kN : 2 * r * kN + kN;
    Run<T, kN> a[kHeads], b[kHeads];
#pragma unroll
    for (int u = 0; u < kHeads; ++u) {  // every head's loads before the position is used
      const int h = h0 + u * h_step;
      if (h < heads) {
        a[u] = load_run<T, kN, kVector>(head(h) + first * elem_stride(h), elem_stride(h));
        b[u] = load_run<T, kN, kVector>(head(h) + second * elem_stride(h), elem_stride(h));
      }
    }
    if (pos < 0 || pos >= max_pos) return;  // out of range: leave the token, never read outside the cache
    const int64_t cache_row = pos * cache_stride_p;
    float c[kN], s[kN];
    load_cache_run<T, kN>(cache, cache_mode, cache_row + static_cast<int64_t>(r * kN) * cache_stride_e,
                          cache_stride_e, c);
    load_cache_run<T, kN>(cache, cache_mode, cache_row + static_cast<int64_t>(half + r * kN) * cache_stride_e,
                          cache_stride_e, s);
#pragma unroll
    for (int u = 0; u < kHeads; ++u) {
      const int h = h0 + u * h_step;
      if (h >= heads) continue;
      rotate_run<T, kN, kNeox>(a[u], b[u], c, s);
      store_run<T, kN, kVector>(head(h) + first * elem_stride(h), elem_stride(h), a[u]);
      store_run<T, kN, kVector>(head(h) + second * elem_stride(h), elem_stride(h), b[u]);
    }
  }
}

// The one-head decode grid of the kernel above for the layouts decode steps have (16-byte runs, contiguous positions
// and cache rows, q's and k's heads alike apart, 32-bit strides), with its parameters in one 64-byte constant line
// rather than 20 over three, and 48 registers rather than 72 (bf16 neox, ptxas for sm_90). Under ncu on an H200
// (clocks locked at base, Llama-3-8B T = 1 and 16) it ran 3.65 us against 3.81 and 3.78; timed (bf16, cold L2,
// random round-robin order with an A/A control) 2-5 % faster at T = 1 and 16 at Llama-3-8B and -70B shapes, 1-2 %
// at T = 128; at -3.2-1B (head size 64) level at T = 1 and 16, 0.9-1.6 % slower at T = 128. Shipped, against the
// general kernel as a variant in another session: 0-3 % faster at all three shapes and T = 1-128, slower nowhere
// (benchmarks/results/logs/launch_variants_rotary_embedding_lean.log, both sessions).
template <typename T, bool kNeox>
__global__ void __launch_bounds__(kThreads) rotary_embedding_lean_kernel(const LeanDecodeArgs<T> a) {
  constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  const int h = blockIdx.y * blockDim.y + threadIdx.y;
  const int t = blockIdx.x;
  if (h >= a.heads) return;
  rl::wait_for_prior_grids();
  rl::allow_dependent_grids();
  const int64_t pos = (a.flags & kLeanPos64) ? static_cast<const int64_t*>(a.positions)[t]
                                             : static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[t]);
  T* head = h < a.q_heads ? a.q + static_cast<int64_t>(t) * a.q_stride_t + h * a.stride_h
                          : a.k + static_cast<int64_t>(t) * a.k_stride_t + (h - a.q_heads) * a.stride_h;
  const int mode = (a.flags & kLeanCacheF32) ? kCacheVecF32 : kCacheVecT;
  for (int r = threadIdx.x; r < a.half / kN; r += blockDim.x) {
    const int first = kNeox ? r * kN : 2 * r * kN;  // as in the kernels above
    const int second = kNeox ? a.half + r * kN : 2 * r * kN + kN;
    Run<T, kN> x = load_run<T, kN, true>(head + first, 1);  // before the position is used, as above
    Run<T, kN> y = load_run<T, kN, true>(head + second, 1);
    if (pos < 0 || pos >= a.max_pos) return;  // out of range: leave the token, never read outside the cache
    const int64_t cache_row = pos * (2 * a.half);
    float c[kN], s[kN];
    load_cache_run<T, kN>(a.cache, mode, cache_row + r * kN, 1, c);
    load_cache_run<T, kN>(a.cache, mode, cache_row + a.half + r * kN, 1, s);
    rotate_run<T, kN, kNeox>(x, y, c, s);
    store_run<T, kN, true>(head + first, 1, x);
    store_run<T, kN, true>(head + second, 1, y);
  }
}
#endif

#if RL_HOST
#include <algorithm>
#include <type_traits>

// The kernels this launcher starts, declared (the device pass defines them).
template <typename T, bool kNeox, bool kVector>
__global__ void __launch_bounds__(kThreads, kMinBlocks) rotary_embedding_kernel(
    const void* __restrict__ positions, bool positions_int64, int64_t positions_stride,
    T* __restrict__ q, int64_t q_stride_t, int64_t q_stride_h, int64_t q_stride_e,
    T* __restrict__ k, int64_t k_stride_t, int64_t k_stride_h, int64_t k_stride_e,
    const void* __restrict__ cache, int cache_mode, int64_t cache_stride_p, int64_t cache_stride_e,
    int64_t tokens, int q_heads, int k_heads, int half, int64_t max_pos);
template <typename T, bool kNeox, bool kVector, int kHeads>
__global__ void __launch_bounds__(kThreads, kHeads > 1 ? kWideMinBlocks : 1) rotary_embedding_decode_kernel(
    const void* __restrict__ positions, bool positions_int64, int64_t positions_stride,
    T* __restrict__ q, int64_t q_stride_t, int64_t q_stride_h, int64_t q_stride_e,
    T* __restrict__ k, int64_t k_stride_t, int64_t k_stride_h, int64_t k_stride_e,
    const void* __restrict__ cache, int cache_mode, int64_t cache_stride_p, int64_t cache_stride_e,
    int64_t tokens, int q_heads, int k_heads, int half, int64_t max_pos);

template <typename T, bool kNeox>
__global__ void __launch_bounds__(kThreads) rotary_embedding_lean_kernel(const LeanDecodeArgs<T> a);

namespace {

constexpr const char* kOp = "rotary_embedding";

// A [T, H*head_size] or [T, H, head_size] tensor's heads and (token, head, element) strides.
struct HeadView {
  int64_t heads, stride_t, stride_h, stride_e;
};

HeadView head_view(const rl::Tensor& t, const char* name, int64_t head_size, int64_t tokens) {
  RL_CHECK(t.dim() == 2 || t.dim() == 3, kOp, ": ", name, " must be [T, heads * head_size] or [T, heads, head_size], got ",
           t.shape_str());
  RL_CHECK(t.size(0) == tokens, kOp, ": positions has ", tokens, " tokens but ", name, " has ", t.size(0), " (shape ",
           t.shape_str(), ")");
  if (t.dim() == 3) {
    RL_CHECK(t.size(2) == head_size, kOp, ": head_size ", head_size, " does not match ", name, "'s last dim (shape ",
             t.shape_str(), ")");
    return {t.size(1), t.stride(0), t.stride(1), t.stride(2)};
  }
  RL_CHECK(t.size(1) % head_size == 0, kOp, ": head_size ", head_size, " does not divide ", name,
           "'s last dim (shape ", t.shape_str(), ")");
  return {t.size(1) / head_size, t.stride(0), head_size * t.stride(1), t.stride(1)};
}

// 16-byte runs need every run start 16-byte aligned: the data, and each stride a whole number of runs.
bool vector_ok(const rl::Tensor& t, const HeadView& v, int64_t run) {
  const int64_t bytes = run * t.element_size();
  return v.stride_e == 1 && reinterpret_cast<std::uintptr_t>(t.data_ptr()) % bytes == 0 &&
         v.stride_t % run == 0 && v.stride_h % run == 0;
}

}  // namespace

void rotary_embedding(rl::Tensor positions, rl::Tensor q, rl::Tensor k, int64_t head_size, rl::Tensor cos_sin_cache,
                      bool is_neox) {
  // Step 1: validate.
  RL_CHECK(positions.dtype() == RL_INT64 || positions.dtype() == RL_INT32, kOp,
           ": positions must be an int64 or int32 tensor, got ", positions.describe());
  RL_CHECK(positions.dim() == 1, kOp, ": positions must be 1-D [T], got ", positions.shape_str());
  RL_CHECK(head_size > 0, kOp, ": head_size must be positive, got ", head_size);
  const int64_t tokens = positions.size(0);
  const HeadView qv = head_view(q, "q", head_size, tokens);
  const HeadView kv = head_view(k, "k", head_size, tokens);
  RL_CHECK(q.dtype() == k.dtype(), kOp, ": q and k dtypes differ: ", q.describe(), " vs ", k.describe());
  RL_CHECK(cos_sin_cache.dim() == 2, kOp, ": cos_sin_cache must be [max_pos, rot_dim], got ", cos_sin_cache.shape_str());
  RL_CHECK(cos_sin_cache.dtype() == RL_FP32 || cos_sin_cache.dtype() == q.dtype(), kOp,
           ": cos_sin_cache must be fp32 or q's dtype, got ", cos_sin_cache.describe(), " for q ", q.describe());
  const int64_t rot_dim = cos_sin_cache.size(1);
  RL_CHECK(rot_dim > 0 && rot_dim % 2 == 0, kOp, ": rot_dim (cos_sin_cache's last dim) must be a positive even number, got ",
           rot_dim);
  RL_CHECK(rot_dim <= head_size, kOp, ": rot_dim ", rot_dim, " exceeds head_size ", head_size);
  RL_CHECK(qv.heads + kv.heads < (int64_t{1} << 30), kOp, ": too many heads (", qv.heads, " + ", kv.heads, ")");
  rl::check_cuda(kOp, {positions, q, k, cos_sin_cache});  // device last: a CPU build checks the words above

  // Step 2: extract. No tokens or no heads launches nothing.
  if (tokens == 0 || qv.heads + kv.heads == 0) return;
  const int half = static_cast<int>(rot_dim / 2);
  const int heads = static_cast<int>(qv.heads + kv.heads);
  const bool pos64 = positions.dtype() == RL_INT64;
  const bool cache_fp32 = cos_sin_cache.dtype() == RL_FP32;
  const int64_t cache_run = kVecBytes / cos_sin_cache.element_size();  // cache elements per 16 bytes
  const bool cache_aligned = cos_sin_cache.stride(1) == 1 && cos_sin_cache.stride(0) % cache_run == 0 &&
                             reinterpret_cast<std::uintptr_t>(cos_sin_cache.data_ptr()) % kVecBytes == 0;

  // Step 3: launch on torch's current stream; rl::launch_dependent checks every launch.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(q, kOp, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t run = kVecBytes / q.element_size();  // elements per 16-byte run (T is incomplete here)
    const bool vec = half % run == 0 && vector_ok(q, qv, run) && vector_ok(k, kv, run);
    const int runs = static_cast<int>(vec ? half / run : half);
    // A vector run's cos/sin are 16-byte runs too when the cache rows are aligned (half % run == 0 does the rest).
    // The lean decode kernel's layouts (see it): every offset it forms in 32 bits fits.
    const bool lean = vec && cache_aligned && positions.stride(0) == 1 && cos_sin_cache.stride(0) == 2 * half &&
                      qv.stride_h == kv.stride_h && qv.stride_t <= INT32_MAX && kv.stride_t <= INT32_MAX &&
                      heads * qv.stride_h <= INT32_MAX && cos_sin_cache.size(0) <= INT32_MAX;
    const int cache_mode = vec && cache_aligned ? (cache_fp32 ? kCacheVecF32 : kCacheVecT) : (cache_fp32 ? kCacheF32 : kCacheT);
    // Threads: x over the runs of a head, y over heads, about kThreads in all, heads spread evenly.
    const int threads_x = std::min(runs, kThreads);
    const int max_y = std::max(1, kThreads / threads_x);
    const int rounds = static_cast<int>(rl::cdiv(heads, max_y));
    const int threads_y = static_cast<int>(rl::cdiv(heads, rounds));
    const dim3 block(static_cast<unsigned>(threads_x), static_cast<unsigned>(threads_y));
    // Few tokens: a block per token and round of heads, each thread one head (the lean kernel where the layouts
    // allow), up to 4 blocks an SM. Past that, 16-byte runs: the decode kernel again, kWideHeads heads a thread and a
    // token's heads in one block (split over blocks only past kThreads threads), so a thread has three heads' loads
    // in flight and reads cos/sin once for them; its grid has no token loop, a block column per token. Otherwise the
    // token-looping kernel, a block per token (grid-strided), its rounds in each thread. On an H200 (bf16, cold L2,
    // round robin against the token loop and the one-head grid in one process; benchmarks/results/logs/launch_variants_rotary_embedding_wide.log)
    // the wide grid measured 0.4-4.5 % faster than the token loop from T = 4096 at Llama-3-8B, -70B and -3.2-1B
    // shapes, 8 % faster than the one-head grid at -8B T = 1024, 2.5 % at -3.2-1B T = 1024, 3-8 % at -70B
    // T = 256 and 512, and slower at T = 1-128 at all three and at -3.2-1B T = 256 and 512 (hence 4 a SM).
    const bool one_head = tokens * rounds <= 4 * static_cast<int64_t>(rl::sm_count());
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(tokens, int64_t{1} << 30)),
                    one_head ? static_cast<unsigned>(rl::cdiv(rounds, kDecodeHeads)) : 1u);
    const bool wide = !one_head && vec && tokens < (int64_t{1} << 31);
    const int64_t wide_rows = rl::cdiv(heads, kWideHeads);
    const int64_t wide_y = rl::cdiv(wide_rows, rl::cdiv(wide_rows, max_y));
    const dim3 wide_block(static_cast<unsigned>(threads_x), static_cast<unsigned>(wide_y));
    const dim3 wide_grid(static_cast<unsigned>(std::min<int64_t>(tokens, int64_t{1} << 31)),
                         static_cast<unsigned>(rl::cdiv(wide_rows, wide_y)));
    auto go = [&](auto kernel, dim3 grid, dim3 block) {
      rl::launch_dependent(kernel, grid, block, 0, positions.data_ptr(), pos64, positions.stride(0), q.data<T>(), qv.stride_t,
                 qv.stride_h, qv.stride_e, k.data<T>(), kv.stride_t, kv.stride_h, kv.stride_e, cos_sin_cache.data_ptr(),
                 cache_mode, cos_sin_cache.stride(0), cos_sin_cache.stride(1), tokens, static_cast<int>(qv.heads),
                 static_cast<int>(kv.heads), half, cos_sin_cache.size(0));
    };
    auto pick = [&](auto neox, auto vector) {
      constexpr bool kNeox = decltype(neox)::value, kVector = decltype(vector)::value;
      if constexpr (kVector) {
        if (wide) return go(rotary_embedding_decode_kernel<T, kNeox, kVector, kWideHeads>, wide_grid, wide_block);
        if (one_head && lean) {
          const LeanDecodeArgs<T> args{positions.data_ptr(), q.data<T>(), k.data<T>(), cos_sin_cache.data_ptr(),
                                       static_cast<int>(qv.stride_t), static_cast<int>(kv.stride_t),
                                       static_cast<int>(qv.stride_h), static_cast<int>(qv.heads), heads, half,
                                       static_cast<int>(cos_sin_cache.size(0)),
                                       (pos64 ? kLeanPos64 : 0) | (cache_fp32 ? kLeanCacheF32 : 0)};
          return rl::launch_dependent(rotary_embedding_lean_kernel<T, kNeox>, grid, block, 0, args);
        }
      }
      one_head ? go(rotary_embedding_decode_kernel<T, kNeox, kVector, kDecodeHeads>, grid, block)
               : go(rotary_embedding_kernel<T, kNeox, kVector>, grid, block);
    };
    using yes = std::true_type;
    using no = std::false_type;
    if (is_neox) {
      vec ? pick(yes{}, yes{}) : pick(yes{}, no{});
    } else {
      vec ? pick(no{}, yes{}) : pick(no{}, no{});
    }
  });
}
RL_EXPORT(rotary_embedding, "rotate q and k in place by each token's position (vLLM's form); returns None")
#endif
