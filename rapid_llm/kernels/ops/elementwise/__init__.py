"""Elementwise ops. Each is declared once here; its .cu rows declare themselves in kernels/shipped_cu/elementwise/."""
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.ops.elementwise import scale_reference
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

#: This group's ops, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATIONS: list = []

DECLARATIONS.append(define_op(
    "scale",
    doc="out = input * factor",
    reference=scale_reference.REFERENCE,
    bench=scale_reference.bench_case,
    rows=[
        KernelSpec(
            name="native/scale",
            target="rapid_llm.kernels.ops.elementwise.scale_native:scale",
            dtypes=("bf16", "fp16", "fp32", "fp64"),
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale"),
            priority=0,
            graph_safe=True,
            description="torch.mul: the floor, runs everywhere",
        ),
        KernelSpec(
            name="triton/scale",
            target="rapid_llm.kernels.ops.elementwise.scale_triton:scale",
            available="rapid_llm.kernels.build.triton_support:available",
            dtypes=("bf16", "fp16", "fp32"),
            devices=("cuda", "cpu"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale"),
            graph_safe=True,
            description="one 4096-element block per program, fp32 math",
        ),
    ],
))
