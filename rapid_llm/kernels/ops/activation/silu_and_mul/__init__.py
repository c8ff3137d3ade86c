"""silu_and_mul, SwiGLU's gate: the op's declaration. Its .cu row (silu_and_mul.cu, beside this file) declares itself."""
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.ops.activation.silu_and_mul import reference as silu_and_mul_reference
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "silu_and_mul",
    doc="out = silu(x[..., :I]) * x[..., I:] for x [..., 2I] (SwiGLU's gate): fp32 math, rounded once",
    reference=silu_and_mul_reference.REFERENCE,
    bench=silu_and_mul_reference.bench_case,
    token_numel=silu_and_mul_reference.BENCH_TOKEN_NUMEL,
    rows=[
        KernelSpec(
            name="native/silu_and_mul",
            target="rapid_llm.kernels.ops.activation.silu_and_mul.native:silu_and_mul",
            dtypes=("bf16", "fp16", "fp32"),
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/silu_and_mul"),
            priority=0,
            graph_safe=True,
            description="F.silu on the fp32 upcast times the up half, rounded once: the floor, runs everywhere",
        ),
        KernelSpec(
            name="triton/silu_and_mul",
            target="rapid_llm.kernels.ops.activation.silu_and_mul.triton:silu_and_mul",
            available="rapid_llm.kernels.toolchain.triton_support:available",
            dtypes=("bf16", "fp16", "fp32"),
            devices=("cuda", "cpu"),
            # On a GPU the same fp32 recipe as torch (libdevice expf, IEEE division): no difference. In the
            # CPU interpreter exp comes from numpy, not torch's vectorised expf: an fp32 ulp, and a rare
            # fp16 rounding tie, apart (bf16 there is truncated; test_rows skips its record on CPU).
            golden=GoldenRecord(verified=True, max_abs_diff=0.00048828125, baseline="native/silu_and_mul",
                                per_dtype=(("bf16", 0.0), ("fp16", 0.00048828125), ("fp32", 9.5367431640625e-07))),
            graph_safe=True,
            layouts=("contiguous", "rows"),  # x's and out's row strides: x[:, :2I] of a [T, 4I] buffer, no copy
            description="[ROWS, BLOCK] tiles of 2048 elements, the native fp32 recipe (expf, IEEE division)",
        ),
    ],
)
