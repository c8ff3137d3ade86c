"""scale: the op's declaration. Its .cu row (scale.cu, beside this file) declares itself."""
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.ops.elementwise.scale import reference as scale_reference
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "scale",
    doc="out = input * factor",
    reference=scale_reference.REFERENCE,
    bench=scale_reference.bench_case,
    rows=[
        KernelSpec(
            name="native/scale",
            target="rapid_llm.kernels.ops.elementwise.scale.native:scale",
            dtypes=("bf16", "fp16", "fp32", "fp64"),
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale"),
            priority=0,
            graph_safe=True,
            description="torch.mul: the floor, runs everywhere",
        ),
        KernelSpec(
            name="triton/scale",
            target="rapid_llm.kernels.ops.elementwise.scale.triton:scale",
            available="rapid_llm.kernels.toolchain.triton_support:available",
            dtypes=("bf16", "fp16", "fp32"),
            devices=("cuda", "cpu"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale"),
            graph_safe=True,
            description="one 4096-element block per program, fp32 math",
        ),
    ],
)
