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
// A block of 512 threads per row. Every pass reads the row with 16-byte loads (4 in flight a thread) where the
// row is 16-byte aligned, scalar loads otherwise and for the last partial group; warp w reads the w-th of 16
// contiguous segments, so the segments are in id order. A weight is an fp32 integer F = floor(e * 2^32), and
// its 32-bit key (0 for F = 0, else F's bits - 0x3F7FFFFF) orders tokens as their weights do, ties included:
//   1. the row's largest value m (a pass);
//   2. tau_k, the k-th largest key, by a radix select over the key's bits 31..21, 20..10 and 9..0 (a pass each,
//      a 2048-bin shared histogram of counts, and of int64 masses where p is on), and ties_k, how many of
//      tau_k's equal keys the first k hold; k = 1 takes one pass (the largest key), k off none;
//   3. the nucleus (p < 1): tau_f, the smallest key >= tau_k whose mass above is < p W_k, by the same radix
//      select on masses (three passes), then how many of tau_f's equal tokens (in id order) it keeps, n_f;
//   4. the kept set is every key > tau_f and the first n_f tokens of key tau_f: where that group is split, a pass
//      of per-segment counts and a walk of one segment find its n_f-th token; then a pass of per-segment kept
//      masses gives W_L and the segment holding the draw, which the block walks 512 groups a step with a scan.
//      A lone kept token (a greedy row, p tiny) is the answer after the first walk.
// Passes: 1 + 3 + 3 + 1 with k and p both on (one more where a tie group is split), 3 for a greedy row. Every
// sum is an int64 sum, so the order threads add in cannot move a draw.
#include "common/rapid_llm.cuh"

namespace sampling_detail {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kInFlight = 4;   // 16-byte loads a thread issues before using them
constexpr int kBins = 2048;    // the widest digit: 11 bits
constexpr int kOwned = kBins / kThreads;  // bins a thread scans
static_assert(kWarps <= 32 && kBins % kThreads == 0, "a warp scans the warps' values; bins split evenly");

}  // namespace sampling_detail

#if RL_DEVICE
namespace sampling_detail {

#define kInf __int_as_float(0x7f800000)
constexpr float kFltMax = 3.4028234663852886e38f;
constexpr unsigned kFull = 0xffffffffu;
constexpr unsigned kKeyBias = 0x3F7FFFFFu;  // the bits of 1.0f less one: F = 1 has key 1

// A dtype's bits and value. A group of W tokens travels as the 16 bytes of one load (4 registers whatever the
// dtype), in memory order: token j of a 16-bit dtype in word j / 2, the lower half for even j.
template <typename T> struct Bits;
template <> struct Bits<float> {
  using U = unsigned;
  __device__ static float value(unsigned b) { return __uint_as_float(b); }
};
template <> struct Bits<__half> {
  using U = unsigned short;
  __device__ static float value(unsigned b) { return __half2float(__ushort_as_half(static_cast<unsigned short>(b))); }
};
template <> struct Bits<__nv_bfloat16> {
  using U = unsigned short;
  __device__ static float value(unsigned b) { return __uint_as_float(b << 16); }  // the upper half of its fp32
};

__device__ __forceinline__ unsigned word(const uint4& r, int i) {
  return i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w;
}

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

// A token's weight (int64) from its key.
__device__ __forceinline__ long long weight_of(uint32_t key) {
  return key == 0 ? 0 : static_cast<long long>(__uint_as_float(key + kKeyBias));
}

// One row: where it is, how a value becomes a key, and which groups of it each warp reads. A row has at most
// 2^21 tokens (the launcher checks), so int indexes within it.
template <typename T>
struct Row {
  static constexpr int W = 16 / static_cast<int>(sizeof(T));  // tokens a 16-byte load holds: a group
  const T* ptr;
  int vocab, groups, seg;  // seg: groups per warp
  float m, t;
  bool aligned, logits;

  __device__ int begin(int warp) const { return min(groups, warp * seg); }
  __device__ int end(int warp) const { return min(groups, (warp + 1) * seg); }

  // Group g (tokens g * W .. g * W + W - 1) as raw bits; tokens past the row are 0 bits and never used.
  __device__ __forceinline__ uint4 load(int g) const {
    const int c0 = g * W;
    if (aligned && c0 + W <= vocab) return __ldg(reinterpret_cast<const uint4*>(ptr + c0));
    using U = typename Bits<T>::U;
    const U* bits = reinterpret_cast<const U*>(ptr);
    unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < W; ++j)
      if (c0 + j < vocab) w[j / (W / 4)] |= static_cast<unsigned>(bits[c0 + j]) << ((j % (W / 4)) * 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }

  // Token j of a group's bits, as a float.
  __device__ __forceinline__ static float value(const uint4& r, int j) {
    const unsigned w = word(r, j / (W / 4));
    return Bits<T>::value(W == 4 ? w : (j % 2 == 0 ? w & 0xffffu : w >> 16));
  }

  // Step 1 of the floor's rule. F is an fp32 integer >= 0, so its bits order tokens as their weights do.
  __device__ __forceinline__ uint32_t key(float v) const {
    float e;
    if (logits) {
      v = v != v ? -kInf : fminf(v, kFltMax);
      e = expf(__fdiv_rn(v - m, t));
      if (!(m > -kInf) || e != e) e = 0.0f;
    } else {
      v = v != v ? 0.0f : fminf(fmaxf(v, 0.0f), kFltMax);
      e = __fdiv_rn(v, m > 0.0f ? m : 1.0f);
    }
    const float f = floorf(e * 4294967296.0f);
    return f > 0.0f ? __float_as_uint(f) - kKeyBias : 0u;  // f > 0: a -0 is key 0
  }
};

// f(col, value) for every token of the row, by the warp whose segment holds it.
template <typename T, typename F>
__device__ __forceinline__ void for_each(const Row<T>& r, F&& f) {
  constexpr int W = Row<T>::W;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int end = r.end(warp);
  for (int g = r.begin(warp) + lane; g < end; g += 32 * kInFlight) {
    uint4 v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) v[i] = g + 32 * i < end ? r.load(g + 32 * i) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int c0 = (g + 32 * i) * W;
      if (g + 32 * i < end) {
#pragma unroll
        for (int j = 0; j < W; ++j)
          if (c0 + j < r.vocab) f(c0 + j, Row<T>::value(v[i], j));
      }
    }
  }
}

struct Pair {
  int c;        // a count (a row has at most 2^21 tokens)
  long long m;  // a mass
};

struct Pick {
  int bin, above_c, count;  // the bin, the count of the bins above it in its range, its own count
  long long above_m;        // the mass above it: of its range's bins above it, or (nucleus) of every key above
};

struct Shared {
  unsigned cnt[kBins];
  unsigned long long mass[kBins];
  Pair pairs[kWarps];
  long long seg[kWarps];  // per-segment sums, in id order
  long long scan[kWarps];
  float fred[kWarps];
  unsigned ured[kWarps];
  Pick pick;
  int qualified, top;
  long long found;
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ unsigned warp_max(unsigned v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = max(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ long long warp_sum(long long v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
template <typename V>
__device__ __forceinline__ V warp_scan(V v) {  // inclusive
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const V u = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// The block's maximum (of values >= `none`); every thread gets it.
template <typename V>
__device__ __forceinline__ V block_max(V v, V* scratch, V none) {
  v = warp_max(v);
  __syncthreads();  // scratch may still be read by the previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  return warp_max(lane < kWarps ? scratch[lane] : none);
}

// Inclusive scans over the block of one value per thread, in thread order; `total` gets the block's sum. Each
// warp scans the warp sums itself, and a last barrier keeps `scratch` until every thread has read it.
__device__ __forceinline__ Pair block_scan(Pair v, Pair* scratch, Pair& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v.c = warp_scan(v.c);
  v.m = warp_scan(v.m);
  __syncthreads();  // scratch may still be read by the previous scan
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  Pair w = lane < kWarps ? scratch[lane] : Pair{0, 0};
  w.c = warp_scan(w.c);
  w.m = warp_scan(w.m);
  __syncthreads();
  const int from = warp > 0 ? warp - 1 : 0;
  const int before_c = __shfl_sync(kFull, w.c, from);
  const long long before_m = __shfl_sync(kFull, w.m, from);
  total = {__shfl_sync(kFull, w.c, kWarps - 1), __shfl_sync(kFull, w.m, kWarps - 1)};
  if (warp > 0) {
    v.c += before_c;
    v.m += before_m;
  }
  return v;
}
__device__ __forceinline__ long long block_scan(long long v, long long* scratch, long long& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_scan(v);
  __syncthreads();
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  long long w = lane < kWarps ? scratch[lane] : 0;
  w = warp_scan(w);
  __syncthreads();
  const long long before = __shfl_sync(kFull, w, warp > 0 ? warp - 1 : 0);
  total = __shfl_sync(kFull, w, kWarps - 1);
  return warp > 0 ? v + before : v;
}

// Level l of a radix select reads the key's bits 31..21, 20..10, 9..0.
__device__ __forceinline__ int level_shift(int level) { return level == 0 ? 21 : level == 1 ? 10 : 0; }
__device__ __forceinline__ int level_bins(int level) { return level == 2 ? 1024 : 2048; }

// Histogram by digit of the keys >= lowest that match `prefix` on `mask` (counts; masses if with_mass). Key 0
// (every token below 2^-32 of the largest: most of an LLM's vocabulary) is digit 0 at every level and weighs
// nothing, so it is counted in registers and added once a warp, not with an atomic a token on one bin.
template <typename T>
__device__ __forceinline__ void histogram(const Row<T>& r, Shared& s, int level, uint32_t prefix, uint32_t mask,
                                          uint32_t lowest, bool with_mass) {
  for (int i = threadIdx.x; i < kBins; i += kThreads) {
    s.cnt[i] = 0;
    s.mass[i] = 0;
  }
  if (threadIdx.x == 0) {
    s.qualified = kBins;
    s.top = -1;
  }
  __syncthreads();
  const int shift = level_shift(level);
  const uint32_t digits = static_cast<uint32_t>(level_bins(level) - 1);
  long long zeros = 0;
  for_each(r, [&](int, float v) {
    const uint32_t key = r.key(v);
    if (key == 0) {
      ++zeros;
    } else if (key >= lowest && (key & mask) == prefix) {
      const uint32_t d = (key >> shift) & digits;
      atomicAdd(&s.cnt[d], 1u);
      if (with_mass) atomicAdd(&s.mass[d], static_cast<unsigned long long>(weight_of(key)));
    }
  });
  zeros = warp_sum(zeros);
  if (threadIdx.x % 32 == 0 && zeros > 0 && lowest == 0 && prefix == 0)  // key 0 is in the range
    atomicAdd(&s.cnt[0], static_cast<unsigned>(zeros));
  __syncthreads();
}

// This thread's kOwned bins, highest first (thread 0 owns the top ones; none past the level's bins), their
// counts and masses, and the counts and mass of every bin above them.
struct Owned {
  int top_bin;  // bin of index 0; index i is top_bin - i
  int c[kOwned];
  long long m[kOwned];
  Pair above, total;  // of the bins above them; of every bin
};
__device__ __forceinline__ Owned owned_bins(Shared& s, int level) {
  Owned o;
  o.top_bin = level_bins(level) - 1 - kOwned * static_cast<int>(threadIdx.x);
  Pair own = {0, 0};
#pragma unroll
  for (int i = 0; i < kOwned; ++i) {
    const bool mine = o.top_bin - i >= 0;
    o.c[i] = mine ? static_cast<int>(s.cnt[o.top_bin - i]) : 0;
    o.m[i] = mine ? static_cast<long long>(s.mass[o.top_bin - i]) : 0;
    own.c += o.c[i];
    own.m += o.m[i];
  }
  const Pair incl = block_scan(own, s.pairs, o.total);
  o.above = {incl.c - own.c, incl.m - own.m};
  return o;
}

// Step 2: the key of rank k (1-based, from the largest). ties: how many of its equal keys the first k hold;
// equal: how many tokens have it; above_mass: the mass of the keys above it (0 unless with_mass).
template <typename T>
__device__ void select_kth(const Row<T>& r, Shared& s, long long k, bool with_mass, uint32_t& tau, long long& ties,
                           long long& equal, long long& above_mass) {
  uint32_t prefix = 0, mask = 0;
  int rank = static_cast<int>(k);  // k < vocab <= 2^21
  above_mass = 0;
  for (int level = 0; level < 3; ++level) {
    histogram(r, s, level, prefix, mask, 0u, with_mass);
    const Owned o = owned_bins(s, level);
    int above_c = o.above.c;
    long long above_m = o.above.m;
#pragma unroll
    for (int i = 0; i < kOwned; ++i) {  // exactly one bin holds the rank: above < rank <= above + count
      if (above_c < rank && rank <= above_c + o.c[i]) s.pick = {o.top_bin - i, above_c, o.c[i], above_m};
      above_c += o.c[i];
      above_m += o.m[i];
    }
    __syncthreads();
    const Pick p = s.pick;
    const int shift = level_shift(level);
    prefix |= static_cast<uint32_t>(p.bin) << shift;
    mask |= static_cast<uint32_t>(level_bins(level) - 1) << shift;
    rank -= p.above_c;
    above_mass += p.above_m;
    equal = p.count;
  }
  tau = prefix;
  ties = rank;
}

// Step 3: the smallest key >= lowest whose mass above is < big (big = p W_k; where k is off, W_k is the row's
// mass, known from the first histogram: big_from_total), or where none is (big <= 0 or NaN: the first token
// alone) the largest key. above: the mass of every key above it; equal: how many tokens have it.
template <typename T>
__device__ void select_nucleus(const Row<T>& r, Shared& s, uint32_t lowest, double p, bool big_from_total, double& big,
                               uint32_t& tau, long long& above, long long& equal) {
  uint32_t prefix = 0, mask = 0;
  long long base = 0;  // the mass of the keys above the prefix's range
  for (int level = 0; level < 3; ++level) {
    histogram(r, s, level, prefix, mask, lowest, true);
    const Owned o = owned_bins(s, level);
    if (level == 0 && big_from_total) big = p * static_cast<double>(o.total.m);  // W_k: the row's mass
    long long above_m = base + o.above.m;
#pragma unroll
    for (int i = 0; i < kOwned; ++i) {  // the qualifying bins are the nonempty ones from some bin up: the lowest
      if (o.c[i] > 0) {
        atomicMax(&s.top, o.top_bin - i);
        if (static_cast<double>(above_m) < big) atomicMin(&s.qualified, o.top_bin - i);
      }
      above_m += o.m[i];
    }
    __syncthreads();
    const int bin = s.qualified < kBins ? s.qualified : s.top;
    above_m = base + o.above.m;
#pragma unroll
    for (int i = 0; i < kOwned; ++i) {
      if (o.top_bin - i == bin) s.pick = {bin, 0, o.c[i], above_m};
      above_m += o.m[i];
    }
    __syncthreads();
    const Pick pk = s.pick;
    const int shift = level_shift(level);
    prefix |= static_cast<uint32_t>(pk.bin) << shift;
    mask |= static_cast<uint32_t>(level_bins(level) - 1) << shift;
    base = pk.above_m;
    equal = pk.count;
  }
  tau = prefix;
  above = base;
}

// Each warp's sum of val(col, key) over its segment, into s.seg; s.found reset for locate.
template <typename T, typename Val>
__device__ __forceinline__ void segment_sums(const Row<T>& r, Shared& s, Val&& val) {
  long long sum = 0;
  for_each(r, [&](int col, float v) { sum += val(col, r.key(v)); });
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) s.seg[threadIdx.x / 32] = sum;
  if (threadIdx.x == 0) s.found = -1;
  __syncthreads();
}

// The first token, in id order, where the running sum of val exceeds target (after segment_sums with the same
// val), or -1 where none does. The block walks the segment holding it, a group a thread, kThreads groups a step.
template <typename T, typename Val>
__device__ __forceinline__ long long locate(const Row<T>& r, Shared& s, Val&& val, long long target) {
  constexpr int W = Row<T>::W;
  int owner = -1;
  long long base = 0;
  for (int i = 0; i < kWarps; ++i) {
    if (owner < 0) {
      if (base + s.seg[i] > target) owner = i;
      else base += s.seg[i];
    }
  }
  if (owner >= 0) {  // block-uniform
    const int end = r.end(owner);
    for (int g0 = r.begin(owner); g0 < end; g0 += kThreads) {
      const int g = g0 + static_cast<int>(threadIdx.x);
      const uint4 v = g < end ? r.load(g) : make_uint4(0u, 0u, 0u, 0u);
      long long own = 0;
      if (g < end) {
#pragma unroll
        for (int j = 0; j < W; ++j)
          if (g * W + j < r.vocab) own += val(g * W + j, r.key(Row<T>::value(v, j)));
      }
      long long total;
      const long long incl = base + block_scan(own, s.scan, total);
      if (incl - own <= target && target < incl) {  // one thread: its group holds the token
        long long run = incl - own;
        bool done = false;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          if (!done && g * W + j < r.vocab) {
            run += val(g * W + j, r.key(Row<T>::value(v, j)));
            if (run > target) {
              s.found = g * W + j;
              done = true;
            }
          }
        }
      }
      if (base + total > target) break;  // block-uniform
      base += total;
    }
  }
  __syncthreads();
  const long long found = s.found;
  __syncthreads();  // read before the next segment_sums resets it
  return found;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    sample_kernel(int64_t* __restrict__ out, const T* __restrict__ x, int64_t row_stride, int64_t vocab,
                  const int64_t* __restrict__ top_k, const float* __restrict__ top_p,
                  const float* __restrict__ temperature, const int64_t* __restrict__ seed_offset, bool from_logits) {
  __shared__ Shared s;
  rl::wait_for_prior_grids();
  const int64_t b = blockIdx.x;
  if (vocab == 1) {  // one token: every rule keeps it
    if (threadIdx.x == 0) out[b] = 0;
    return;
  }
  Row<T> r;
  r.ptr = x + b * row_stride;
  r.vocab = static_cast<int>(vocab);
  r.groups = (r.vocab + Row<T>::W - 1) / Row<T>::W;
  r.seg = (r.groups + kWarps - 1) / kWarps;
  r.aligned = (reinterpret_cast<unsigned long long>(r.ptr) & 15ull) == 0;
  r.logits = from_logits;
  r.t = 1.0f;
  bool greedy = false;
  if (temperature != nullptr) {
    r.t = temperature[b];
    greedy = !(r.t > 0.0f);
    if (greedy) r.t = 1.0f;
  }
  long long k = top_k != nullptr ? top_k[b] : vocab;
  if (k <= 0 || k >= vocab) k = vocab;
  if (greedy) k = 1;
  const bool k_cut = k < vocab;
  double p = 1.0;
  if (top_p != nullptr) {
    p = top_p[b];
    if (p != p) p = 1.0;
  }
  // p >= 1 keeps every positive weight of the top k (it may drop weight-0 tokens, which no draw lands on); with
  // k = 1 there is one token to keep.
  const bool p_cut = p < 1.0 && k != 1;

  // Step 1: the largest value.
  float m = -kInf;
  for_each(r, [&](int, float v) {
    v = from_logits ? (v != v ? -kInf : v) : (v != v ? 0.0f : fmaxf(v, 0.0f));
    m = fmaxf(m, fminf(v, kFltMax));
  });
  r.m = block_max(m, s.fred, -kInf);

  // Step 2: the first k are every key > tau_k and the first ties_k tokens of key tau_k.
  uint32_t tau_k = 0;
  long long ties_k = 0, equal_k = -1, above_k = 0;  // equal_k -1: not counted
  if (k == 1) {
    unsigned top = 0;
    for_each(r, [&](int, float v) { top = max(top, r.key(v)); });
    tau_k = block_max(top, s.ured, 0u);
    ties_k = 1;
  } else if (k_cut) {
    select_kth(r, s, k, p_cut, tau_k, ties_k, equal_k, above_k);
  }

  // Step 3: the kept set is every key > tau_f and the first n_f tokens of key tau_f, in id order.
  uint32_t tau_f = 0;
  long long n_f = 0, equal_f = -1;
  bool all = false, single = false;
  if (p_cut) {
    double big = k_cut ? p * static_cast<double>(above_k + ties_k * weight_of(tau_k)) : 0.0;
    long long above_f = 0;
    select_nucleus(r, s, tau_k, p, !k_cut, big, tau_f, above_f, equal_f);
    const long long group = k_cut && tau_f == tau_k ? ties_k : equal_f;
    long long n = group;
    const long long w_f = weight_of(tau_f);
    if (big > 0.0 && w_f > 0) {  // how many r >= 0 have above_f + r w_f < big: near c0 = (big - above_f) / w_f
      const double q = (big - static_cast<double>(above_f)) / static_cast<double>(w_f);
      const long long c0 = static_cast<long long>(floor(q));
      n = c0 - 2;
      for (int d = -2; d < 2; ++d) n += static_cast<double>(above_f + (c0 + d) * w_f) < big;
    }
    n = min(max(n, 1LL), group);
    n_f = big > 0.0 ? n : 1;
    single = n_f == 1 && above_f == 0;  // no key above tau_f (each has a positive weight) and one of it
  } else if (k_cut) {
    tau_f = tau_k;
    n_f = ties_k;
    equal_f = equal_k;
    single = k == 1;
  } else {
    all = true;  // tau_f = 0, no cut in id order: every token
  }

  // Step 4: where the tie group of tau_f is split (or one token is kept), the id of its n_f-th token.
  long long answer = -1;
  int id_end = r.vocab;
  if (!all && (single || equal_f < 0 || n_f < equal_f)) {
    const auto tied = [&](int, uint32_t key) -> long long { return key == tau_f ? 1 : 0; };
    segment_sums(r, s, tied);
    const long long cut = locate(r, s, tied, n_f - 1);
    if (single) answer = cut;  // the only kept token (id 0 where every weight is 0: all are tied at key 0)
    else id_end = static_cast<int>(cut) + 1;
  }
  // The draw: t = floor(u W_L) (at most W_L - 1); the first id where the kept weights' running sum exceeds it.
  if (!single) {
    const auto kept = [&](int col, uint32_t key) -> long long {
      return key > tau_f || (key == tau_f && col < id_end) ? weight_of(key) : 0;
    };
    segment_sums(r, s, kept);
    long long w_l = 0;
    for (int i = 0; i < kWarps; ++i) w_l += s.seg[i];
    if (w_l == 0) {
      answer = 0;  // every weight 0: the first kept token is id 0
    } else {
      const double u = static_cast<double>(bits53(seed_offset[0], seed_offset[1], b)) * 1.1102230246251565e-16;
      const long long target = min(static_cast<long long>(floor(u * static_cast<double>(w_l))), w_l - 1);
      answer = locate(r, s, kept, target);
    }
  }
  if (threadIdx.x == 0) out[b] = answer;
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
