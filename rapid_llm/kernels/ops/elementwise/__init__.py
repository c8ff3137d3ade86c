"""Elementwise ops and their rows. Registering imports nothing: targets are lazy."""
from rapid_llm.kernels.spec import UNMEASURED, GoldenRecord, KernelSpec, register

register(
    KernelSpec(
        name="native/scale",
        op="scale",
        backend="native",
        target="rapid_llm.kernels.ops.elementwise.scale_native:scale",
        dtypes=("bf16", "fp16", "fp32", "fp64"),
        devices=("cpu", "cuda"),
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale"),
        priority=0,
        graph_safe=True,
        description="torch.mul: the floor, runs everywhere",
    )
)

register(
    KernelSpec(
        name="triton/scale",
        op="scale",
        backend="triton",
        target="rapid_llm.kernels.ops.elementwise.scale_triton:scale",
        available="rapid_llm.kernels.triton_support:available",
        dtypes=("bf16", "fp16", "fp32"),
        devices=("cuda", "cpu"),
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale"),
        priority=UNMEASURED,
        graph_safe=True,
        description="one 4096-element block per program, fp32 math",
    )
)

register(
    KernelSpec(
        name="jit/scale",
        op="scale",
        backend="jit",
        target="rapid_llm.kernels.ops.elementwise.scale_jit:scale",
        available="rapid_llm.kernels.jit:available",
        dtypes=("bf16", "fp16", "fp32"),
        devices=("cuda",),
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale"),
        priority=UNMEASURED,
        graph_safe=True,
        description="the tutorial's kernel: one element per thread",
    )
)
