// rapid_llm row: {"name": "jit/fused_add_rms_norm", "op": "fused_add_rms_norm", "fn": "fused_add_rms_norm", "dtypes": ["bf16", "fp16", "fp32"], "golden": {"verified": true, "max_abs_diff": 0.03125, "baseline": "native/fused_add_rms_norm", "per_dtype": [["bf16", 0.03125], ["fp16", 0.00390625], ["fp32", 1.9073486328125e-06]]}, "graph_safe": true, "description": "one block per token row, x and residual in registers as 16-byte vectors (rms_norm_kernels.cuh)", "out": "none", "layouts": ["contiguous", "rows"]}
// fused_add_rms_norm, in place: residual += x (fp32 sum, rounded once into residual), then
// x = total / sqrt(mean(total^2) + eps) * weight of that fp32 total (not the rounded residual),
// fp16 / bf16 / fp32. The kernels and their launch configuration are in rms_norm_kernels.cuh.
// x and residual may each have a row stride (x[:, :H] of a [T, 2H] buffer): last dim contiguous,
// leading dims one uniform stride; the gaps between rows are never touched.
#include "common/rapid_llm.cuh"
#include "../rms_norm_kernels.cuh"

#if RL_HOST
void fused_add_rms_norm(rl::Tensor x, rl::Tensor residual, rl::Tensor weight, double eps) {
  // Step 1: validate.
  RL_CHECK(residual.same_shape(x) && residual.dtype() == x.dtype(),
           "fused_add_rms_norm: residual must match x's shape and dtype, got ", residual.describe(), " vs ",
           x.describe());  // platform.must_match's words
  const int64_t hidden = rms_norm_detail::check_weight("fused_add_rms_norm", x, weight);
  rl::check_cuda("fused_add_rms_norm", {x, residual, weight});  // device last: a CPU build checks the words above

  // Step 2: extract. An empty tensor launches nothing.
  const int64_t n = x.numel();
  if (n == 0) return;  // before the layout check: torch calls any empty tensor contiguous, whatever its strides
  rl::check_contiguous("fused_add_rms_norm", {weight});
  const int64_t x_stride = rl::row_stride("fused_add_rms_norm", "x", x);
  const rms_norm_detail::RowStrides strides{x_stride, x_stride,
                                            rl::row_stride("fused_add_rms_norm", "residual", residual)};

  // Step 3: launch on torch's current stream; rl::launch_dependent checks every launch. x is read, then overwritten.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, "fused_add_rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* x_p = x.data<T>();
    rms_norm_detail::launch_rms_norm<true>(x_p, x_p, residual.data<T>(), weight.data<T>(), strides, n / hidden,
                                           hidden, x.element_size(), eps);
  });
}
RL_EXPORT(fused_add_rms_norm, "fused_add_rms_norm(x, residual, weight, eps): in place, residual += x; x = rms_norm(residual)")
#endif
