"""Build times of the fast path against torch's extension loader, for the same kernels, in one run.

    python benchmarks/jit/bench_build.py [--kernels scale,scale_vec,rms_norm] [--builders fast,torch]
                                         [--repeats 3] [--out benchmarks/results/jit/build_<gpu>.json]

Every build runs in a fresh Python process (torch imported and CUDA initialised
first, as in a notebook that has used the GPU), on a private copy of the source
under a private cache, so nothing is shared with an earlier run. Per kernel and
builder it times:

- cold: a source the cache has never seen (the machine-wide one-off builds, the
  fast path's precompiled header and call binding, are made before timing and
  reported as "first build on this machine");
- edit: the same kernel after changing one constant in the device code;
- syntax error: a missing ';' in the device code, until the error is raised;
- unchanged, same process: build_jit again right after a build;
- unchanged, new process: a new process loading the cached build.

The figure of each step is BuildResult.seconds (or the time until BuildError),
measured inside the child; the fast path repeats each step ``--repeats`` times
and reports the median and range. torch's builds take about a minute each, so
by default they run once, concurrently across kernels (``--serial-torch`` runs
them one at a time); the fast path's builds always run alone.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
KERNELS = ("scale", "scale_vec", "rms_norm")
BUILDERS = ("fast", "torch")
#: The edit: one constant of the device code (the rounding stays one fp32 multiply).
EDIT = ("static_cast<float>(", "1.0f * static_cast<float>(")
#: The syntax error: a statement without its ';' opens the first kernel's body.
BREAK = ("{", "{\n  int broken = 1")

CHILD = r"""
import json, sys, time
import torch
if torch.cuda.is_available():
    torch.cuda.init(); torch.empty(1, device="cuda")
from rapid_llm.kernels.toolchain import jit
name, source, builder, twice = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
out = {}
t0 = time.perf_counter()
try:
    r = jit.build_jit(name, source, builder=builder)
    out.update(ok=True, seconds=r.seconds, cached=r.cached, builder=r.builder)
    if twice:
        again = jit.build_jit(name, source, builder=builder)
        out.update(again_seconds=again.seconds, again_cached=again.cached)
except jit.BuildError as exc:
    out.update(ok=False, seconds=time.perf_counter() - t0, error=str(exc).splitlines()[-1][:200])
print("RESULT " + json.dumps(out))
"""


def child(name: str, source: Path, builder: str, cache: Path, twice: bool = False) -> dict[str, Any]:
    env = dict(os.environ, RAPID_LLM_CACHE_DIR=str(cache), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-c", CHILD, name, str(source), builder, "1" if twice else "0"],
                          capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"build child for {name} ({builder}) died:\n{proc.stdout}\n{proc.stderr}")


def variant(src: Path, work: Path, tag: str, change: tuple[str, str] | None = None) -> Path:
    """A copy of ``src`` with a unique first line (a new cache key), optionally changed once."""
    text = src.read_text()
    if change is not None:
        if change[0] not in text:
            raise ValueError(f"{src.name}: cannot apply change {change[0]!r}")
        at = text.index(change[0], text.index("__global__"))  # inside the first kernel
        text = text[:at] + change[1] + text[at + len(change[0]):]
    out = work / tag / src.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"// bench_build {tag} {time.time_ns()}\n{text}")
    return out


def source_of(kernel: str, builder: str) -> Path:
    return HERE / "kernels" / ("fast" if builder != "torch" else "torch") / f"{kernel}.cu"


def steps(kernel: str, builder: str, work: Path, cache: Path, repeats: int) -> dict[str, list[float]]:
    """Every step for one (kernel, builder), ``repeats`` times; seconds per step."""
    src = source_of(kernel, builder)
    out: dict[str, list[float]] = {k: [] for k in ("cold", "edit", "syntax_error", "unchanged_same_process",
                                                    "unchanged_new_process")}
    for i in range(repeats):
        tag = f"{kernel}-{builder}-{i}"
        cold_src = variant(src, work, tag + "-cold")
        cold = child(kernel, cold_src, builder, cache, twice=True)
        assert cold["ok"] and not cold["cached"], cold
        out["cold"].append(cold["seconds"])
        out["unchanged_same_process"].append(cold["again_seconds"])
        warm = child(kernel, cold_src, builder, cache)
        assert warm["ok"] and warm["cached"], warm
        out["unchanged_new_process"].append(warm["seconds"])
        edit = child(kernel, variant(src, work, tag + "-edit", EDIT), builder, cache)
        assert edit["ok"] and not edit["cached"], edit
        out["edit"].append(edit["seconds"])
        broken = child(kernel, variant(src, work, tag + "-broken", BREAK), builder, cache)
        assert not broken["ok"], broken
        out["syntax_error"].append(broken["seconds"])
    return out


def first_build(work: Path, cache: Path) -> float:
    """The fast path's one-off, machine-wide builds (precompiled header, call binding) plus one cell."""
    result = child("scale", variant(source_of("scale", "fast"), work, "first"), "fast", cache)
    assert result["ok"], result
    return result["seconds"]


def summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--builders", default=",".join(BUILDERS))
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each fast-path step")
    parser.add_argument("--torch-repeats", type=int, default=1, help="repeats of each torch step")
    parser.add_argument("--serial-torch", action="store_true", help="torch builds one at a time")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    kernels = [k for k in args.kernels.split(",") if k]
    builders = [b for b in args.builders.split(",") if b]
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    work = Path(tempfile.mkdtemp(prefix="rapid_llm_bench_build_"))
    cache = work / "cache"
    results: dict[str, Any] = {
        "gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "kernels": kernels, "builders": builders, "steps": {},
    }
    try:
        if "fast" in builders:
            results["first_build_on_machine_s"] = first_build(work, cache)
            from rapid_llm.kernels.toolchain.fastpath.device import nvrtc_library

            nvrtc = nvrtc_library()
            results["fast_device_compiler"] = nvrtc[1] if nvrtc else "nvcc -cubin"
            for kernel in kernels:
                results["steps"][f"{kernel}/fast"] = {k: summary(v) for k, v in
                                                     steps(kernel, "fast", work, cache, args.repeats).items()}
        if "torch" in builders:
            workers = 1 if args.serial_torch else len(kernels)
            results["torch_builds_concurrent"] = workers > 1
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                futures = {k: pool.submit(steps, k, "torch", work, cache, args.torch_repeats) for k in kernels}
                for kernel, future in futures.items():
                    results["steps"][f"{kernel}/torch"] = {k: summary(v) for k, v in future.result().items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def report(results: dict[str, Any]) -> None:
    print(f"JIT build times on {results['gpu']}, torch {results['torch']}, CUDA {results['cuda']}, "
          f"Python {results['python']}, {results['cpu_count']} CPUs")
    if "first_build_on_machine_s" in results:
        print(f"fast path: device code by {results['fast_device_compiler']}; first build on this machine "
              f"(precompiled header + call binding + one cell): {results['first_build_on_machine_s']:.2f} s")
    if results.get("torch_builds_concurrent"):
        print("torch builds ran concurrently across kernels (one process each); fast builds ran alone")
    names = ("cold", "edit", "syntax_error", "unchanged_same_process", "unchanged_new_process")
    print(f"{'kernel/builder':22}" + "".join(f"{n:>26}" for n in names))
    for key, step in results["steps"].items():
        cells = []
        for n in names:
            s = step[n]
            cells.append(f"{s['median']:.3f} s" + (f" [{s['min']:.3f}-{s['max']:.3f}]" if s["n"] > 1 else ""))
        print(f"{key:22}" + "".join(f"{c:>26}" for c in cells))
    for kernel in results["kernels"]:
        fast, slow = results["steps"].get(f"{kernel}/fast"), results["steps"].get(f"{kernel}/torch")
        if fast and slow:
            ratios = ", ".join(f"{n} {slow[n]['median'] / fast[n]['median']:.0f}x" for n in names[:3])
            print(f"{kernel}: torch / fast = {ratios}")


if __name__ == "__main__":
    sys.exit(main())
