// moe_topk_gate CUDA row (jit/moe_topk_gate, verified on an H100): declared in this folder's __init__.py through cuda_row.py, since its two outputs of other dtypes fit no out rule.
// moe_topk_gate_launch(weights, ids, logits, bias, k, sigmoid, renormalize, num_groups, topk_groups): each
// token's k experts and their weights (the floor's contract, rapid_llm.kernels.ops.moe.moe_topk_gate.native).
// logits [T, E] bf16 / fp16 / fp32 (E <= 256, rows at any stride, the expert dim contiguous); bias [E] fp32
// or an empty tensor for none; weights [T, k] fp32 and ids [T, k] int32, contiguous. Scores in fp32 (softmax:
// exp(x - max) / sum, correctly rounded division; sigmoid: 1 / (1 + exp(-x))); the choice on score + bias;
// groups: a group's score the sum of its two best choice values, the topk_groups best kept. The tie rule:
// a higher choice value first, among equal values the lower expert id, among equal group scores the lower
// group id; NaN ranks as -inf; an expert of a dropped group below every kept one. Weights are the unbiased
// scores, over their sum when renormalize (a zero sum left as is).
//
// One warp per token (4 per block): a lane holds experts lane, lane + 32, ... (8 at most) in registers and
// the warp's keys in shared memory for the group scores. Each of the k picks is a warp reduction of
// (tier, key, id) under the tie rule, so no order is left to the hardware. Reads the logits once, writes
// 8 bytes per pick.
#include "common/rapid_llm.cuh"

namespace gate_detail {

constexpr int kWarps = 4;
constexpr int kLanes = 32;
constexpr int kMaxExperts = 256;
constexpr int kPerLane = kMaxExperts / kLanes;
constexpr int kMaxK = 8;

}  // namespace gate_detail

#if RL_DEVICE
namespace gate_detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// A candidate under the tie rule: a lower tier first (0 kept, 1 dropped group, 2 none), then a higher key,
// then a lower id.
struct Pick {
  int tier;
  float key;
  int id;
};

__device__ __forceinline__ bool better(const Pick& a, const Pick& b) {
  if (a.tier != b.tier) return a.tier < b.tier;
  if (a.key != b.key) return a.key > b.key;
  return a.id < b.id;
}

__device__ __forceinline__ Pick warp_best(Pick p) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    Pick q{__shfl_xor_sync(0xffffffffu, p.tier, offset), __shfl_xor_sync(0xffffffffu, p.key, offset),
           __shfl_xor_sync(0xffffffffu, p.id, offset)};
    if (better(q, p)) p = q;
  }
  return p;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * kLanes)
    gate_kernel(float* __restrict__ weights, int* __restrict__ ids, const T* __restrict__ logits,
                const float* __restrict__ bias, int64_t tokens, int experts, int64_t row_stride, int k,
                bool sigmoid, bool renormalize, int num_groups, int topk_groups) {
  __shared__ float keys[kWarps][kMaxExperts];
  __shared__ int kept[kWarps][kMaxExperts / 2];
  rl::wait_for_prior_grids();
  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= tokens) return;  // whole warps leave together: the shuffles below see full warps
  const float inf = __int_as_float(0x7f800000);
  const T* row = logits + t * row_stride;

  float x[kPerLane], score[kPerLane], key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + i * kLanes;
    x[i] = e < experts ? to_float(row[e]) : -inf;
  }
  if (sigmoid) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) score[i] = __fdiv_rn(1.0f, 1.0f + expf(-x[i]));
  } else {
    float m = -inf;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) m = x[i] != x[i] ? x[i] : fmaxf(m, x[i]);  // NaN spreads, as torch's max
    m = warp_max(m);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      score[i] = lane + i * kLanes < experts ? expf(x[i] - m) : 0.0f;
      s += score[i];
    }
    s = warp_sum(s);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) score[i] = __fdiv_rn(score[i], s);
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + i * kLanes;
    const float c = e < experts && bias != nullptr ? score[i] + bias[e] : score[i];
    key[i] = c != c ? -inf : c;
    if (e < experts) keys[warp][e] = key[i];
  }

  int tier[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) tier[i] = lane + i * kLanes < experts ? 0 : 2;
  if (num_groups > 1) {
    __syncwarp();
    const int size = experts / num_groups;
    float* gscore = reinterpret_cast<float*>(kept[warp]);  // group scores first, then the kept flags
    for (int g = lane; g < num_groups; g += kLanes) {
      const float* k0 = keys[warp] + g * size;
      int at = 0;
      for (int j = 1; j < size; ++j) at = k0[j] > k0[at] ? j : at;
      float second = -inf;
      for (int j = 0; j < size; ++j) second = j != at && k0[j] > second ? k0[j] : second;
      const float both = k0[at] + second;
      gscore[g] = both != both ? -inf : both;
    }
    __syncwarp();
    int keep_flags[kMaxExperts / 2 / kLanes];
#pragma unroll
    for (int i = 0; i < kMaxExperts / 2 / kLanes; ++i) {
      const int g = lane + i * kLanes;
      int rank = 0;
      if (g < num_groups) {
        for (int h = 0; h < num_groups; ++h) rank += gscore[h] > gscore[g] || (gscore[h] == gscore[g] && h < g);
      }
      keep_flags[i] = g < num_groups && rank < topk_groups;
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kMaxExperts / 2 / kLanes; ++i) {
      const int g = lane + i * kLanes;
      if (g < num_groups) kept[warp][g] = keep_flags[i];
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + i * kLanes;
      if (e < experts && !kept[warp][e / size]) tier[i] = 1;
    }
  }

  float w[kMaxK];
  int chosen[kMaxK];
  float total = 0.0f;
  for (int j = 0; j < k; ++j) {
    Pick p{3, -inf, 0x7fffffff};
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const Pick q{tier[i], key[i], lane + i * kLanes};
      if (better(q, p)) p = q;
    }
    p = warp_best(p);
    float mine = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + i * kLanes == p.id) {
        mine = score[i];
        tier[i] = 3;  // taken
      }
    }
    const float pick = __shfl_sync(0xffffffffu, mine, p.id % kLanes);
    if (j < kMaxK) {
      w[j] = pick;
      chosen[j] = p.id;
    }
    total += pick;
  }
  if (lane == 0) {
    const bool divide = renormalize && total > 0.0f;
    for (int j = 0; j < k && j < kMaxK; ++j) {
      weights[t * k + j] = divide ? __fdiv_rn(w[j], total) : w[j];
      ids[t * k + j] = chosen[j];
    }
  }
}

}  // namespace gate_detail
#endif  // RL_DEVICE

#if RL_HOST
namespace gate_detail {

template <typename T>
__global__ void gate_kernel(float* __restrict__ weights, int* __restrict__ ids, const T* __restrict__ logits,
                            const float* __restrict__ bias, int64_t tokens, int experts, int64_t row_stride, int k,
                            bool sigmoid, bool renormalize, int num_groups, int topk_groups);

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

  // Step 3: launch on torch's current stream (rl::launch_dependent checks the launch).
  const dim3 grid(static_cast<unsigned>(rl::cdiv(tokens, gate_detail::kWarps)));
  const dim3 block(gate_detail::kWarps * gate_detail::kLanes);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(logits, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch_dependent(gate_detail::gate_kernel<T>, grid, block, 0, weights.data<float>(), ids.data<int32_t>(),
                         static_cast<const T*>(logits.data<T>()), b, tokens, static_cast<int>(experts), row_stride,
                         static_cast<int>(k), sigmoid, renormalize, static_cast<int>(num_groups),
                         static_cast<int>(topk_groups));
  });
}
RL_EXPORT(moe_topk_gate_launch, "moe_topk_gate_launch(weights, ids, logits, bias, k, sigmoid, renormalize, "
                                "num_groups, topk_groups): each token's k experts and weights (bias: empty for none)")
#endif  // RL_HOST
