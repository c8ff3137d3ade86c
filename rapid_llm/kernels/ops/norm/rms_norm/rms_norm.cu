// rapid_llm row: {"name": "jit/rms_norm", "op": "rms_norm", "fn": "rms_norm", "dtypes": ["bf16", "fp16", "fp32"], "golden": {"verified": true, "max_abs_diff": 0.015625, "baseline": "native/rms_norm", "per_dtype": [["bf16", 0.015625], ["fp16", 0.00390625], ["fp32", 1.9073486328125e-06]]}, "graph_safe": true, "description": "promoted from rms_norm_cell.cu, launcher rms_norm()", "layouts": ["contiguous", "rows"]}
// rapid_llm tune: {"RL_ROW_VECS": [0, 1, 2, 4], "RL_ROW_STREAM": [0, 1]}
// rms_norm: out = x / sqrt(mean(x^2) + eps) * weight over the last dim, fp16 / bf16 / fp32.
// Sum of squares in fp32; the normalised value times the weight in fp32, rounded once.
// The kernels and their launch configuration are in rms_norm_kernels.cuh (kAdd = false), shared with
// fused_add_rms_norm.cu: one token row per block row, the row in registers as 16-byte vectors where
// hidden, alignment and row strides allow, else a two-pass scalar kernel.
//
// Since its promotion from notebook 06's cell: x and out are each addressed at their own
// row stride (in elements), so a slice x[:, :H] of a [T, 2H] buffer (vLLM's and
// FlashInfer's strided case) runs without a copy. The last dim must be contiguous and
// the leading dims one uniform stride; a row stride that keeps every row 16-byte aligned
// keeps the vector path, any other takes the scalar one.
//
// The tune line above declares this row's variants (rms_norm_kernels.cuh: the row path's vectors a thread,
// and streaming stores at decode sizes); 0 is the hand-chosen rule, and tune("jit/rms_norm") pins the
// fastest verified variant per GPU kind in tuned/<gpu kind>.json beside this file.
#include "common/rapid_llm.cuh"
#include "../rms_norm_kernels.cuh"

#if RL_HOST
void rms_norm(rl::Tensor out, rl::Tensor x, rl::Tensor weight, double eps) {
  // Step 1: validate.
  RL_CHECK(out.same_shape(x) && out.dtype() == x.dtype(), "rms_norm: out must match x's shape and dtype, got ",
           out.describe(), " vs ", x.describe());  // platform.must_match's words
  const int64_t hidden = rms_norm_detail::check_weight("rms_norm", x, weight);
  rl::check_cuda("rms_norm", {out, x, weight});  // device last: a CPU build checks the words above

  // Step 2: extract. An empty tensor launches nothing.
  const int64_t n = x.numel();
  if (n == 0) return;
  rl::check_contiguous("rms_norm", {weight});
  const int64_t x_stride = rl::row_stride("rms_norm", "x", x);
  const rms_norm_detail::RowStrides strides{rl::row_stride("rms_norm", "out", out), x_stride, 0};

  // Step 3: launch on torch's current stream; rl::launch_dependent checks every launch.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rms_norm_detail::launch_rms_norm<false>(out.data<T>(), x.data<T>(), static_cast<T*>(nullptr), weight.data<T>(),
                                            strides, n / hidden, hidden, x.element_size(), eps);
  });
}
RL_EXPORT(rms_norm, "rms_norm(out, x, weight, eps): out = x / sqrt(mean(x^2) + eps) * weight over the last dim")
#endif
