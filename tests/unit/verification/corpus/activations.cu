// The corpus's one-input ops, each a launcher NAME(out, x) (softcap: softcap(out, x, cap)) over fp32 / fp16 /
// bf16, the math written as a kernel author would: CUDA's accurate functions (tanhf, erff, expf, expm1f,
// log1pf, rsqrtf, within 1-2 ulps each), and the fast intrinsics (__expf, __fdividef) in the *_fast rows,
// which declare fp16 / bf16 only: __expf's error grows with |x| (2 + 1.17 |x| ulps), invisible after a
// rounding to a half type, and real kernels (FlashInfer's silu) use it there. Correct kernels, all of them:
// verify must pass every one (tests/unit/verification/corpus/ops.py says what each computes).
#include "common/rapid_llm.cuh"
#include "elementwise.cuh"

#if RL_DEVICE
#define RL_APPLY(body) static __device__ __forceinline__ float apply(float x, float param) { body }
__device__ __forceinline__ float softplus_f32(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
#else
#define RL_APPLY(body)
#endif

struct GeluTanh {
  RL_APPLY(const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
           return 0.5f * x * (1.0f + tanhf(u));)
};
struct GeluErf {
  RL_APPLY(return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));)
};
struct Sigmoid {
  RL_APPLY(return 1.0f / (1.0f + expf(-x));)
};
struct SigmoidFast {
  RL_APPLY(return __fdividef(1.0f, 1.0f + __expf(-x));)
};
struct Silu {
  RL_APPLY(return x / (1.0f + expf(-x));)
};
struct SiluFast {
  RL_APPLY(return __fdividef(x, 1.0f + __expf(-x));)
};
struct Softplus {
  RL_APPLY(return softplus_f32(x);)
};
struct Mish {
  RL_APPLY(return x * tanhf(softplus_f32(x));)
};
struct QuickGelu {
  RL_APPLY(return x / (1.0f + expf(-1.702f * x));)
};
struct Elu {
  RL_APPLY(return x > 0.0f ? x : expm1f(x);)
};
struct LogSigmoid {
  RL_APPLY(return fminf(x, 0.0f) - log1pf(expf(-fabsf(x)));)
};
struct Tanh {
  RL_APPLY(return tanhf(x);)
};
struct Erf {
  RL_APPLY(return erff(x);)
};
struct Exp {
  RL_APPLY(return expf(x);)
};
struct Log1p {
  RL_APPLY(return log1pf(x);)
};
struct Rsqrt {
  RL_APPLY(return rsqrtf(x);)
};
struct Softcap {  // param: the cap; the division turned into a product, as logit kernels do
  RL_APPLY(return param * tanhf(x * (1.0f / param));)
};

#if RL_HOST
#define RL_UNARY(name, Op, doc)                                                        \
  void name(rl::Tensor out, rl::Tensor x) { launch_unary<Op>(#name, out, x, 0.0); } \
  RL_EXPORT(name, doc)

RL_UNARY(gelu_tanh, GeluTanh, "0.5 x (1 + tanhf(sqrt(2/pi) (x + 0.044715 x^3)))")
RL_UNARY(gelu_erf, GeluErf, "0.5 x (1 + erff(x / sqrt(2)))")
RL_UNARY(sigmoid, Sigmoid, "1 / (1 + expf(-x))")
RL_UNARY(sigmoid_fast, SigmoidFast, "__fdividef(1, 1 + __expf(-x)): fp16 / bf16")
RL_UNARY(silu, Silu, "x / (1 + expf(-x))")
RL_UNARY(silu_fast, SiluFast, "__fdividef(x, 1 + __expf(-x)): fp16 / bf16")
RL_UNARY(softplus, Softplus, "x > 20 ? x : log1pf(expf(x))")
RL_UNARY(mish, Mish, "x tanhf(softplus(x))")
RL_UNARY(quick_gelu, QuickGelu, "x / (1 + expf(-1.702 x))")
RL_UNARY(elu, Elu, "x > 0 ? x : expm1f(x)")
RL_UNARY(log_sigmoid, LogSigmoid, "min(x, 0) - log1pf(expf(-|x|))")
RL_UNARY(tanh, Tanh, "tanhf(x)")
RL_UNARY(erf, Erf, "erff(x)")
RL_UNARY(exp, Exp, "expf(x)")
RL_UNARY(log1p, Log1p, "log1pf(x)")
RL_UNARY(rsqrt, Rsqrt, "rsqrtf(x)")

void softcap(rl::Tensor out, rl::Tensor x, double cap) {
  RL_CHECK(cap > 0, "softcap: cap must be positive, got ", cap);
  launch_unary<Softcap>("softcap", out, x, cap);
}
RL_EXPORT(softcap, "cap tanhf(x / cap)")
#endif
