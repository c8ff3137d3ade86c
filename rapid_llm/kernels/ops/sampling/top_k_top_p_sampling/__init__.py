"""top_k_top_p_sampling: the op's declaration (one token id per row drawn from probabilities or logits, cut to
the row's top k and then its nucleus of mass p, from a seed and offset). Its CUDA row is declared here through
cuda_row.py: its int64 ids and optional tensors fit none of the out rules a self-declaring .cu row is called by.
A result is random, so every row is judged by the statistical mode (rapid_llm.kernels.verification.sampling_mode)."""
from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling import reference as sampling_reference
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

_PACKAGE = "rapid_llm.kernels.ops.sampling.top_k_top_p_sampling"
_DTYPES = ("bf16", "fp16", "fp32")

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "top_k_top_p_sampling",
    doc="ids [B] int64 = one draw per row of x [B, V] (probabilities, or logits / temperature) from its top k "
        "(ties to the lower id) and then its nucleus of mass p, by a counter-based hash of (seed, offset, row); "
        "the same ids for the same seed_offset on every row",
    reference=sampling_reference.REFERENCE,
    bench=sampling_reference.bench_case,
    # Functional: out= is the eager op's (K.top_k_top_p_sampling); the custom op returns a new tensor.
    schema="(Tensor x, Tensor? top_k, Tensor? top_p, Tensor seed_offset, Tensor? temperature=None, "
           "bool from_logits=False) -> Tensor",
    rows=[
        KernelSpec(
            name="native/top_k_top_p_sampling",
            target=f"{_PACKAGE}.native:top_k_top_p_sampling",
            dtypes=_DTYPES,
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/top_k_top_p_sampling"),
            priority=0,
            graph_safe=True,
            description="a stable sort, integer cumsums and an inverse-CDF draw: the floor, runs everywhere",
        ),
        KernelSpec(
            name="triton/top_k_top_p_sampling",
            target=f"{_PACKAGE}.triton:top_k_top_p_sampling",
            available="rapid_llm.kernels.toolchain.triton_support:available",
            dtypes=_DTYPES,
            devices=("cuda", "cpu"),
            # Verified on the CPU under Triton's interpreter by the sampling mode: the floor's ids exactly from
            # probabilities. From logits its exp rounds otherwise (a GPU's), which moves a draw only at a boundary,
            # so no diff against the floor is promised.
            golden=GoldenRecord(verified=True, max_abs_diff=None, baseline="native/top_k_top_p_sampling"),
            graph_safe=True,
            description="threshold searches for the k-th and the nucleus boundary, then one pass in id order",
        ),
        KernelSpec(
            name="jit/top_k_top_p_sampling",
            target=f"{_PACKAGE}.cuda_row:top_k_top_p_sampling",
            available="rapid_llm.kernels.toolchain.jit:available",
            dtypes=_DTYPES,
            devices=("cuda",),
            # Verified on an H100 (sampling mode: every draw the floor's id; tests/gpu/ops/test_top_k_top_p_sampling.py:
            # the floor's ids on edge rows at vocabularies 1 to 131072 in every dtype, strided and unaligned rows).
            golden=GoldenRecord(verified=True, max_abs_diff=None, baseline="native/top_k_top_p_sampling"),
            graph_safe=True,
            description="top_k_top_p_sampling.cu: a block per row, radix selects of the k-th weight and the nucleus "
                        "boundary on shared histograms, then a draw in id order",
        ),
    ],
)
