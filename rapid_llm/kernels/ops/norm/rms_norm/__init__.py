"""rms_norm: the op's declaration. Its .cu row (rms_norm.cu, beside this file) declares itself;
the kernels both norms share are in ../rms_norm_kernels.cuh. The Gluon row (gluon.py) and the CuTe DSL row
(cute.py) are extras: filtered, with the reason, where Triton has no Gluon or the DSL is not installed."""
from rapid_llm.kernels.ops.norm import norm_rows
from rapid_llm.kernels.ops.norm.rms_norm import reference as rms_norm_reference
from rapid_llm.kernels.registry.opdecl import define_op

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "rms_norm",
    doc="out = x / sqrt(mean(x^2) + eps) * weight over the last dim (fp32 sum of squares, one rounding)",
    reference=rms_norm_reference.REFERENCE,
    bench=rms_norm_reference.bench_case,
    token_numel=rms_norm_reference.BENCH_HIDDEN,
    rows=[*norm_rows.rows("rms_norm", "plain torch in fp32: the floor, runs everywhere",
                          "one program per row, the fp32 row in registers up to 16384 wide"),
          norm_rows.gluon_row("rms_norm", "Gluon, sm_90: one CTA per row, a blocked layout of 16-byte accesses "
                                          "over the hidden dim, fp32 sum"),
          norm_rows.cute_row("rms_norm", "CuTe DSL, sm_90: one CTA per row, 16-byte accesses, fp32 sum, one build "
                                         "per dtype and hidden size, launched from C")],
)
