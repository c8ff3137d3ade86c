// The corpus's two-input ops, each a launcher NAME(out, a, b) over fp32 / fp16 / bf16 (silu_mul_fast: fp16 /
// bf16, activations.cu says why), the math as a kernel author would write it: a gated activation times its
// gate, a sigmoid gate, a softmax-style exp of a difference (exp_sub_fast with __expf, as softmax kernels
// do: its error is the rounding of a - b carried through exp, which the op's magnitude states), and a
// normalisation-style product with rsqrtf. Correct kernels: verify must pass every one.
#include "common/rapid_llm.cuh"
#include "elementwise.cuh"

#if RL_DEVICE
#define RL_APPLY(body) static __device__ __forceinline__ float apply(float a, float b) { body }
__device__ __forceinline__ float softplus_f32(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float gelu_tanh_f32(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
#else
#define RL_APPLY(body)
#endif

struct TanhMul {
  RL_APPLY(return tanhf(a) * b;)
};
struct SiluMul {
  RL_APPLY(return a / (1.0f + expf(-a)) * b;)
};
struct SiluMulFast {
  RL_APPLY(return __fdividef(a, 1.0f + __expf(-a)) * b;)
};
struct GeluTanhMul {
  RL_APPLY(return gelu_tanh_f32(a) * b;)
};
struct GeluErfMul {
  RL_APPLY(return 0.5f * a * (1.0f + erff(a * 0.7071067811865476f)) * b;)
};
struct SigmoidGate {
  RL_APPLY(return a / (1.0f + expf(-b));)
};
struct ExpSub {
  RL_APPLY(return expf(a - b);)
};
struct ExpSubFast {
  RL_APPLY(return __expf(a - b);)
};
struct RsqrtMul {
  RL_APPLY(return a * rsqrtf(b);)
};
struct SoftplusMul {
  RL_APPLY(return softplus_f32(a) * b;)
};

#if RL_HOST
#define RL_BINARY(name, Op, doc)                                                                             \
  void name(rl::Tensor out, rl::Tensor a, rl::Tensor b) { launch_binary<Op>(#name, out, a, b); } \
  RL_EXPORT(name, doc)

RL_BINARY(tanh_mul, TanhMul, "tanhf(a) b")
RL_BINARY(silu_mul, SiluMul, "a / (1 + expf(-a)) b")
RL_BINARY(silu_mul_fast, SiluMulFast, "__fdividef(a, 1 + __expf(-a)) b: fp16 / bf16")
RL_BINARY(gelu_tanh_mul, GeluTanhMul, "gelu_tanh(a) b, with tanhf")
RL_BINARY(gelu_erf_mul, GeluErfMul, "gelu(a) b, with erff")
RL_BINARY(sigmoid_gate, SigmoidGate, "a / (1 + expf(-b))")
RL_BINARY(exp_sub, ExpSub, "expf(a - b)")
RL_BINARY(exp_sub_fast, ExpSubFast, "__expf(a - b)")
RL_BINARY(rsqrt_mul, RsqrtMul, "a rsqrtf(b)")
RL_BINARY(softplus_mul, SoftplusMul, "softplus(a) b")
#endif
