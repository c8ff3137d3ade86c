// moe_topk_gate CUDA row (jit/moe_topk_gate, verified on an H100: the routing mode, 0 rows with other ids):
// declared in this folder's __init__.py through cuda_row.py, since its two outputs of other dtypes fit no out rule.
// moe_topk_gate_launch(weights, ids, logits, bias, k, sigmoid, renormalize, num_groups, topk_groups): each
// token's k experts and their weights (the floor's contract, rapid_llm.kernels.ops.moe.moe_topk_gate.native).
// logits [T, E] bf16 / fp16 / fp32 (E <= 256, rows at any stride, the expert dim contiguous); bias [E] fp32
// or an empty tensor for none; weights [T, k] fp32 and ids [T, k] int32, contiguous. Scores in fp32 (softmax:
// exp(x - max) / sum, correctly rounded division; sigmoid: 1 / (1 + exp(-x)), a correctly rounded reciprocal);
// the choice on score + bias; groups: a group's score the sum of its two best choice values, the topk_groups
// best kept. The tie rule: a higher choice value first, among equal values the lower expert id, among equal
// group scores the lower group id; NaN ranks as -inf; an expert of a dropped group below every kept one (and,
// as in the floor, dropped experts among themselves in id order). Weights are the unbiased scores, over their
// sum (added in pick order) when renormalize (a zero or NaN sum left as is).
//
// One warp per token (4 per block), built for latency: a decode step's few tokens are one warp each, so the
// time is one warp's dependent chain. A lane holds 8 contiguous experts, 8 * lane .. 8 * lane + 7 (one 16-byte
// load of bf16 / fp16, two of fp32, where the rows and bias are 16-byte aligned; element loads otherwise).
// Ranking is on one int word per expert, order-preserving: a kept expert's word is its choice value's bits
// mapped so signed order is float order (-0 as +0), a dropped expert's is one below -inf's, a taken or absent
// one's INT_MIN. A pick is then: the lane's max of 8 words, the warp's max (redux.sync, sm_80), the lowest lane
// holding it (a ballot), and there the lowest expert holding it; equal words are equal choice values, so the
// lower id wins by construction. k is unrolled to 8 (predicated), so nothing is indexed at run time and
// nothing goes to local memory. Groups: where a group is a power-of-two run of whole lanes (size a multiple of
// 8, size / 8 a power of two: DeepSeek-V3's 32, 4 lanes), a lane's top two, an xor-shuffle merge inside the
// run, and each group's rank from the groups' scores by shuffle; other group sizes take the same steps through
// shared memory (a lane per group scans its keys). Reads the logits once, writes 8 bytes per pick.
#include "common/rapid_llm.cuh"

namespace gate_detail {

constexpr int kWarps = 4;
constexpr int kLanes = 32;
constexpr int kMaxExperts = 256;
constexpr int kPerLane = kMaxExperts / kLanes;  // a lane's contiguous experts: one 16-byte load of bf16 / fp16
constexpr int kMaxGroups = kMaxExperts / 2;     // a group has 2 experts or more
constexpr int kMaxK = 8;
static_assert(kPerLane == 8, "the word and top-two trees below are written for 8 experts a lane");

}  // namespace gate_detail

#if RL_DEVICE
namespace gate_detail {

constexpr unsigned kFull = 0xffffffffu;
// Rank words (higher first): a kept expert's is order_word(choice) in [-0x7f800000, 0x7f800000]; below it
// every dropped expert's, then the taken and absent ones'.
constexpr int kDropped = -0x7f800001;
constexpr int kTaken = -0x7fffffff - 1;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// A float's bits as an int whose signed order is the float order, -0 and +0 one word (they compare equal, so
// the tie rule must see them equal). Not for NaN: keys are NaN-free by then.
__device__ __forceinline__ int order_word(float v) {
  const int b = __float_as_int(v), sign = b >> 31;
  return (b ^ (sign & 0x7fffffff)) - sign;  // a negative b: -(its magnitude); three instructions, no branch
}

__device__ __forceinline__ float from_order_word(int w) { return __int_as_float(w >= 0 ? w : (-w) | 0x80000000); }

__device__ __forceinline__ int warp_max(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(kFull, v);  // one instruction where the 5 shuffle rounds below are 10 dependent ones
#else
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(kFull, v, offset));
  return v;
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFull, v, offset);
  return v;
}

// ---------------------------------------------------------------- loads

__device__ __forceinline__ void unpack8(const uint4& v, float (&x)[kPerLane], __nv_bfloat16) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < kPerLane / 2; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void unpack8(const uint4& v, float (&x)[kPerLane], __half) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < kPerLane / 2; ++i) {
    const float2 f = __half22float2(h[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void load4(const float* __restrict__ p, float* x) {
  const float4 v = __ldg(reinterpret_cast<const float4*>(p));
  x[0] = v.x;
  x[1] = v.y;
  x[2] = v.z;
  x[3] = v.w;
}

// A lane's 8 logits (-inf past E) and bias values (0 without a bias: score + 0 is the score, as no score is -0).
// `vector`: the rows and the bias are 16-byte aligned (the launcher's check), so a lane whose 8 experts all
// exist loads them whole; a lane across the end of the row, or any unaligned row, loads element by element.
template <typename T>
__device__ __forceinline__ void load_lane(const T* __restrict__ row, const float* __restrict__ bias, int first,
                                          int experts, bool vector, float (&x)[kPerLane], float (&b)[kPerLane]) {
  const float inf = __int_as_float(0x7f800000);
  if (vector && first + kPerLane <= experts) {
    if constexpr (sizeof(T) == 4) {
      load4(reinterpret_cast<const float*>(row) + first, x);
      load4(reinterpret_cast<const float*>(row) + first + 4, x + 4);
    } else {
      unpack8(__ldg(reinterpret_cast<const uint4*>(row + first)), x, T{});
    }
    if (bias != nullptr) {
      load4(bias + first, b);
      load4(bias + first + 4, b + 4);
    } else {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) b[i] = 0.0f;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = first + i;
    x[i] = e < experts ? to_float(row[e]) : -inf;
    b[i] = e < experts && bias != nullptr ? bias[e] : 0.0f;
  }
}

// ---------------------------------------------------------------- scores

// 1 / d correctly rounded for d of a biased exponent in 1..252, as the compiler's own __frcp_rn does it there:
// the hardware's approximate reciprocal and one Newton step. False where d is out of that range.
__device__ __forceinline__ bool rcp_rn_normal(float d, float& r) {
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  const float e = fmaf(d, r, -1.0f);
  r = fmaf(r, -e, r);
  return ((__float_as_uint(d) + 0x01800000u) & 0x7f800000u) > 0x01ffffffu;
}

// 1 / (1 + exp(-x)), the reciprocal correctly rounded (== __fdiv_rn(1, ...)). __frcp_rn branches to its slow
// path for each value, which keeps the 8 from overlapping; here the 8 run side by side and one branch takes
// __frcp_rn for all where an expert's d = 1 + exp(-x) is out of range (x < -87, NaN). Experts past E (x = -inf)
// score 0 and never take that branch: a short row's idle lanes must not make the others wait.
__device__ __forceinline__ void sigmoid_scores(const float (&x)[kPerLane], int first, int experts,
                                               float (&score)[kPerLane]) {
  float d[kPerLane];
  bool fast = true;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    d[i] = 1.0f + expf(-x[i]);
    float r;
    const bool in_range = rcp_rn_normal(d[i], r);
    fast &= in_range || first + i >= experts;
    score[i] = first + i < experts ? r : 0.0f;
  }
  if (!fast) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) score[i] = first + i < experts ? __frcp_rn(d[i]) : 0.0f;
  }
}

// exp(x - max) / sum over the row. The max ignores NaN: a NaN logit makes the sum NaN, so every score is NaN
// whatever the max is (as torch's softmax), and +inf makes inf - inf NaN the same way.
__device__ __forceinline__ void softmax_scores(const float (&x)[kPerLane], int first, int experts,
                                               float (&score)[kPerLane]) {
  float m = x[0];
#pragma unroll
  for (int i = 1; i < kPerLane; ++i) m = fmaxf(m, x[i]);
  m = from_order_word(warp_max(order_word(m)));
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    score[i] = first + i < experts ? expf(x[i] - m) : 0.0f;
    s += score[i];
  }
  s = warp_sum(s);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) score[i] = __fdiv_rn(score[i], s);
}

// ---------------------------------------------------------------- groups

// The top two of a1 >= a2 and b1 >= b2 (values, not experts: a tie counts twice, as the floor's sort does).
__device__ __forceinline__ void merge_top2(float& t1, float& t2, float b1, float b2) {
  const float lo = fminf(t1, b1);
  t1 = fmaxf(t1, b1);
  t2 = fmaxf(lo, fmaxf(t2, b2));
}

// A lane's top two keys, a tree of depth 3 rather than a chain of 8.
__device__ __forceinline__ void lane_top2(const float (&key)[kPerLane], float& t1, float& t2) {
  float p1[4], p2[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    p1[i] = fmaxf(key[2 * i], key[2 * i + 1]);
    p2[i] = fminf(key[2 * i], key[2 * i + 1]);
  }
  merge_top2(p1[0], p2[0], p1[1], p2[1]);
  merge_top2(p1[2], p2[2], p1[3], p2[3]);
  merge_top2(p1[0], p2[0], p1[2], p2[2]);
  t1 = p1[0];
  t2 = p2[0];
}

// A group's score: the sum of its two best keys, NaN (inf - inf) as -inf, as the floor ranks it.
__device__ __forceinline__ float group_score(float t1, float t2) {
  const float both = t1 + t2;
  return both != both ? -__int_as_float(0x7f800000) : both;
}

// Does group g (score mine) rank among the topk_groups best? `score_of(h)` is group h's score; kUnroll
// shuffles (or loads) in flight at a time.
template <int kUnroll, typename ScoreOf>
__device__ __forceinline__ bool group_kept(float mine, int g, int groups, int topk_groups, ScoreOf score_of) {
  int rank = 0;
#pragma unroll kUnroll
  for (int h = 0; h < groups; ++h) {
    const float o = score_of(h);
    rank += static_cast<int>(o > mine) | (static_cast<int>(o == mine) & static_cast<int>(h < g));  // no branch
  }
  return rank < topk_groups;
}

// Groups of a power-of-two run of whole lanes (span = 1 << shift lanes, groups * span <= 32): the lane's top
// two, merged by xor shuffles inside the run, and the ranks from the run leaders' scores. All 8 of a lane's
// experts share a group, so the answer is all or none of them.
__device__ __forceinline__ unsigned keep_by_lanes(const float (&key)[kPerLane], int lane, int shift, int groups,
                                                  int topk_groups) {
  const int span = 1 << shift;
  float t1, t2;
  lane_top2(key, t1, t2);
#pragma unroll
  for (int offset = 1; offset < kLanes; offset *= 2) {
    if (offset < span) {
      const float o1 = __shfl_xor_sync(kFull, t1, offset), o2 = __shfl_xor_sync(kFull, t2, offset);
      merge_top2(t1, t2, o1, o2);
    }
  }
  const float mine = group_score(t1, t2);
  const bool kept = group_kept<8>(mine, lane >> shift, groups, topk_groups,
                                  [&](int h) { return __shfl_sync(kFull, mine, h << shift); });
  return kept ? 0xffu : 0u;
}

// Shared memory of the general grouping (one per warp).
struct GroupScratch {
  float keys[kMaxExperts];
  float score[kMaxGroups];
  int kept[kMaxGroups];
};

// Any other group size (a group across lanes' runs, or inside one): the keys through shared memory, a lane per
// group scanning its keys for the top two, a lane per group ranking it. Bit i: expert first + i is kept.
__device__ __forceinline__ unsigned keep_by_scan(const float (&key)[kPerLane], GroupScratch& s, int lane, int first,
                                              int experts, int size, int groups, int topk_groups) {
  const float inf = __int_as_float(0x7f800000);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (first + i < experts) s.keys[first + i] = key[i];
  }
  __syncwarp();
#pragma unroll 1
  for (int g = lane; g < groups; g += kLanes) {
    float t1 = -inf, t2 = -inf;
#pragma unroll 1
    for (int j = 0; j < size; ++j) merge_top2(t1, t2, s.keys[g * size + j], -inf);
    s.score[g] = group_score(t1, t2);
  }
  __syncwarp();
#pragma unroll 1
  for (int g = lane; g < groups; g += kLanes) {
    s.kept[g] = group_kept<1>(s.score[g], g, groups, topk_groups, [&](int h) { return s.score[h]; });
  }
  __syncwarp();
  unsigned keep = 0;
  int g = first / size, r = first - g * size;  // expert first + i's group, stepped rather than divided
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (first + i < experts && s.kept[g]) keep |= 1u << i;
    if (++r == size) {
      r = 0;
      ++g;
    }
  }
  return keep;
}

// ---------------------------------------------------------------- picks

__device__ __forceinline__ int lane_max(const int (&w)[kPerLane]) {
  const int a = max(max(w[0], w[1]), max(w[2], w[3])), b = max(max(w[4], w[5]), max(w[6], w[7]));
  return max(a, b);
}

// v[i] by the bits of i (0..7): a select tree, not an index, so v stays in registers.
__device__ __forceinline__ float select8(const float (&v)[kPerLane], int i) {
  const float a = i & 1 ? v[1] : v[0], b = i & 1 ? v[3] : v[2], c = i & 1 ? v[5] : v[4], d = i & 1 ? v[7] : v[6];
  const float ab = i & 2 ? b : a, cd = i & 2 ? d : c;
  return i & 4 ? cd : ab;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * kLanes)
    gate_kernel(float* __restrict__ weights, int* __restrict__ ids, const T* __restrict__ logits,
                const float* __restrict__ bias, int64_t tokens, int experts, int64_t row_stride, int k,
                bool sigmoid, bool renormalize, int num_groups, int group_size, int topk_groups, bool vector) {
  __shared__ GroupScratch scratch[kWarps];
  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= tokens) return;  // whole warps leave together: the warp collectives below see full warps
  const int first = lane * kPerLane;

  rl::wait_for_prior_grids();
  float x[kPerLane], b[kPerLane];
  load_lane(logits + t * row_stride, bias, first, experts, vector, x, b);
  rl::allow_dependent_grids();

  float score[kPerLane], key[kPerLane];
  if (sigmoid) {
    sigmoid_scores(x, first, experts, score);
  } else {
    softmax_scores(x, first, experts, score);
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const float c = score[i] + b[i];
    key[i] = c != c ? -__int_as_float(0x7f800000) : c;
  }

  unsigned keep = 0xffu;
  if (num_groups > 1) {
    const int span = group_size / kPerLane;
    if (group_size % kPerLane == 0 && (span & (span - 1)) == 0) {
      keep = keep_by_lanes(key, lane, __ffs(span) - 1, num_groups, topk_groups);
    } else {
      keep = keep_by_scan(key, scratch[warp], lane, first, experts, group_size, num_groups, topk_groups);
    }
  }
  int word[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int kept = keep >> i & 1 ? order_word(key[i]) : kDropped;
    word[i] = first + i < experts ? kept : kTaken;
  }

  // Pick j: the best word in the warp; its lowest lane; there its lowest expert, marked taken. Lane j keeps
  // pick j for the coalesced write below; every lane adds the weights in pick order.
  float my_weight = 0.0f, total = 0.0f;
  int my_id = 0;
#pragma unroll
  for (int j = 0; j < kMaxK; ++j) {
    if (j >= k) break;
    const int mine = lane_max(word);
    const int best = warp_max(mine);
    const int winner = __ffs(__ballot_sync(kFull, mine == best)) - 1;
    unsigned hits = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) hits |= static_cast<unsigned>(word[i] == best) << i;
    const unsigned lowest = hits & (0u - hits);
    const unsigned taken = lane == winner ? lowest : 0u;  // a select, not a branch: no divergence to rejoin
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) word[i] = taken >> i & 1 ? kTaken : word[i];
    const int at = __ffs(lowest) - 1;  // the winner's expert (meaningless in other lanes, never used there)
    const float w = __shfl_sync(kFull, select8(score, at), winner);
    const int id = winner * kPerLane + __shfl_sync(kFull, at, winner);
    if (lane == j) {
      my_weight = w;
      my_id = id;
    }
    total += w;
  }
  if (lane < k) {
    const bool divide = renormalize && total > 0.0f;
    weights[t * k + lane] = divide ? __fdiv_rn(my_weight, total) : my_weight;
    ids[t * k + lane] = my_id;
  }
}

}  // namespace gate_detail
#endif  // RL_DEVICE

#if RL_HOST
namespace gate_detail {

template <typename T>
__global__ void gate_kernel(float* __restrict__ weights, int* __restrict__ ids, const T* __restrict__ logits,
                            const float* __restrict__ bias, int64_t tokens, int experts, int64_t row_stride, int k,
                            bool sigmoid, bool renormalize, int num_groups, int group_size, int topk_groups,
                            bool vector);

// Every row's start 16-byte aligned, and the bias's: a lane's 8 experts are then whole 16-byte loads.
inline bool rows_aligned(const void* logits, int64_t row_bytes, const float* bias) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return aligned(logits) && row_bytes % 16 == 0 && (bias == nullptr || aligned(bias));
}

}  // namespace gate_detail

void moe_topk_gate_launch(rl::Tensor weights, rl::Tensor ids, rl::Tensor logits, rl::Tensor bias, int64_t k,
                          bool sigmoid, bool renormalize, int64_t num_groups, int64_t topk_groups) {
  // Step 1: validate (the op's checks ran before this call; these guard what a wrong pointer would break).
  const char* op = "moe_topk_gate";
  RL_CHECK(logits.dim() == 2, op, ": logits must be [tokens, experts], got ", logits.describe());
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  RL_CHECK(experts >= 1 && experts <= gate_detail::kMaxExperts, op, ": logits must have 1 to 256 experts, got ",
           experts);
  RL_CHECK(k >= 1 && k <= gate_detail::kMaxK && k <= experts, op, ": k must be at most 8 and at most the ", experts,
           " experts, got ", k);
  RL_CHECK(num_groups >= 1 && experts % num_groups == 0 && (num_groups == 1 || experts / num_groups >= 2) &&
               topk_groups >= 1 && topk_groups <= num_groups,
           op, ": num_groups must divide the ", experts, " experts into groups of 2 or more, topk_groups at most ",
           "num_groups, got ", num_groups, " and ", topk_groups);
  RL_CHECK(weights.dim() == 2 && weights.size(0) == tokens && weights.size(1) == k && weights.dtype() == RL_FP32, op,
           ": out_weights must be [", tokens, ", ", k, "] fp32, got ", weights.describe());
  RL_CHECK(ids.dim() == 2 && ids.size(0) == tokens && ids.size(1) == k && ids.dtype() == RL_INT32, op,
           ": out_ids must be [", tokens, ", ", k, "] int32, got ", ids.describe());
  const bool has_bias = bias.numel() > 0;
  RL_CHECK(!has_bias || (bias.dim() == 1 && bias.size(0) == experts && bias.dtype() == RL_FP32), op,
           ": bias must be [", experts, "] fp32 (one per expert), got ", bias.describe());
  RL_CHECK(experts == 1 || logits.stride(1) == 1, op, ": logits' expert dim must be contiguous, got ",
           logits.describe());
  if (has_bias) {
    rl::check_cuda(op, {weights, ids, logits, bias});
    rl::check_contiguous(op, {weights, ids, bias});
  } else {
    rl::check_cuda(op, {weights, ids, logits});
    rl::check_contiguous(op, {weights, ids});
  }

  // Step 2: extract. No tokens launches nothing.
  if (tokens == 0) return;
  const int64_t row_stride = tokens > 1 ? logits.stride(0) : experts;
  const float* b = has_bias ? bias.data<float>() : nullptr;
  const bool vector = gate_detail::rows_aligned(logits.data_ptr(), row_stride * logits.element_size(), b);

  // Step 3: launch on torch's current stream (rl::launch_dependent checks the launch).
  const dim3 grid(static_cast<unsigned>(rl::cdiv(tokens, gate_detail::kWarps)));
  const dim3 block(gate_detail::kWarps * gate_detail::kLanes);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(logits, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch_dependent(gate_detail::gate_kernel<T>, grid, block, 0, weights.data<float>(), ids.data<int32_t>(),
                         static_cast<const T*>(logits.data<T>()), b, tokens, static_cast<int>(experts), row_stride,
                         static_cast<int>(k), sigmoid, renormalize, static_cast<int>(num_groups),
                         static_cast<int>(experts / num_groups), static_cast<int>(topk_groups),
                         vector);
  });
}
RL_EXPORT(moe_topk_gate_launch, "moe_topk_gate_launch(weights, ids, logits, bias, k, sigmoid, renormalize, "
                                "num_groups, topk_groups): each token's k experts and weights (bias: empty for none)")
#endif  // RL_HOST
