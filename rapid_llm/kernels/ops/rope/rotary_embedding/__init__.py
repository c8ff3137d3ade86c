"""rotary_embedding: the op's declaration. Its .cu row (rotary_embedding.cu, beside this file) declares itself."""
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.ops.rope.rotary_embedding import reference as rotary_embedding_reference
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "rotary_embedding",
    doc="rotate q and k in place by each token's position (vLLM's form); returns None",
    reference=rotary_embedding_reference.REFERENCE,
    bench=rotary_embedding_reference.bench_case,
    dispatch_arg=1,  # the query picks the row: its dtype, device, size and layout
    token_numel=rotary_embedding_reference.TOKEN_NUMEL,
    rows=[
        KernelSpec(
            name="native/rotary_embedding",
            target="rapid_llm.kernels.ops.rope.rotary_embedding.native:rotary_embedding",
            dtypes=("bf16", "fp16", "fp32"),
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/rotary_embedding"),
            priority=0,
            graph_safe=True,
            description="torch gather of cos/sin and fp32 math: the floor, runs everywhere",
        ),
        KernelSpec(
            name="triton/rotary_embedding",
            target="rapid_llm.kernels.ops.rope.rotary_embedding.triton:rotary_embedding",
            available="rapid_llm.kernels.toolchain.triton_support:available",
            dtypes=("bf16", "fp16", "fp32"),
            devices=("cuda", "cpu"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/rotary_embedding"),
            graph_safe=True,
            layouts=("contiguous", "strided"),  # any token and head strides (q, k sliced out of a fused qkv)
            description="one program per token, q then k heads in blocks, fp32 math",
        ),
    ],
)
