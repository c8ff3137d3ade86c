"""cute/rms_norm: the CuTe DSL kernel (cute_kernel.py) behind a C launcher (rms_norm_cute.cpp), one build per
dtype and hidden size.

This module never imports the DSL: a build found in the cache (rapid_llm.kernels.toolchain.cute_build) loads
as a fast-path module, and only a missing one is compiled (cute_kernel.py, about 0.2-1 s, no GPU needed).
A call looks its module up by (dtype, hidden) and calls its launcher, which checks every argument with the
other rows' words and picks the kernel with 16-byte accesses where every row start is 16-byte aligned.
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.ops.norm.rms_norm.native import check
from rapid_llm.kernels.ops.token_inputs import BENCH_HIDDEN
from rapid_llm.kernels.toolchain import cute_build

_HERE = Path(__file__).resolve().parent
#: The row's other code, beside this module: its figures' digest covers them (rapid_llm.kernels.toolchain.digests).
CODE_FILES = ("cute_kernel.py", "rms_norm_cute.cpp")
_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_TYPES = {"bf16": "rl::bf16", "fp16": "rl::fp16", "fp32": "rl::fp32"}
#: The PTX types of the kernels' parameters (cute_kernel.PARAMS, kept here so a build's key needs no DSL import).
PARAMS = ("u64", "u64", "u64", "u64", "u64", "f32")
#: Modules by (dtype, hidden): the per-call path is this lookup and the launcher.
_LAUNCHERS: dict[tuple[torch.dtype, int], Any] = {}


#: Registers a thread needs besides what it keeps of the row and the weight (indices, the sum, temporaries):
#: what ptxas reported for these kernels (43 at bf16 4096 with 24 kept; 64 at fp32 20000 with 40 kept, no spill).
_OTHER_REGISTERS = 24


def specialisation(dtype: str, hidden: int) -> dict[str, Any]:
    """What one build is compiled for: the dtype, the hidden size, and each kernel's launch shape (16-byte
    accesses: ``VEC``, ``THREADS``, ``KEEP``; 1-element ones: ``THREADS_1``, ``KEEP_1``).

    About two columns a thread (256 threads for a 4096-wide bf16 row), 32 to 1024. What a thread keeps in
    registers (``KEEP``: 2 its share of the row and of the weight, 1 the row only, 0 nothing: two passes) is the
    most that fits the registers a thread of that CTA may have (65536 an SM: 64 a thread at 1024 threads): a
    spill would cost more than reading the row twice. The row's values count as fp32 (the compiler keeps them
    converted), the weight's at their own size."""
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]
    vec = 16 // size if hidden % (16 // size) == 0 else 1

    def shape(v: int) -> tuple[int, int]:
        columns = hidden // v
        threads = min(1024, max(32, -(-columns // 2 // 32) * 32))
        per_thread = -(-columns // threads) * v
        room = min(255, 65536 // threads) - _OTHER_REGISTERS
        row, weight = per_thread, -(-per_thread * size // 4)
        return threads, 2 if row + weight <= room else 1 if row <= room else 0

    (threads, keep), (threads_1, keep_1) = shape(vec), shape(1)
    return {"dtype": dtype, "HIDDEN": hidden, "VEC": vec, "THREADS": threads, "KEEP": keep,
            "THREADS_1": threads_1, "KEEP_1": keep_1}


def build(dtype: str, hidden: int) -> cute_build.CuteBuild:
    """The build of this row for one dtype and hidden size."""
    return cute_build.CuteBuild(
        name=f"cute_rms_norm_{dtype}_{hidden}", kernel_source=_HERE / "cute_kernel.py",
        host_source=_HERE / "rms_norm_cute.cpp", specialisation=specialisation(dtype, hidden),
        compile="rapid_llm.kernels.ops.norm.rms_norm.cute_kernel:compile_kernels",
        defines="rapid_llm.kernels.ops.norm.rms_norm.cute:defines", params=PARAMS)


def defines(spec: dict[str, Any], symbols: Sequence[str]) -> dict[str, str]:
    """The launcher's macros for the build of ``spec`` whose kernels are ``symbols`` (the 16-byte one first)."""
    values = {"RL_CUTE_TYPE": _TYPES[spec["dtype"]], "RL_CUTE_HIDDEN": spec["HIDDEN"], "RL_CUTE_VEC": spec["VEC"],
              "RL_CUTE_WIDE_THREADS": spec["THREADS"], "RL_CUTE_NARROW_THREADS": spec["THREADS_1"]}
    return cute_build.defines_of(values, symbols, ("RL_CUTE_WIDE", "RL_CUTE_NARROW"))


def launcher(dtype: torch.dtype, hidden: int, arch: str | None = None) -> ModuleType:
    """The built module for ``dtype`` and ``hidden`` (from the cache, else compiled now)."""
    module, _ = cute_build.load(build(_NAMES[dtype], hidden), arch)
    return module


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x / sqrt(mean(x^2) + eps) * weight over the last dim; the numerics of native/rms_norm.

    x and out may each have a row stride (``x[:, :H]``); weight is dense. The first call of a (dtype, hidden)
    checks here first, so a bad call never starts a build; then the call binding's OutFirst allocates ``out`` and
    runs the floor's checks (once per kind of call), and the C launcher checks every argument again.
    """
    try:
        fn = _LAUNCHERS.get((x.dtype, x.shape[-1]))
    except (AttributeError, IndexError, TypeError):  # not a tensor, or 0-d: the floor's checks say so below
        fn = None
    if fn is None:
        check(x, weight, eps, out)
        for t in (x if out is None else out, x, weight):  # the C launcher's check, in its words and order
            if t.device.type != "cuda":
                raise ValueError(f"rms_norm: CUDA tensors only, got {platform.describe(t)}")
        if x.dtype not in _NAMES:  # the Triton row's words (importing it would import Triton)
            raise ValueError(f"rms_norm: x must be bf16, fp16 or fp32, got {x.dtype}")
        if x.numel() == 0:  # nothing to launch, and no kernel of hidden size 0 to build
            return torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
        fn = _LAUNCHERS[(x.dtype, x.shape[-1])] = _out_first(launcher(x.dtype, x.shape[-1]).rms_norm)
    return fn(x, weight, eps, out)


rms_norm.cute_builds = lambda dtype: build(dtype, BENCH_HIDDEN)  # what inspect() reads: the op's bench shape


def _out_first(fn: Any) -> Any:
    """The launcher behind the call binding's OutFirst: ``out`` allocated in C where the caller gives none, and the
    floor's checks run in C's memory of calls that passed them (a JIT row's call path, rapid_llm.kernels.
    toolchain.jit_row)."""
    from rapid_llm.kernels.registry.out_rules import OUT_RULES
    from rapid_llm.kernels.toolchain.fastpath.binding import fastcall

    return fastcall().OutFirst(fn, "rms_norm", OUT_RULES["like_input"], check, None, 3, ())
