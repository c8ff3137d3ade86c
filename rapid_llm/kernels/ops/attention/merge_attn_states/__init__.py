"""merge_attn_states: the op's declaration. Its .cu row (merge_attn_states.cu, beside this file) declares itself."""
from rapid_llm.kernels.ops.attention.merge_attn_states import reference as merge_attn_states_reference
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

_PACKAGE = "rapid_llm.kernels.ops.attention.merge_attn_states"
_DTYPES = ("bf16", "fp16", "fp32")

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "merge_attn_states",
    doc="out, out_lse = the merge of two partial attention results [T, H, D] with LSEs [H, T] (vLLM's contract; "
        "+-inf LSE an empty side, both empty 0 and -inf, NaN LSE NaN); in place on out and out_lse",
    reference=merge_attn_states_reference.REFERENCE,
    bench=merge_attn_states_reference.bench_case,
    token_numel=merge_attn_states_reference.BENCH_HEADS * merge_attn_states_reference.HEAD_SIZE,
    dispatch_arg=2,
    rows=[
        KernelSpec(
            name="native/merge_attn_states",
            target=f"{_PACKAGE}.native:merge_attn_states",
            dtypes=_DTYPES,
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/merge_attn_states"),
            priority=0,
            graph_safe=True,
            description="plain torch in fp32, special values by torch.where: the floor, runs everywhere",
        ),
        KernelSpec(
            name="triton/merge_attn_states",
            target=f"{_PACKAGE}.triton:merge_attn_states",
            available="rapid_llm.kernels.toolchain.triton_support:available",
            dtypes=_DTYPES,
            devices=("cuda", "cpu"),
            # Another exp, log and order of products than torch's: an ulp of the largest outputs apart.
            golden=GoldenRecord(verified=True, max_abs_diff=0.03125, baseline="native/merge_attn_states",
                                per_dtype=(("bf16", 0.03125), ("fp16", 0.00390625), ("fp32", 1.9073486328125e-06))),
            graph_safe=True,
            description="one program per token and block of heads, the two sides' LSEs read once per head",
        ),
    ],
)
