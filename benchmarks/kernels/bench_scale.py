"""scale: every row against a torch reference and a plain copy, 1K to 256M elements.

    python benchmarks/kernels/bench_scale.py [--sizes 1024 1048576] [--dtypes bf16 fp32]
                                             [--record] [--out benchmarks/results/scale_h200.json]
    python benchmarks/kernels/bench_scale.py --check-harness

Arms: the JIT, native and Triton rows, called through their KernelSpec
targets (never through dispatch, so each arm is the row itself), torch.mul
into a preallocated output, and a device copy of the same bytes, the
roofline every other arm is compared with. Bytes moved = read + write =
2 * numel * itemsize. Rows whose toolchain is missing here are listed and
skipped.

``--check-harness`` prints the two figures that say the harness can be
trusted: below the L2 size no arm beats the copy roofline with cold L2
(while the same call with warm L2 may), and the spread of medians over five
repeated runs.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from rapid_llm.bench import bench, copy_roofline, store
from rapid_llm.bench.harness import BenchResult, device_label, l2_bytes
from rapid_llm.bench.ops import stored_figures
from rapid_llm.kernels.dispatch import load_shipped_groups
from rapid_llm.kernels.spec import DTYPE_NAMES, rows_for

OP = "scale"
FACTOR = 1.7
GPU_SIZES = tuple(1 << p for p in range(10, 29, 2))  # 1K .. 256M, every 4x
CPU_SIZES = tuple(1 << p for p in range(10, 21, 2))  # 1K .. 1M
ROWS = ("jit/scale", "native/scale", "triton/scale")
TORCH_ARM = "reference/torch.mul"
COPY_ARM = "reference/copy"


def torch_mul(x: torch.Tensor, factor: float, out: torch.Tensor) -> torch.Tensor:
    return torch.mul(x, factor, out=out)


def device_copy(x: torch.Tensor, factor: float, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(x)


def arms(device: torch.device) -> tuple[dict[str, Callable[..., Any]], dict[str, str]]:
    """The callables to time here, and the rows skipped with the reason."""
    load_shipped_groups()
    chosen: dict[str, Callable[..., Any]] = {}
    skipped: dict[str, str] = {}
    for row in rows_for(OP):
        if row.name not in ROWS:
            continue
        avail = row.probe(device) if not row.is_native else True
        if device.type not in row.devices:
            skipped[row.name] = f"runs on {', '.join(row.devices)} only"
        elif not avail:
            skipped[row.name] = avail.reason
        else:
            chosen[row.name] = row.load()
    chosen[TORCH_ARM] = torch_mul
    chosen[COPY_ARM] = device_copy
    return chosen, skipped


def _inputs(numel: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.empty(numel, dtype=dtype, device=device).uniform_(-4, 4)
    return x, torch.empty_like(x)


def run(sizes: Sequence[int], dtypes: Sequence[str], device: torch.device, repeats: int,
        graph: bool) -> tuple[list[dict[str, Any]], dict[str, str]]:
    fns, skipped = arms(device)
    results = []
    for dtype in dtypes:
        tdtype = getattr(torch, DTYPE_NAMES[dtype])
        for numel in sizes:
            x, out = _inputs(numel, tdtype, device)
            for name, fn in fns.items():
                r = bench(fn, x, FACTOR, out, bytes_moved=2 * x.nbytes, repeats=repeats, graph=graph, label=name)
                results.append({"row": name, "dtype": dtype, "numel": numel, "result": r})
            del x, out
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return results, skipped


def print_tables(results: list[dict[str, Any]], roofline: float, device_name: str) -> None:
    kind = "CPU numbers" if device_name == "cpu" else device_name
    print(f"{OP} on {kind}; copy roofline {roofline:.0f} GB/s (measured by the harness)")
    for dtype in dict.fromkeys(r["dtype"] for r in results):
        print(f"\n[{dtype}]")
        print(f"{'numel':>10}  {'arm':<20} {'median us':>10} {'p20-p80 us':>17} {'GB/s':>8} {'% copy':>7}")
        for r in (r for r in results if r["dtype"] == dtype):
            b: BenchResult = r["result"]
            print(f"{r['numel']:>10}  {r['row']:<20} {b.median_us:>10.2f} {b.p20_us:>8.2f}-{b.p80_us:<8.2f}"
                  f" {b.gbps:>8.1f} {100 * b.roofline_fraction:>6.1f}%")
    largest = max(r["numel"] for r in results)
    print(f"\nat {largest} elements:")
    for r in (r for r in results if r["numel"] == largest):
        b = r["result"]
        print(f"  {r['dtype']:<5} {r['row']:<20} {b.gbps:8.1f} GB/s  {100 * b.roofline_fraction:5.1f}% of copy")


def _meta(device: torch.device, roofline: float) -> dict[str, Any]:
    meta = {"copy_roofline_gbps": roofline, "torch": torch.__version__,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if device.type == "cuda":
        meta.update(cuda=torch.version.cuda, l2_bytes=l2_bytes(device))
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        pass
    return meta


def save(results: list[dict[str, Any]], device: torch.device, roofline: float, record: bool,
         out: str | None) -> None:
    name = device_label(device)
    meta = _meta(device, roofline)
    doc: dict[str, Any] = {"device": name, "entries": {}, "meta": meta}
    for r in results:
        b: BenchResult = r["result"]
        key, entry = store.make_entry(OP, r["row"], r["dtype"], r["numel"], b.median_us, **stored_figures(b))
        doc["entries"][key] = entry
        if record:
            store.record(OP, r["row"], name, r["dtype"], r["numel"], b.median_us, **stored_figures(b))
    if record:
        store.record_meta(name, **meta)
        print(f"recorded {len(results)} figures in {store.results_path(name)}")
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}")


def check_harness(device: torch.device, repeats: int) -> None:
    """Cold-L2 sanity (never above the copy roofline below L2) and run-to-run spread."""
    roofline = copy_roofline(device)
    l2 = l2_bytes(device)
    print(f"harness check on {device_label(device)}: copy roofline {roofline:.0f} GB/s, L2 {l2 / 2**20:.0f} MiB")
    if device.type != "cuda":
        print("\n1. cold-L2 check: skipped, the CPU path does not rotate buffers (GPU only)")
    else:
        print("\n1. below L2 (input + output < L2): cold vs warm L2, bf16")
        print(f"{'numel':>10} {'set MiB':>8}  {'arm':<20} {'cold GB/s':>10} {'cold %':>7} {'warm GB/s':>10} {'warm %':>7}"
              "  verdict")
        worst = 0.0
        for numel in (1 << 18, 1 << 20, 1 << 22, (l2 // 4) // 2):
            x, out = _inputs(numel, torch.bfloat16, device)
            for name, fn in ((TORCH_ARM, torch_mul), (COPY_ARM, device_copy)):
                cold = bench(fn, x, FACTOR, out, bytes_moved=2 * x.nbytes, repeats=repeats)
                warm = bench(fn, x, FACTOR, out, bytes_moved=2 * x.nbytes, repeats=repeats, cold_l2=False)
                worst = max(worst, cold.roofline_fraction)
                verdict = "ok" if cold.roofline_fraction <= 1.0 else "ABOVE ROOFLINE"
                print(f"{numel:>10} {4 * numel / 2**20:>8.1f}  {name:<20} {cold.gbps:>10.1f}"
                      f" {100 * cold.roofline_fraction:>6.1f}% {warm.gbps:>10.1f} {100 * warm.roofline_fraction:>6.1f}%"
                      f"  {verdict}")
        print(f"highest cold-L2 figure below L2: {100 * worst:.1f}% of the copy roofline")
    print("\n2. run-to-run spread of the median over 5 runs")
    sizes = (1 << 20, 1 << 26) if device.type == "cuda" else (1 << 16, 1 << 20)
    for numel in sizes:
        x, out = _inputs(numel, torch.bfloat16, device)
        medians = [bench(torch_mul, x, FACTOR, out, bytes_moved=2 * x.nbytes, repeats=repeats).median_us
                   for _ in range(5)]
        mid = sorted(medians)[2]
        spread = (max(medians) - min(medians)) / mid
        print(f"  torch.mul bf16 numel={numel}: medians {', '.join(f'{m:.2f}' for m in medians)} us; "
              f"spread (max-min)/median = {100 * spread:.1f}%")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", help="element counts (default 1K..256M on GPU, 1K..1M on CPU)")
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp16", "fp32"], choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--graph", action="store_true", help="time through CUDA graphs (no launch overhead)")
    parser.add_argument("--record", action="store_true", help="record medians in the results store (dispatch ranks by them)")
    parser.add_argument("--out", help="write this run's figures as a results JSON (for benchmarks/results/)")
    parser.add_argument("--check-harness", action="store_true", help="cold-L2 and run-to-run spread checks only")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.check_harness:
        check_harness(device, args.repeats)
        return 0
    sizes = args.sizes or (GPU_SIZES if device.type == "cuda" else CPU_SIZES)
    if any(n < 1 for n in sizes):
        parser.error("sizes must be >= 1 element")
    start = time.perf_counter()
    results, skipped = run(sizes, args.dtypes, device, args.repeats, args.graph)
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    roofline = copy_roofline(device)
    print_tables(results, roofline, device_label(device))
    save(results, device, roofline, args.record, args.out)
    print(f"\nwall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
