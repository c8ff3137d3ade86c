"""The native and Triton rows both norms declare alike (rms_norm, fused_add_rms_norm)."""
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

_PACKAGE = "rapid_llm.kernels.ops.norm"
_DTYPES = ("bf16", "fp16", "fp32")
#: The Triton rows' largest difference from the native row, measured by verify on an H200 (both ops): one
#: ulp of the largest outputs, where the two sum the squares in another order.
_TRITON_PER_DTYPE = (("bf16", 0.03125), ("fp16", 0.00390625), ("fp32", 1.9073486328125e-06))


#: The Triton rms_norm row's declared variants, what tune searches (rapid_llm.bench.tune).
RMS_NORM_TRITON_SPACE = {"num_warps": [1, 2, 4, 8, 16]}


def rows(op: str, native_doc: str, triton_doc: str) -> list[KernelSpec]:
    return [
        KernelSpec(
            name=f"native/{op}",
            target=f"{_PACKAGE}.{op}.native:{op}",
            dtypes=_DTYPES,
            devices=("cpu", "cuda"),
            golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline=f"native/{op}"),
            priority=0,
            graph_safe=True,
            description=native_doc,
        ),
        KernelSpec(
            name=f"triton/{op}",
            target=f"{_PACKAGE}.{op}.triton:{op}",
            available="rapid_llm.kernels.toolchain.triton_support:available",
            dtypes=_DTYPES,
            devices=("cuda", "cpu"),
            golden=GoldenRecord(verified=True, max_abs_diff=_TRITON_PER_DTYPE[0][1], baseline=f"native/{op}",
                                per_dtype=_TRITON_PER_DTYPE),
            graph_safe=True,
            layouts=("contiguous", "rows"),  # each tensor's own row stride: x[:, :H] of a [T, 2H] buffer, no copy
            description=triton_doc,
            tune_space=RMS_NORM_TRITON_SPACE if op == "rms_norm" else None,
        ),
    ]


def cute_row(op: str, doc: str) -> KernelSpec:
    """A CuTe DSL row (``<op>/cute.py``), written for Hopper, so sm_90 and newer. Verified on an H100 (``verify``
    passes in every dtype; the DSL has no CPU interpreter, so only a GPU can)."""
    return KernelSpec(
        name=f"cute/{op}",
        target=f"{_PACKAGE}.{op}.cute:{op}",
        available="rapid_llm.kernels.toolchain.cute_support:available",
        dtypes=_DTYPES,
        devices=("cuda",),
        golden=GoldenRecord(verified=True, baseline=f"native/{op}"),
        graph_safe=True,
        min_sm=90,
        layouts=("contiguous", "rows"),  # x and out at their own row strides, as the Triton row
        description=doc,
    )


def gluon_row(op: str, doc: str) -> KernelSpec:
    """A Gluon row (``<op>/gluon.py``), written for Hopper, so sm_90 and newer. Gluon has no CPU interpreter, so
    only a GPU verifies it: on an H100 (torch 2.11, Triton 3.6) it passed with the Triton row's diffs against the
    floor in every dtype, which its record promises."""
    return KernelSpec(
        name=f"gluon/{op}",
        target=f"{_PACKAGE}.{op}.gluon:{op}",
        available="rapid_llm.kernels.toolchain.gluon_support:available",
        dtypes=_DTYPES,
        devices=("cuda",),
        golden=GoldenRecord(verified=True, max_abs_diff=_TRITON_PER_DTYPE[0][1], baseline=f"native/{op}",
                            per_dtype=_TRITON_PER_DTYPE),
        graph_safe=True,
        min_sm=90,
        layouts=("contiguous", "rows"),  # x and out at their own row strides, as the Triton row
        description=doc,
    )
