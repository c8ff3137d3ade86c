"""The CuTe DSL rms_norm kernel (imported only to compile it: a built kernel loads from the cache without it).

One CTA per token row. The row is seen through a ``(VEC, HIDDEN // VEC)`` layout: ``VEC`` consecutive
elements (16 bytes: 8 bf16/fp16, 4 fp32) a column, and thread ``t`` takes columns ``t, t + THREADS, ...``, so
each access is one 128-bit load or store (``autovec_copy`` picks the width from the layout and the pointers'
assumed 16-byte alignment) and a warp touches 512 contiguous bytes. The sum of squares is accumulated in fp32,
reduced across the warp by shuffles and across the CTA through shared memory; the numerics are
native/rms_norm's (fp32 sum, ``1 / sqrt_rn(mean + eps)``, one rounding of ``x * inv_rms * w``).

``KEEP`` says what a thread keeps in registers: 2, its share of the row and of the weight, loaded before the
reduction (whose latency then hides theirs); 1, the row only (the weight read after the reduction); 0,
nothing (the row read twice), as the registers a thread of its CTA may have allow. A hidden
size that is no multiple of 16 bytes, or a call whose pointers or row strides are not 16-byte aligned, takes
the ``VEC = 1`` kernel (the launcher picks it per call). ``hidden`` is a compile-time constant (one build per
dtype and hidden size, as the DSL's own kernels do); rows and row strides are not. The launch shapes are
chosen in cute.py (``specialisation``), which needs no DSL.

The kernel's parameters are plain (three global pointers, two int64 row strides, an fp32 eps), so a C
launcher (``rms_norm_cute.cpp``) starts it without the DSL: :func:`compile_kernels` returns the cubin and
the symbols, and rapid_llm.kernels.toolchain.cute_build links them into a fast-path module.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64
from cutlass.cute.runtime import make_ptr

#: Bytes per thread per access (one 128-bit load or store).
ACCESS_BYTES = 16

_DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16, "fp32": cutlass.Float32}


@cute.kernel
def rms_norm_kernel(x_ptr: cute.Pointer, w_ptr: cute.Pointer, o_ptr: cute.Pointer, x_stride: Int64, o_stride: Int64,
                    eps: Float32, HIDDEN: cutlass.Constexpr, VEC: cutlass.Constexpr, THREADS: cutlass.Constexpr,
                    KEEP: cutlass.Constexpr):
    COLUMNS = HIDDEN // VEC
    ITERS = (COLUMNS + THREADS - 1) // THREADS
    WARPS = THREADS // 32
    EVEN = COLUMNS % THREADS == 0  # every thread has ITERS whole columns: no bounds check
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    row64 = Int64(row)  # int64: tokens * row stride can pass 2^31 elements
    columns = cute.make_layout((VEC, COLUMNS), stride=(1, VEC))
    gx = cute.make_tensor(x_ptr + row64 * cute.assume(x_stride, divby=VEC), columns)
    go = cute.make_tensor(o_ptr + row64 * cute.assume(o_stride, divby=VEC), columns)
    gw = cute.make_tensor(w_ptr, columns)
    acc = Float32(0.0)
    if cutlass.const_expr(KEEP > 0):
        xs = cute.make_rmem_tensor(cute.make_layout((VEC, ITERS), stride=(1, VEC)), x_ptr.dtype)
        wk = cute.make_rmem_tensor(cute.make_layout((VEC, ITERS), stride=(1, VEC)), x_ptr.dtype)
        for k in cutlass.range_constexpr(ITERS):
            j = tidx + k * THREADS
            if EVEN or j < COLUMNS:
                cute.autovec_copy(gx[None, j], xs[None, k])
                if cutlass.const_expr(KEEP > 1):
                    cute.autovec_copy(gw[None, j], wk[None, k])  # before the reduction: its latency hides there
                for i in cutlass.range_constexpr(VEC):
                    v = Float32(xs[i, k])
                    acc = acc + v * v
    else:
        xv = cute.make_rmem_tensor(cute.make_layout((VEC,)), x_ptr.dtype)
        for k in cutlass.range(ITERS):
            c = tidx + k * THREADS
            if c < COLUMNS:
                cute.autovec_copy(gx[None, c], xv)
                for i in cutlass.range_constexpr(VEC):
                    v = Float32(xv[i])
                    acc = acc + v * v
    acc = cute.arch.warp_reduction_sum(acc)
    if cutlass.const_expr(WARPS > 1):
        partials = cute.make_tensor(cute.arch.alloc_smem(Float32, WARPS, alignment=16), cute.make_layout(WARPS))
        if tidx % 32 == 0:
            partials[tidx // 32] = acc
        cute.arch.barrier()
        acc = Float32(0.0)
        for i in cutlass.range_constexpr(WARPS):
            acc = acc + partials[i]
    inv_rms = Float32(1.0) / cute.math.sqrt(acc / Float32(HIDDEN) + eps)
    ws = cute.make_rmem_tensor(cute.make_layout((VEC,)), x_ptr.dtype)
    ys = cute.make_rmem_tensor(cute.make_layout((VEC,)), x_ptr.dtype)
    if cutlass.const_expr(KEEP > 0):
        for k in cutlass.range_constexpr(ITERS):
            j = tidx + k * THREADS
            if EVEN or j < COLUMNS:
                if cutlass.const_expr(KEEP == 1):
                    cute.autovec_copy(gw[None, j], wk[None, k])
                for i in cutlass.range_constexpr(VEC):
                    ys[i] = (Float32(xs[i, k]) * inv_rms * Float32(wk[i, k])).to(x_ptr.dtype)
                cute.autovec_copy(ys, go[None, j])
    else:
        xv2 = cute.make_rmem_tensor(cute.make_layout((VEC,)), x_ptr.dtype)
        for k in cutlass.range(ITERS):
            c2 = tidx + k * THREADS
            if c2 < COLUMNS:
                cute.autovec_copy(gx[None, c2], xv2)
                cute.autovec_copy(gw[None, c2], ws)
                for i in cutlass.range_constexpr(VEC):
                    ys[i] = (Float32(xv2[i]) * inv_rms * Float32(ws[i])).to(x_ptr.dtype)
                cute.autovec_copy(ys, go[None, c2])


@cute.jit
def launch_rows(x: cute.Pointer, w: cute.Pointer, o: cute.Pointer, rows: Int32, x_stride: Int64, o_stride: Int64,
                eps: Float32, HIDDEN: cutlass.Constexpr, VEC: cutlass.Constexpr, THREADS: cutlass.Constexpr,
                KEEP: cutlass.Constexpr):
    """The DSL's own entry point (one kernel, launched by the DSL's host code): what a caller of the DSL alone
    compiles and calls, timed against the row's C launcher by benchmarks/bench_cute_paths.py."""
    rms_norm_kernel(x, w, o, x_stride, o_stride, eps, HIDDEN, VEC, THREADS, KEEP).launch(
        grid=(rows, 1, 1), block=(THREADS, 1, 1))


@cute.jit
def launch_tensors(mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, eps: Float32, HIDDEN: cutlass.Constexpr,
                   VEC: cutlass.Constexpr, THREADS: cutlass.Constexpr, KEEP: cutlass.Constexpr):
    """The DSL's own entry point for tensors (``from_dlpack`` ones, or torch tensors where compiled with
    ``--enable-tvm-ffi``): rows and row strides read from the tensors by the DSL's host code."""
    rms_norm_kernel(mX.iterator, mW.iterator, mO.iterator, Int64(mX.stride[0]), Int64(mO.stride[0]), eps, HIDDEN,
                    VEC, THREADS, KEEP).launch(grid=(mX.shape[0], 1, 1), block=(THREADS, 1, 1))


@cute.jit
def _launch_both(xa: cute.Pointer, wa: cute.Pointer, oa: cute.Pointer, x1: cute.Pointer, w1: cute.Pointer,
                 o1: cute.Pointer, rows: Int32, x_stride: Int64, o_stride: Int64, eps: Float32,
                 HIDDEN: cutlass.Constexpr, VEC: cutlass.Constexpr, THREADS: cutlass.Constexpr,
                 KEEP: cutlass.Constexpr, THREADS_1: cutlass.Constexpr, KEEP_1: cutlass.Constexpr):
    # Compiled, never run: it puts both kernels (16-byte and 1-element accesses) in one cubin.
    rms_norm_kernel(xa, wa, oa, x_stride, o_stride, eps, HIDDEN, VEC, THREADS, KEEP).launch(
        grid=(rows, 1, 1), block=(THREADS, 1, 1))
    rms_norm_kernel(x1, w1, o1, x_stride, o_stride, eps, HIDDEN, 1, THREADS_1, KEEP_1).launch(
        grid=(rows, 1, 1), block=(THREADS_1, 1, 1))


def compile_kernels(spec: dict[str, int | bool | str], arch: str, dump_dir: str) -> tuple[bytes, str]:
    """The cubin and PTX of both kernels of ``spec`` (cute.specialisation) for ``arch`` ("sm_90a"), compiled
    without a GPU; the DSL writes its copies of them into ``dump_dir`` (else it writes them into the cwd)."""
    dtype = _DTYPES[str(spec["dtype"])]
    size = dtype.width // 8
    aligned = make_ptr(dtype, ACCESS_BYTES, cute.AddressSpace.gmem, assumed_align=ACCESS_BYTES)
    plain = make_ptr(dtype, size, cute.AddressSpace.gmem, assumed_align=size)
    hidden = int(spec["HIDDEN"])
    compiled = cute.compile(_launch_both, aligned, aligned, aligned, plain, plain, plain, Int32(1), Int64(hidden),
                            Int64(hidden), Float32(1e-6), hidden, int(spec["VEC"]), int(spec["THREADS"]),
                            int(spec["KEEP"]), int(spec["THREADS_1"]), int(spec["KEEP_1"]),
                            options=f"--gpu-arch {arch} --keep-cubin --keep-ptx --dump-dir {dump_dir}")
    return compiled.artifacts.CUBIN, compiled.artifacts.PTX
