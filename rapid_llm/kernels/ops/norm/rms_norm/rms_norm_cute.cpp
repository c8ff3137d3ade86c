// The launcher of cute/rms_norm: host code only. Its kernels are the CuTe DSL's (cute_kernel.py), compiled to
// a cubin by rapid_llm.kernels.toolchain.cute_build, which builds this file once per dtype and hidden size with
// the kernels' symbols and launch shapes as -D flags, and links both into one fast-path module: a call is one
// C function (the checks of rms_norm.cu, then a launch), and a later process loads the module without the DSL.
//
// RL_CUTE_TYPE (rl::bf16, rl::fp16, rl::fp32), RL_CUTE_HIDDEN, RL_CUTE_VEC (elements per 16-byte access, 1 where
// the hidden size allows none), RL_CUTE_WIDE / RL_CUTE_NARROW (the kernels with 16-byte and 1-element accesses)
// and RL_CUTE_WIDE_THREADS / RL_CUTE_NARROW_THREADS (their CTA sizes) come from the build.
#include "common/rapid_llm.cuh"
#include "../rms_norm_kernels.cuh"

// The CuTe kernels' parameters, in order: x, weight, out, x's and out's row strides (elements), eps.
extern "C" {
__global__ void RL_CUTE_WIDE(const void* x, const void* weight, void* out, int64_t x_stride, int64_t out_stride,
                             float eps);
__global__ void RL_CUTE_NARROW(const void* x, const void* weight, void* out, int64_t x_stride, int64_t out_stride,
                               float eps);
}

#if RL_HOST
namespace {
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
}  // namespace

void rms_norm(rl::Tensor out, rl::Tensor x, rl::Tensor weight, double eps) {
  // Step 1: validate, with the words of the other rows.
  RL_CHECK(out.same_shape(x) && out.dtype() == x.dtype(), "rms_norm: out must match x's shape and dtype, got ",
           out.describe(), " vs ", x.describe());
  const int64_t hidden = rms_norm_detail::check_weight("rms_norm", x, weight);
  rl::check_cuda("rms_norm", {out, x, weight});
  const int64_t n = x.numel();
  if (n == 0) return;
  RL_CHECK(hidden == RL_CUTE_HIDDEN, "rms_norm: this CuTe build is for hidden size ", RL_CUTE_HIDDEN, ", got ",
           hidden);
  rl::check_contiguous("rms_norm", {weight});
  const int64_t x_stride = rl::row_stride("rms_norm", "x", x);
  const int64_t out_stride = rl::row_stride("rms_norm", "out", out);

  // Step 2: extract. 16-byte accesses need every row start 16-byte aligned; any other call takes 1-element ones.
  const RL_CUTE_TYPE* xp = x.data<RL_CUTE_TYPE>();
  const RL_CUTE_TYPE* wp = weight.data<RL_CUTE_TYPE>();
  RL_CUTE_TYPE* op = out.data<RL_CUTE_TYPE>();
  const bool wide = RL_CUTE_VEC > 1 && aligned16(xp) && aligned16(wp) && aligned16(op) &&
                    x_stride % RL_CUTE_VEC == 0 && out_stride % RL_CUTE_VEC == 0;

  // Step 3: launch one CTA per row on torch's current stream.
  rl::launch(wide ? RL_CUTE_WIDE : RL_CUTE_NARROW, dim3(static_cast<unsigned>(n / hidden)),
             dim3(wide ? RL_CUTE_WIDE_THREADS : RL_CUTE_NARROW_THREADS), 0, xp, wp, op, x_stride, out_stride,
             static_cast<float>(eps));
}
RL_EXPORT(rms_norm, "rms_norm(out, x, weight, eps): out = x / sqrt(mean(x^2) + eps) * weight, CuTe DSL kernels")
#endif
