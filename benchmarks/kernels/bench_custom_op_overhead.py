"""Host-side cost of an op's call paths: K.<op>, torch.ops.rapid_llm.<op>, and torch.library.custom_op.

    python benchmarks/kernels/bench_custom_op_overhead.py [--op rms_norm] [--numel 1024] [--dtype bf16]

Every arm runs the same row on the same tensors (the op's bench case, without ``out=``):

* ``K.<op>``: the eager path callers use (the dispatcher: one lookup, then the row);
* ``torch.ops.rapid_llm.<op>.default``: the custom op, what a compiled graph calls; on CUDA its C kernel
  (rapid_llm.kernels.dispatch.c_kernels) once the first call has taught it; the packet
  ``torch.ops.rapid_llm.<op>`` adds its own Python ``__call__``;
* the op's Python kernel through torch.ops (``torch.ops.rapid_llm._<op>_python``, what the C kernel falls back
  to), where the op has a C kernel: what every call ran before the C kernel, plus the step that teaches the
  C kernel, which it takes on each call (the old path less rapid_llm's dispatch is the "kernel = the row" arm);
* the same dispatcher registered through ``torch.library.custom_op`` (a scratch namespace): the other
  registration path, measured to show why rapid_llm does not use it;
* the chosen row called directly, and ``torch.compiler.is_dynamo_compiling()`` alone (what the portable
  Python dispatcher pays per call for tracing; the compiled dispatcher pays nothing);
* two ops of the same schema in a scratch namespace, registered like the custom op: one whose Python kernel
  is the chosen row itself (the custom op less rapid_llm's dispatcher) and one whose kernel returns a result
  made once, doing no work (torch's boundary alone for this schema). The gap between the second and the first
  is the row's own cost inside the boundary, beside its cost called directly. With ``--cpp-floor``, a third
  whose kernel is C registered through torch's stable C shim, as the C kernel is, and does no work (hands back
  its first input, or nothing): the boundary the C kernel itself sits behind, for this schema.

Rounds are interleaved so drift in the machine's state hits every arm alike.

Then torch's own floors, the same way: what a call through ``torch.ops`` costs
over calling the same work directly, for a Python kernel that returns its
input (the boundary the custom op crosses, with no work inside) and for an
aten C++ kernel (``torch.ops.aten.mul.Scalar`` against ``torch.mul``). No
registration path can cost less than the second; the custom op pays the first.
``--cpp-floor`` adds a C++ kernel that returns its input, registered with
``TORCH_LIBRARY`` from a small extension built here (torch's C++ headers and a
host compiler; about 30 s the first time): the third registration path, with
no work inside.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any, Callable, Sequence

import torch

import rapid_llm.kernels as K
from rapid_llm.bench import bench_host
from rapid_llm.kernels.dispatch import c_kernels, custom_ops, dispatcher as dispatch
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry.opdecl import get_decl


def _custom_op_arm(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` registered through torch.library.custom_op with the op's schema, in a scratch namespace."""
    schema = custom_ops.schema_for(get_decl(name))
    body = schema.text[len(name):]
    op = torch.library.custom_op(f"rapid_llm_bench::{name}", mutates_args=schema.mutated, schema=body)(
        lambda *args: fn(*args))
    return op


def _same_schema_arms(name: str, row_call: Callable[..., Any], call_args: tuple,
                      shim_floor: bool = False) -> dict[str, Callable[..., Any]]:
    """Ops of ``name``'s schema in a scratch namespace: the row as the kernel, a kernel that does no work, and
    (``shim_floor``) a C kernel through torch's stable C shim that does no work."""
    schema = custom_ops.schema_for(get_decl(name))
    ready = row_call(*call_args)  # the no-work kernel hands back a result made once
    lib = torch.library.Library("rapid_llm_bench_schema", "FRAGMENT")
    kernels = {"row": lambda *a, **k: row_call(*a, **k), "ready": lambda *a, **k: ready}
    arms = {}
    for tag, kernel in kernels.items():
        op_name = f"{name}_{tag}"
        lib.define(schema.text.replace(name, op_name, 1))
        for key in custom_ops.DISPATCH_KEYS:
            lib.impl(op_name, kernel, key)
        arms[tag] = getattr(torch.ops.rapid_llm_bench_schema, op_name).default
    _keep.append(lib)
    out = {"torch.ops, same schema, kernel = the row": arms["row"],
           "torch.ops, same schema, kernel does no work": arms["ready"]}
    if shim_floor:
        op_name = f"{name}_shim"
        lib.define(schema.text.replace(name, op_name, 1))
        why = _shim_noop(schema, op_name)
        if why:
            print(f"  (no C shim arm: {why})")
        else:
            out["torch.ops, same schema, C shim, no work"] = getattr(torch.ops.rapid_llm_bench_schema, op_name).default
    return out


#: A kernel through torch's stable C shim (aoti_torch_library_impl), as rapid_llm's C kernel is registered,
#: that does no work: it frees the tensor handles it was given and leaves the first input as the result.
_SHIM_NOOP = r"""
#include <dlfcn.h>
#include <stdint.h>
typedef uint64_t SIV;
static int (*init_impl)(const char*, const char*, const char*, uint32_t, void**);
static int (*impl)(void*, const char*, void (*)(SIV*, uint64_t, uint64_t));
static int (*delete_tensor)(void*);
static char kinds[64];
static int keep_first;
static void noop(SIV* stack, uint64_t nargs, uint64_t nout) {
  for (uint64_t i = keep_first; i < nargs; ++i)
    if (kinds[i] == 't') delete_tensor((void*)stack[i]);
  (void)nout;
}
int shim_noop(const char* torch_lib, const char* ns, const char* op, const char* key, const char* k, int first) {
  void* h = dlopen(torch_lib, RTLD_NOW | RTLD_NOLOAD);
  void* lib = 0;
  if (!h) return 1;
  *(void**)&init_impl = dlsym(h, "aoti_torch_library_init_impl");
  *(void**)&impl = dlsym(h, "aoti_torch_library_impl");
  *(void**)&delete_tensor = dlsym(h, "aoti_torch_delete_tensor_object");
  if (!init_impl || !impl || !delete_tensor) return 2;
  for (int i = 0; i < 63 && k[i]; ++i) kinds[i] = k[i];
  keep_first = first;
  if (init_impl(ns, key, "bench_custom_op_overhead", 0, &lib)) return 3;
  return impl(lib, op, noop) ? 4 : 0;
}
"""


def _shim_noop(schema: Any, op_name: str) -> str:
    """Register ``_SHIM_NOOP`` as ``op_name``'s kernel on the bench's device keys; '' or why it could not."""
    import ctypes
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    kinds = c_kernels.kinds(schema.args)
    if kinds is None or schema.returns not in ("Tensor", "()") or (schema.returns == "Tensor" and kinds[:1] != "t"):
        return f"schema {schema.text!r} is not one the C kernel serves"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return "no C compiler"
    build = Path(tempfile.mkdtemp(prefix="rapid_llm_shim_noop_"))
    (build / "noop.c").write_text(_SHIM_NOOP)
    try:
        done = subprocess.run([cc, "-O2", "-shared", "-fPIC", str(build / "noop.c"), "-o", str(build / "noop.so"),
                               "-ldl"], capture_output=True, text=True)
        if done.returncode:
            return f"cc failed: {done.stderr.strip()[:200]}"
        noop = ctypes.CDLL(str(build / "noop.so"))  # mapped: the file can go
    finally:
        shutil.rmtree(build, ignore_errors=True)
    _keep.append(noop)
    torch_lib = c_kernels.torch_shim_library()
    for key in custom_ops.DISPATCH_KEYS:
        rc = noop.shim_noop(torch_lib.encode(), b"rapid_llm_bench_schema", op_name.encode(), key.encode(),
                            kinds.encode(), int(schema.returns == "Tensor"))
        if rc:
            return f"registering it for {key} failed ({rc})"
    return ""


_keep: list[Any] = []  # the scratch library stays registered while its ops are timed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", default="rms_norm")
    parser.add_argument("--numel", type=int, default=1024)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--n", type=int, default=500, help="calls per timed round")
    parser.add_argument("--pairs", type=int, default=15, help="interleaved rounds")
    parser.add_argument("--cpp-floor", action="store_true",
                        help="also time a TORCH_LIBRARY C++ kernel's floor and a no-work C shim kernel (built here)")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = platform.torch_dtype(args.dtype)
    case = get_decl(args.op).bench(args.numel, dtype, device)
    call_args = case.args
    op = getattr(K, args.op)
    row = dispatch.resolve(args.op, *call_args)
    packet = custom_ops.torch_op(args.op)
    arms: dict[str, Callable[..., Any]] = {
        f"K.{args.op}": op,
        f"torch.ops.rapid_llm.{args.op}.default": packet.default,
        f"torch.ops.rapid_llm.{args.op}": packet,
        **({"the Python kernel through torch.ops": getattr(torch.ops.rapid_llm, c_kernels.python_op_name(args.op)).default}
           if not c_kernels.why_not(args.op) and device.type == "cuda" else {}),  # the C kernel's keys (c_kernels.KEYS)
        "torch.library.custom_op": _custom_op_arm(args.op, op),
        f"row {row.name} direct": row.call_path(),
        "is_dynamo_compiling()": lambda *a: torch.compiler.is_dynamo_compiling(),
        **_same_schema_arms(args.op, row.call_path(), call_args, shim_floor=args.cpp_floor),
    }
    for fn in arms.values():
        fn(*call_args)  # fill caches: the steady state is what a model sees
    runs: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(args.pairs):
        for label, fn in arms.items():
            runs[label].append(bench_host(fn, *call_args, n=args.n, label=label).median_us)
    base = statistics.median(runs[f"K.{args.op}"])
    print(f"{args.op}, bench case at numel {args.numel} {args.dtype} on {platform.device_label(device)}; "
          f"chosen row {row.name}")
    why = c_kernels.why_not(args.op)
    print(f"  C kernel: {'learned ' + repr(c_kernels.learned(args.op)) if not why else 'none, ' + why}")
    for label, values in runs.items():
        us = statistics.median(values)
        extra = statistics.median(v - b for v, b in zip(values, runs[f"K.{args.op}"]))
        print(f"  {label:44s} {us:7.2f} us/call   vs K.{args.op}: {extra:+6.2f} us")
    print(f"  (medians over {args.pairs} interleaved rounds of {args.n} calls; K.{args.op} {base:.2f} us)")
    floors(call_args[0], args.n, args.pairs, args.cpp_floor)
    return 0


_CPP_FLOOR = r"""
#include <torch/library.h>
#include <ATen/ATen.h>
at::Tensor identity(const at::Tensor& x) { return x; }
TORCH_LIBRARY_FRAGMENT(rapid_llm_cpp_floor, m) { m.def("identity(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(rapid_llm_cpp_floor, CompositeExplicitAutograd, m) { m.impl("identity", &identity); }
"""


def _cpp_identity() -> Callable[..., Any]:
    """torch.ops.rapid_llm_cpp_floor.identity: a C++ kernel registered with TORCH_LIBRARY, built here."""
    from torch.utils.cpp_extension import load_inline

    # The source includes what it uses; torch/extension.h, which load_inline adds by default, would double the build.
    load_inline("rapid_llm_cpp_floor", cpp_sources=[_CPP_FLOOR], is_python_module=False, extra_cflags=["-O2"],
                no_implicit_headers=True)
    return torch.ops.rapid_llm_cpp_floor.identity.default


def floors(x: torch.Tensor, n: int, pairs: int, cpp: bool = False) -> None:
    """torch.ops' own cost per call over a direct call: a Python kernel with no work, aten's C++ kernel, and
    (``cpp``) a C++ kernel of our own with no work."""
    lib = torch.library.Library("rapid_llm_floor", "DEF")
    lib.define("identity(Tensor x) -> Tensor")

    def identity(t: torch.Tensor) -> torch.Tensor:
        return t

    for key in ("CPU", "CUDA"):
        lib.impl("identity", identity, key)
    pairs_of_arms = {
        "Python kernel (returns its input)": (torch.ops.rapid_llm_floor.identity.default, identity, (x,)),
        "aten C++ kernel (mul.Scalar)": (torch.ops.aten.mul.Scalar, torch.mul, (x, 2.0)),
    }
    if cpp:
        pairs_of_arms["C++ kernel (returns its input)"] = (_cpp_identity(), identity, (x,))
    for label, (via_ops, direct, call_args) in pairs_of_arms.items():
        via_ops(*call_args), direct(*call_args)
        extra = []
        for _ in range(pairs):
            a = bench_host(via_ops, *call_args, n=n, label="torch.ops").median_us
            b = bench_host(direct, *call_args, n=n, label="direct").median_us
            extra.append(a - b)
        print(f"  torch.ops floor, {label:34s}: {statistics.median(extra):+6.2f} us over the direct call")


if __name__ == "__main__":
    sys.exit(main())
