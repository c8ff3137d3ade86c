"""scaled_fp8_quant: the op's declaration. Its .cu row (scaled_fp8_quant.cu, beside this file) declares itself."""
from rapid_llm.kernels.ops.quant.scaled_fp8_quant import reference as scaled_fp8_quant_reference
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

_PACKAGE = "rapid_llm.kernels.ops.quant.scaled_fp8_quant"
_DTYPES = ("bf16", "fp16", "fp32")

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "scaled_fp8_quant",
    doc="out = fp8_e4m3(clamp(x / scale, +-448)) with fp32 scales per tensor, token or group, dynamic "
        "(scale = max(amax / 448, 1/229376)) or static; in place on out and scales",
    reference=scaled_fp8_quant_reference.REFERENCE,
    bench=scaled_fp8_quant_reference.bench_case,
    token_numel=scaled_fp8_quant_reference.BENCH_HIDDEN,
    dispatch_arg=1,
    forms=scaled_fp8_quant_reference.FORMS,
    form_of=scaled_fp8_quant_reference.form_of,
    rows=[
        KernelSpec(
            name="native/scaled_fp8_quant",
            target=f"{_PACKAGE}.native:scaled_fp8_quant",
            dtypes=_DTYPES,
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scaled_fp8_quant"),
            priority=0,
            graph_safe=True,
            description="fp32 amax and IEEE division x / scale, torch's fp8 cast: the floor, runs everywhere",
        ),
        KernelSpec(
            name="triton/scaled_fp8_quant",
            target=f"{_PACKAGE}.triton:scaled_fp8_quant",
            available=f"{_PACKAGE}.triton:available",
            dtypes=_DTYPES,
            devices=("cuda", "cpu"),  # listed on CPU so that explain says why it does not run there
            # Values one fp8 ulp from the floor where x * (1 / scale) and x / scale round to either side of a tie.
            golden=GoldenRecord(verified=True, max_abs_diff=32.0, baseline="native/scaled_fp8_quant"),
            graph_safe=True,
            description="one program per group (a token is one group), amax and the quantised values from "
                        "registers; per tensor: partial maxima, then quantise",
        ),
    ],
)
