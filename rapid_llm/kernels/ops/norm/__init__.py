"""Row-wise normalisations over the hidden dim. Each op is declared once here; its .cu rows declare
themselves in kernels/shipped_cu/norm/."""
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.ops.norm import fused_add_rms_norm_reference, rms_norm_reference
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

_PACKAGE = "rapid_llm.kernels.ops.norm"
_DTYPES = ("bf16", "fp16", "fp32")
#: The Triton rows' largest difference from the native row, measured by verify on an H200 (both ops): one
#: ulp of the largest outputs, where the two sum the squares in another order.
_TRITON_PER_DTYPE = (("bf16", 0.03125), ("fp16", 0.00390625), ("fp32", 1.9073486328125e-06))


def _rows(op: str, native_doc: str, triton_doc: str) -> list[KernelSpec]:
    return [
        KernelSpec(
            name=f"native/{op}",
            target=f"{_PACKAGE}.{op}_native:{op}",
            dtypes=_DTYPES,
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline=f"native/{op}"),
            priority=0,
            graph_safe=True,
            description=native_doc,
        ),
        KernelSpec(
            name=f"triton/{op}",
            target=f"{_PACKAGE}.{op}_triton:{op}",
            available="rapid_llm.kernels.build.triton_support:available",
            dtypes=_DTYPES,
            devices=("cuda", "cpu"),
            golden=GoldenRecord(verified=True, max_abs_diff=_TRITON_PER_DTYPE[0][1], baseline=f"native/{op}",
                                per_dtype=_TRITON_PER_DTYPE),
            graph_safe=True,
            layouts=("contiguous", "rows"),  # each tensor's own row stride: x[:, :H] of a [T, 2H] buffer, no copy
            description=triton_doc,
        ),
    ]


#: This group's ops, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATIONS: list = []

DECLARATIONS.append(define_op(
    "rms_norm",
    doc="out = x / sqrt(mean(x^2) + eps) * weight over the last dim (fp32 sum of squares, one rounding)",
    reference=rms_norm_reference.REFERENCE,
    bench=rms_norm_reference.bench_case,
    token_numel=rms_norm_reference.BENCH_HIDDEN,
    rows=_rows("rms_norm", "plain torch in fp32: the floor, runs everywhere",
               "one program per row, the fp32 row in registers up to 16384 wide"),
))

DECLARATIONS.append(define_op(
    "fused_add_rms_norm",
    doc="in place: residual += x; x = rms_norm(residual) from the fp32 sum; returns None",
    reference=fused_add_rms_norm_reference.REFERENCE,
    bench=fused_add_rms_norm_reference.bench_case,
    token_numel=rms_norm_reference.BENCH_HIDDEN,
    rows=_rows("fused_add_rms_norm", "plain torch in fp32: the floor, runs everywhere",
               "rms_norm's Triton kernel with the residual add in front, one program per row"),
))
