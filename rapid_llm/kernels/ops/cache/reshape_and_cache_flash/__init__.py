"""reshape_and_cache_flash: the op's declaration. Its .cu row (reshape_and_cache_flash.cu, beside this file)
declares itself."""
from rapid_llm.kernels.ops.cache.reshape_and_cache_flash import reference as cache_reference
from rapid_llm.kernels.registry.opdecl import define_op
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

_PACKAGE = "rapid_llm.kernels.ops.cache.reshape_and_cache_flash"
_DTYPES = ("bf16", "fp16", "fp32")

#: The op, read by the registry (rapid_llm.kernels.registry.spec).
DECLARATION = define_op(
    "reshape_and_cache_flash",
    doc="write each token's key and value into the paged caches [num_blocks, block_size, H, D] at slot_mapping[t] "
        "(-1: padding, not written); a copy, or fp8(clamp(x / scale, +-448)) into a float8_e4m3fn cache; in place "
        "on key_cache and value_cache, returns None",
    reference=cache_reference.REFERENCE,
    bench=cache_reference.bench_case,
    token_numel=cache_reference.TOKEN_NUMEL,
    schema="(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor slot_mapping, "
           "Tensor k_scale, Tensor v_scale) -> ()",
    rows=[
        KernelSpec(
            name="native/reshape_and_cache_flash",
            target=f"{_PACKAGE}.native:reshape_and_cache_flash",
            dtypes=_DTYPES,
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/reshape_and_cache_flash"),
            priority=0,
            graph_safe=True,
            description="index_put of each token's row (bits; fp8 through torch's cast) at its block and offset, "
                        "no host sync: the floor, runs everywhere",
        ),
        KernelSpec(
            name="triton/reshape_and_cache_flash",
            target=f"{_PACKAGE}.triton:reshape_and_cache_flash",
            available="rapid_llm.kernels.toolchain.triton_support:available",
            dtypes=_DTYPES,
            devices=("cuda", "cpu"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/reshape_and_cache_flash"),
            graph_safe=True,
            layouts=("contiguous", "strided"),  # key/value slices of a fused qkv, caches as halves of one kv buffer
            description="one program per token, its key and value rows copied (or rounded to e4m3 in integer "
                        "arithmetic) into its slot",
        ),
    ],
)
