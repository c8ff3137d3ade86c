"""Host cost per call of a CuTe DSL kernel by each way of calling it: the row (a C launcher over the DSL's cubin)
against the DSL's own call paths, at T = 1 (rms_norm, bf16, hidden 4096), through bench_host.

Paths: ``row``: cute/rms_norm's launcher (rapid_llm.kernels.ops.norm.rms_norm.cute), out allocated;
``row, out given``: the same with out passed; ``launcher``: the fast-path module's C function alone;
``dsl, make_ptr per call``: the DSL's own entry point (``cute_kernel.launch_rows``, compiled by ``cute.compile``,
its host code launching on the default stream) called with pointers made from the
tensors on every call, as a caller of the DSL must; ``dsl, pointers made once``: the same with the pointer
objects reused (the floor of that path; not a correct call for new tensors); ``dsl, from_dlpack per call``: the
DSL's tensor entry point (``cute_kernel.launch_tensors``) with ``from_dlpack`` tensors made per call;
``dsl, tvm-ffi, torch tensors``: the same compiled with ``--enable-tvm-ffi`` and called with torch tensors
(where apache-tvm-ffi is installed). Also the compile time
of the DSL function, and the row's first call in this process. Needs a CUDA GPU of sm_90+ and the DSL.
"""
from __future__ import annotations

import sys
import time

import torch


def main() -> int:
    from rapid_llm.bench.harness import bench_host
    from rapid_llm.kernels.ops.norm.rms_norm import cute as row
    from rapid_llm.kernels.toolchain import cute_support

    if not cute_support.available(torch.device("cuda")):
        print(f"bench_cute_paths: {cute_support.available(torch.device('cuda')).reason}")
        return 1
    hidden, tokens = 4096, 1
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(hidden, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(x)
    start = time.perf_counter()
    row.rms_norm(x, w, 1e-6)
    torch.cuda.synchronize()
    print(f"row's first call in this process (build or cache load, then a launch): "
          f"{(time.perf_counter() - start) * 1e3:.1f} ms")
    launcher = row.launcher(torch.bfloat16, hidden).rms_norm

    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64
    from cutlass.cute.runtime import from_dlpack, make_ptr

    from rapid_llm.kernels.ops.norm.rms_norm import cute_kernel as ck  # its launch_rows: the DSL's own entry point

    spec = row.specialisation("bf16", hidden)
    constants = (spec["HIDDEN"], spec["VEC"], spec["THREADS"], spec["KEEP"])

    def ptrs(*tensors: torch.Tensor):
        return [make_ptr(cutlass.BFloat16, t.data_ptr(), cute.AddressSpace.gmem, assumed_align=16) for t in tensors]

    start = time.perf_counter()
    compiled = cute.compile(ck.launch_rows, *ptrs(x, w, out), Int32(tokens), Int64(hidden), Int64(hidden),
                            Float32(1e-6), *constants)
    print(f"cute.compile of the DSL's entry point in this process: {(time.perf_counter() - start) * 1e3:.0f} ms")

    def dsl_per_call(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        compiled(*ptrs(x, w, out), Int32(x.shape[0]), Int64(x.stride(0)), Int64(out.stride(0)), Float32(1e-6))

    made = ptrs(x, w, out)
    sizes = (Int32(tokens), Int64(hidden), Int64(hidden), Float32(1e-6))

    def dsl_reused(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        compiled(*made, *sizes)

    def dlpack(t: torch.Tensor):
        return from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=t.dim() - 1)

    start = time.perf_counter()
    with_tensors = cute.compile(ck.launch_tensors, dlpack(x), dlpack(w), dlpack(out), Float32(1e-6), *constants)
    print(f"cute.compile of the DSL's tensor entry point: {(time.perf_counter() - start) * 1e3:.0f} ms")

    def dsl_dlpack(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        with_tensors(dlpack(x), dlpack(w), dlpack(out), Float32(1e-6))

    ffi = None
    try:
        import tvm_ffi  # noqa: F401 - the DSL's fastest own path needs apache-tvm-ffi

        ffi = cute.compile(ck.launch_tensors, dlpack(x), dlpack(w), dlpack(out), Float32(1e-6), *constants,
                           options="--enable-tvm-ffi")
    except ImportError:
        print("apache-tvm-ffi is not installed: the DSL's TVM-FFI path (torch tensors passed as they are) is left out")
    except Exception as exc:  # noqa: BLE001 - one path that does not build leaves the others to time
        print(f"the DSL's TVM-FFI path did not compile, left out: {type(exc).__name__}: {str(exc)[:400]}")

    checks = [("dsl, make_ptr per call", dsl_per_call), ("dsl, from_dlpack per call", dsl_dlpack)]
    if ffi is not None:
        checks.append(("dsl, tvm-ffi, torch tensors", lambda x, w, out: ffi(x, w, out, 1e-6)))
    broken = set()
    for name, fn in checks:
        out.zero_()
        try:
            fn(x, w, out)
            torch.cuda.synchronize()
            torch.testing.assert_close(out, row.rms_norm(x, w, 1e-6), rtol=0, atol=0)  # the same kernel, bytes
        except Exception as exc:  # noqa: BLE001 - said, and that path left out of the timing
            print(f"{name}: {type(exc).__name__}: {str(exc)[:400]} (left out)")
            broken.add(name)
    paths = {
        "row": lambda: row.rms_norm(x, w, 1e-6),
        "row, out given": lambda: row.rms_norm(x, w, 1e-6, out),
        "launcher": lambda: launcher(out, x, w, 1e-6),
        "dsl, make_ptr per call": lambda: dsl_per_call(x, w, out),
        "dsl, pointers made once": lambda: dsl_reused(x, w, out),
        "dsl, from_dlpack per call": lambda: dsl_dlpack(x, w, out),
        "torch.empty_like alone": lambda: torch.empty_like(x),
    }
    if ffi is not None:
        paths["dsl, tvm-ffi, torch tensors"] = lambda: ffi(x, w, out, 1e-6)
    print(f"host cost per call, rms_norm bf16 [{tokens}, {hidden}] on {torch.cuda.get_device_name()} "
          "(bench_host: median of 7 rounds of 1000 calls):")
    for name, fn in paths.items():
        if name in broken:
            continue
        r = bench_host(lambda _x: fn(), x, label=name)
        print(f"  {name:28s} {r.median_us:7.2f} us  (p20 {r.p20_us:.2f}, p80 {r.p80_us:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
