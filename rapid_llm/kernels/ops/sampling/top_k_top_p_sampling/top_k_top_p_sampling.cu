// top_k_top_p_sampling CUDA row (jit/top_k_top_p_sampling, verified on an H100): declared in this folder's __init__.py through cuda_row.py, since its int64 ids and optional tensors fit no out rule.
// top_k_top_p_sampling_launch(out, x, top_k, top_p, temperature, seed_offset, from_logits): one token id per row
// of x (the floor's contract, rapid_llm.kernels.ops.sampling.top_k_top_p_sampling.native), on the same integers
// as the floor and the Triton row, so the ids are theirs from probabilities:
//   weights  w = floor(div_rn(p, max p) * 2^32), or floor(exp(div_rn(x - max x, T)) * 2^32) from logits
//            (NaN as 0 / -inf, +inf as the largest float; T <= 0 or NaN is greedy: T = 1, k = 1);
//   order    w descending, ties to the lower id; kept: the first k, then the prefix whose running sum before
//            each token is < p * W_k (float64), the first token always;
//   draw     t = min(floor(bits53 * 2^-53 * W_L), W_L - 1), bits53 the counter_rng hash of (seed, offset, row);
//            the first id, in id order, where the kept weights' running sum exceeds t.
// out [B] int64; x [B, V] bf16 / fp16 / fp32 (rows at any stride, tokens contiguous); top_k [B] int64, top_p
// and temperature [B] fp32, each an empty tensor for none; seed_offset [2] int64, read on the device (a CUDA
// graph draws anew when the caller advances the offset in place).
//
// A block per row. The k-th weight and the nucleus boundary are found 4 bits a pass (16 thresholds counted
// at once, 9 passes each) over the row, each weight recomputed from x; then one pass in id order with a block
// scan. Every sum is an int64 sum: the order threads add in cannot move a draw.
#include "common/rapid_llm.cuh"

namespace sampling_detail {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kThresholds = 16;
constexpr int kRounds = 9;
constexpr long long kOne = 4294967296LL;  // 2^32: the row's largest weight
constexpr long long kBig = 1LL << 40;

}  // namespace sampling_detail

#if RL_DEVICE
namespace sampling_detail {

#define kInf __int_as_float(0x7f800000)

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ uint32_t mix(uint32_t h) {
  h ^= h >> 16;
  h *= 0x21F0AAADu;
  h ^= h >> 15;
  h *= 0x735A2D97u;
  return h ^ (h >> 15);
}

// counter_rng.bits53(seed, offset, row).
__device__ __forceinline__ long long bits53(long long seed, long long offset, long long row) {
  uint32_t key = mix(static_cast<uint32_t>(static_cast<unsigned long long>(seed) >> 32) ^ 0x85EBCA6Bu);
  key = mix(key ^ static_cast<uint32_t>(seed));
  key = mix(key ^ static_cast<uint32_t>(static_cast<unsigned long long>(offset) >> 32));
  key = mix(key ^ static_cast<uint32_t>(offset));
  key = mix(key ^ static_cast<uint32_t>(row));
  const unsigned long long hi = mix(key ^ 0x68E31DA4u), lo = mix(key ^ 0xB5297A4Du);
  return static_cast<long long>((hi << 21) | (lo >> 11));
}

// Sums (or maxima, or minima) over the block; every thread gets the result. `scratch` holds kWarps values.
template <typename V, typename Op>
__device__ __forceinline__ V block_reduce(V v, V* scratch, Op op) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // scratch may still be read by the previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  V r = scratch[0];
#pragma unroll
  for (int i = 1; i < kWarps; ++i) r = op(r, scratch[i]);
  return r;
}

struct Add {
  template <typename V>
  __device__ V operator()(V a, V b) const { return a + b; }
};
struct Max {
  template <typename V>
  __device__ V operator()(V a, V b) const { return a > b ? a : b; }
};
struct Min {
  template <typename V>
  __device__ V operator()(V a, V b) const { return a < b ? a : b; }
};

// Inclusive scan over the block of one value per thread; `scratch` holds kWarps values.
__device__ __forceinline__ long long block_scan(long long v, long long* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const long long u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  for (int i = 0; i < warp; ++i) v += scratch[i];
  return v;
}

// Step 1's weight of token `col` (-1 past the row).
template <typename T>
__device__ __forceinline__ long long weight(const T* __restrict__ row, int64_t col, int64_t vocab, float m, float t,
                                            bool from_logits) {
  if (col >= vocab) return -1;
  float v = to_float(row[col]);
  float e;
  if (from_logits) {
    v = v != v ? -kInf : fminf(v, 3.4028234663852886e38f);
    e = expf(__fdiv_rn(v - m, t));
    if (!(m > -kInf) || e != e) e = 0.0f;
  } else {
    v = v != v ? 0.0f : fminf(fmaxf(v, 0.0f), 3.4028234663852886e38f);
    e = __fdiv_rn(v, m > 0.0f ? m : 1.0f);
  }
  return static_cast<long long>(floorf(e * 4294967296.0f));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(int64_t* __restrict__ out, const T* __restrict__ x, int64_t row_stride, int64_t vocab,
                  const int64_t* __restrict__ top_k, const float* __restrict__ top_p,
                  const float* __restrict__ temperature, const int64_t* __restrict__ seed_offset, bool from_logits) {
  __shared__ long long scratch[kWarps];
  __shared__ float fscratch[kWarps];
  rl::wait_for_prior_grids();
  const int64_t b = blockIdx.x;
  const T* row = x + b * row_stride;
  const int tid = threadIdx.x;

  // Step 1: the largest value; the row's temperature and k.
  float m = -kInf;
  for (int64_t c = tid; c < vocab; c += kThreads) {
    float v = to_float(row[c]);
    v = from_logits ? (v != v ? -kInf : v) : (v != v ? 0.0f : fmaxf(v, 0.0f));
    m = fmaxf(m, fminf(v, 3.4028234663852886e38f));
  }
  m = block_reduce(m, fscratch, Max());
  float t = 1.0f;
  bool greedy = false;
  if (temperature != nullptr) {
    t = temperature[b];
    greedy = !(t > 0.0f);
    if (greedy) t = 1.0f;
  }
  long long k = top_k != nullptr ? top_k[b] : vocab;
  if (k <= 0 || k >= vocab) k = vocab;
  if (greedy) k = 1;

  // Step 2: tau_k, the largest v with #(w >= v) >= k (the smallest weight where k cuts nothing).
  long long lo = 0;
  if (k < vocab) {
    for (int r = 0; r < kRounds; ++r) {
      const long long span = 1LL << (32 - 4 * r);
      long long cnt[kThresholds];
#pragma unroll
      for (int j = 0; j < kThresholds; ++j) cnt[j] = 0;
      for (int64_t c = tid; c < vocab; c += kThreads) {
        const long long w = weight(row, c, vocab, m, t, from_logits);
#pragma unroll
        for (int j = 0; j < kThresholds; ++j) cnt[j] += w >= lo + j * span;
      }
      long long best = lo;
      for (int j = 0; j < kThresholds; ++j) {
        const long long n = block_reduce(cnt[j], scratch, Add());
        if (n >= k) best = lo + j * span;
      }
      lo = best;
    }
  } else {
    long long least = kOne;
    for (int64_t c = tid; c < vocab; c += kThreads) least = min(least, weight(row, c, vocab, m, t, from_logits));
    lo = block_reduce(least, scratch, Min());
  }
  const long long tau_k = lo;
  long long above = 0, sum = 0;
  for (int64_t c = tid; c < vocab; c += kThreads) {
    const long long w = weight(row, c, vocab, m, t, from_logits);
    if (w > tau_k) {
      above += 1;
      sum += w;
    }
  }
  above = block_reduce(above, scratch, Add());
  const long long sum_k = block_reduce(sum, scratch, Add());
  const long long ties_k = k - above;
  const long long w_k = sum_k + ties_k * tau_k;

  // Step 3: the nucleus: the smallest v >= tau_k with S(v) < p W_k, tau_f the smallest weight >= it, and how
  // many of tau_f's equal weights (in id order) are kept.
  long long tau_f = tau_k, n_f = ties_k, sum_f = sum_k;
  if (top_p != nullptr) {
    double p = top_p[b];
    if (p != p) p = 1.0;
    const double big = p * static_cast<double>(w_k);
    lo = tau_k - 1;
    for (int r = 0; r < kRounds; ++r) {
      const long long span = 1LL << (32 - 4 * r);
      long long s[kThresholds];
#pragma unroll
      for (int j = 0; j < kThresholds; ++j) s[j] = 0;
      for (int64_t c = tid; c < vocab; c += kThreads) {
        const long long w = weight(row, c, vocab, m, t, from_logits);
#pragma unroll
        for (int j = 0; j < kThresholds; ++j) s[j] += w > lo + (j + 1) * span ? w : 0;
      }
      long long shorts = 0;
      for (int j = 0; j < kThresholds; ++j) {
        const long long total = block_reduce(s[j], scratch, Add());
        shorts += !(static_cast<double>(total) < big);
      }
      lo += shorts * span;
    }
    const long long hi = min(lo + 1, kOne);
    long long least = kBig;
    for (int64_t c = tid; c < vocab; c += kThreads) {
      const long long w = weight(row, c, vocab, m, t, from_logits);
      if (w >= hi) least = min(least, w);
    }
    tau_f = block_reduce(least, scratch, Min());
    if (tau_f == kBig) tau_f = 0;
    long long above_f = 0, equal_f = 0;
    for (int64_t c = tid; c < vocab; c += kThreads) {
      const long long w = weight(row, c, vocab, m, t, from_logits);
      above_f += w > tau_f ? w : 0;
      equal_f += w == tau_f;
    }
    sum_f = block_reduce(above_f, scratch, Add());
    equal_f = block_reduce(equal_f, scratch, Add());
    const long long group = tau_f == tau_k ? ties_k : equal_f;
    long long n = group;
    if (tau_f > 0) {
      const long long c0 = static_cast<long long>(floor((big - static_cast<double>(sum_f)) /
                                                        static_cast<double>(tau_f)));
      n = c0 - 2;
      for (int d = -2; d < 2; ++d) n += static_cast<double>(sum_f + (c0 + d) * tau_f) < big;
    }
    n = min(max(n, 1LL), group);
    n_f = big > 0.0 ? n : 1;
  }

  // Step 4: t = floor(u W_L); the first id in id order where the kept weights' running sum exceeds it.
  const long long w_l = sum_f + n_f * tau_f;
  const double u = static_cast<double>(bits53(seed_offset[0], seed_offset[1], b)) * 1.1102230246251565e-16;
  const long long target = min(static_cast<long long>(floor(u * static_cast<double>(w_l))), w_l - 1);
  long long run = 0, seen = 0, found = kBig;
  for (int64_t c0 = 0; c0 < vocab && found == kBig; c0 += kThreads) {
    const int64_t c = c0 + tid;
    const long long w = weight(row, c, vocab, m, t, from_logits);
    const long long eq = w == tau_f ? 1 : 0;
    const long long rank = seen + block_scan(eq, scratch) - eq;
    const bool keep = w > tau_f || (eq && rank < n_f);
    const long long acc = run + block_scan(keep ? w : 0, scratch);
    const long long hit = keep && acc > target ? c : kBig;
    found = block_reduce(hit, scratch, Min());
    run = block_reduce(acc, scratch, Max());
    seen = block_reduce(eq, scratch, Add()) + seen;
  }
  if (tid == 0) out[b] = w_l > 0 && found < kBig ? found : 0;
}

#undef kInf
}  // namespace sampling_detail
#endif  // RL_DEVICE

#if RL_HOST
namespace sampling_detail {

template <typename T>
__global__ void sample_kernel(int64_t* __restrict__ out, const T* __restrict__ x, int64_t row_stride, int64_t vocab,
                              const int64_t* __restrict__ top_k, const float* __restrict__ top_p,
                              const float* __restrict__ temperature, const int64_t* __restrict__ seed_offset,
                              bool from_logits);

}  // namespace sampling_detail

void top_k_top_p_sampling_launch(rl::Tensor out, rl::Tensor x, rl::Tensor top_k, rl::Tensor top_p,
                                 rl::Tensor temperature, rl::Tensor seed_offset, bool from_logits) {
  // Step 1: validate (the op's checks ran before this call; these guard what a wrong pointer would break).
  const char* op = "top_k_top_p_sampling";
  RL_CHECK(x.dim() == 2, op, ": x must be [batch, vocab], got ", x.describe());
  const int64_t batch = x.size(0), vocab = x.size(1);
  RL_CHECK(vocab >= 1 && vocab <= (int64_t(1) << 21), op, ": x must have 1 to 2097152 tokens per row, got ", vocab);
  RL_CHECK(vocab == 1 || x.stride(1) == 1, op, ": x's tokens must be contiguous, got ", x.describe());
  RL_CHECK(out.dim() == 1 && out.size(0) == batch && out.dtype() == RL_INT64, op, ": out must be [", batch,
           "] int64, got ", out.describe());
  RL_CHECK(seed_offset.dim() == 1 && seed_offset.size(0) == 2 && seed_offset.dtype() == RL_INT64, op,
           ": seed_offset must be [2] int64 (seed, offset), got ", seed_offset.describe());
  const bool has_k = top_k.numel() > 0, has_p = top_p.numel() > 0, has_t = temperature.numel() > 0;
  RL_CHECK(!has_k || (top_k.dim() == 1 && top_k.size(0) == batch && top_k.dtype() == RL_INT64), op,
           ": top_k must be [", batch, "] int64 here, got ", top_k.describe());
  RL_CHECK(!has_p || (top_p.dim() == 1 && top_p.size(0) == batch && top_p.dtype() == RL_FP32), op,
           ": top_p must be [", batch, "] fp32, got ", top_p.describe());
  RL_CHECK(!has_t || (temperature.dim() == 1 && temperature.size(0) == batch && temperature.dtype() == RL_FP32), op,
           ": temperature must be [", batch, "] fp32, got ", temperature.describe());
  RL_CHECK(!has_t || from_logits, op, ": temperature applies to logits only");
  rl::check_cuda(op, {out, x, seed_offset});
  rl::check_contiguous(op, {out, seed_offset});
  if (has_k) {
    rl::check_cuda(op, {out, top_k});
    rl::check_contiguous(op, {top_k});
  }
  if (has_p) {
    rl::check_cuda(op, {out, top_p});
    rl::check_contiguous(op, {top_p});
  }
  if (has_t) {
    rl::check_cuda(op, {out, temperature});
    rl::check_contiguous(op, {temperature});
  }

  // Step 2: extract. No rows launches nothing.
  if (batch == 0) return;
  const int64_t row_stride = batch > 1 ? x.stride(0) : vocab;
  const int64_t* k = has_k ? top_k.data<int64_t>() : nullptr;
  const float* p = has_p ? top_p.data<float>() : nullptr;
  const float* t = has_t ? temperature.data<float>() : nullptr;

  // Step 3: launch a block per row on torch's current stream (rl::launch_dependent checks the launch).
  const dim3 grid(static_cast<unsigned>(batch));
  const dim3 block(sampling_detail::kThreads);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch_dependent(sampling_detail::sample_kernel<T>, grid, block, 0, out.data<int64_t>(),
                         static_cast<const T*>(x.data<T>()), row_stride, vocab, k, p, t,
                         static_cast<const int64_t*>(seed_offset.data<int64_t>()), from_logits);
  });
}
RL_EXPORT(top_k_top_p_sampling_launch, "top_k_top_p_sampling_launch(out, x, top_k, top_p, temperature, seed_offset, "
                                       "from_logits): one token id per row (empty tensors for no k, p, temperature)")
#endif  // RL_HOST
