"""moe_topk_gate: the op's declaration (MoE routing: a softmax or sigmoid gate, top-k experts, grouped top-k
with DeepSeek-V3's correction bias). Its CUDA row, moe_topk_gate.cu, is declared here through cuda_row.py: its two
outputs (fp32 weights, int32 ids) fit none of the out rules a self-declaring .cu row is called by."""
from rapid_llm.kernels.ops.moe.moe_topk_gate import reference as moe_topk_gate_reference
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

_PACKAGE = "rapid_llm.kernels.ops.moe.moe_topk_gate"
_DTYPES = ("bf16", "fp16", "fp32")

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "moe_topk_gate",
    doc="(weights [T, k] fp32, ids [T, k] int32) = each token's k best experts by softmax or sigmoid score "
        "(+ bias for the choice; grouped top-k as DeepSeek-V3), best first, ties to the lower expert / group id; "
        "weights the unbiased scores, renormalised to sum 1 when asked",
    reference=moe_topk_gate_reference.REFERENCE,
    bench=moe_topk_gate_reference.bench_case,
    token_numel=moe_topk_gate_reference.DSV3_EXPERTS,
    forms=moe_topk_gate_reference.FORMS,
    form_of=moe_topk_gate_reference.form_of,
    # Functional: out_weights / out_ids are the eager op's (K.moe_topk_gate); the custom op returns new tensors.
    schema="(Tensor logits, int k, str scoring=\"softmax\", bool renormalize=True, Tensor? bias=None, "
           "int num_groups=1, int topk_groups=1) -> (Tensor, Tensor)",
    rows=[
        KernelSpec(
            name="native/moe_topk_gate",
            target=f"{_PACKAGE}.native:moe_topk_gate",
            dtypes=_DTYPES,
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/moe_topk_gate"),
            priority=0,
            graph_safe=True,
            description="fp32 scores, stable descending sorts for the tie rule: the floor, runs everywhere",
        ),
        KernelSpec(
            name="triton/moe_topk_gate",
            target=f"{_PACKAGE}.triton:moe_topk_gate",
            available="rapid_llm.kernels.toolchain.triton_support:available",
            dtypes=_DTYPES,
            devices=("cuda", "cpu"),
            # Verified on the CPU under Triton's interpreter by the routing mode (1.2e-7 from the floor there, ids
            # equal). No diff against the floor is promised: a near tie that another exp resolves the other way
            # (a GPU's) moves an id by up to E - 1 while the routing mode rightly passes it.
            golden=GoldenRecord(verified=True, max_abs_diff=None, baseline="native/moe_topk_gate"),
            graph_safe=True,
            description="a token per program to T = 128 on a GPU, a block of tokens beyond; k picks of max then "
                        "lowest index: every option served",
        ),
        KernelSpec(
            name="jit/moe_topk_gate",
            # moe_topk_gate.cu behind the op's convention: two outputs of other dtypes fit no out rule.
            target=f"{_PACKAGE}.cuda_row:moe_topk_gate",
            available="rapid_llm.kernels.toolchain.jit:available",
            dtypes=_DTYPES,
            devices=("cuda",),
            # Verified on an H100 (routing mode: 0 rows with other ids in every dtype; weights as the Triton row's).
            golden=GoldenRecord(verified=True, max_abs_diff=None, baseline="native/moe_topk_gate"),
            graph_safe=True,
            description="moe_topk_gate.cu: a warp per token, experts in registers, k warp picks under the tie rule",
        ),
    ],
)
