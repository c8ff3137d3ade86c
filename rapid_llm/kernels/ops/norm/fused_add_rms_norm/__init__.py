"""fused_add_rms_norm: the op's declaration. Its .cu row (fused_add_rms_norm.cu, beside this file) declares itself;
the kernels both norms share are in ../rms_norm_kernels.cuh."""
from rapid_llm.kernels.ops.norm import norm_rows
from rapid_llm.kernels.ops.norm.fused_add_rms_norm import reference as fused_add_rms_norm_reference
from rapid_llm.kernels.ops.norm.rms_norm import reference as rms_norm_reference
from rapid_llm.kernels.registry.opdecl import define_op

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "fused_add_rms_norm",
    doc="in place: residual += x; x = rms_norm(residual) from the fp32 sum; returns None",
    reference=fused_add_rms_norm_reference.REFERENCE,
    bench=fused_add_rms_norm_reference.bench_case,
    token_numel=rms_norm_reference.BENCH_HIDDEN,
    rows=norm_rows.rows("fused_add_rms_norm", "plain torch in fp32: the floor, runs everywhere",
                         "rms_norm's Triton kernel with the residual add in front, one program per row"),
)
