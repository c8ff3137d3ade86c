"""Sweep rows x token counts x dtypes on every GPU this machine (or a Ray cluster) has; write the figures.

    python benchmarks/sweep.py [--ops rms_norm silu_and_mul ...] [--tokens 1 16 128 1024 4096 16384]
                               [--dtypes bf16] [--executor local|ray] [--results | --out DIR] [--json FILE]

This is how the committed figures are made: ``--results`` merges each op's
figures into ``rapid_llm/kernels/ops/<group>/<op>/figures/<gpu kind>.json``, one
file per GPU kind the sweep reached, each entry naming the digest of the code it
measured and the file's meta the driver, CUDA, torch and commit. Dispatch ranks
rows by these on every machine of that kind until a row's code changes.

One task per (op, form, T, dtype): all its rows are timed by one worker on one
device. The local pool starts one worker process per visible GPU (pinned with
CUDA_VISIBLE_DEVICES; set it to choose GPUs); ``--executor ray`` runs the tasks
on a Ray cluster (``pip install -e .[ray]``; ``--ray-address`` to join one). A
worker that crashes marks its task crashed and the sweep goes on; every record
without a figure is printed with its reason. ``benchmarks/bench_llm_ops.py``
prints the comparison tables (against torch.compile, as a caller sees a call).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Sequence

try:
    import rapid_llm  # noqa: F401 - installed (pip install -e .)
except ImportError:  # run from a checkout without an install: the checkout's package (its workers get the same)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rapid_llm.bench.sweeps import LocalPool, sweep
from rapid_llm.bench.sweeps.records import Record
from rapid_llm.bench.sweeps.tasks import DEFAULT_TOKENS


def _progress(total: list[int]) -> "callable":
    start = time.perf_counter()

    def hear(records: list[Record]) -> None:
        total[0] += 1
        if not records:
            return
        r = records[0]
        ok = [x for x in records if x.ok]
        best = min(ok, key=lambda x: x.median_us) if ok else None
        form = f"[{r.form}]" if r.form else ""
        said = f"fastest {best.row} {best.median_us:.2f} us" if best else "no figure"
        bad = [x for x in records if not x.ok]
        if bad:
            said += "; " + ", ".join(f"{x.row} {x.status}" for x in bad)
        print(f"[{time.perf_counter() - start:7.1f} s] task {total[0]}: {r.env.gpu_kind} ({r.worker}) {r.op}{form} "
              f"{r.dtype} numel={r.numel}: {len(ok)} rows, {said}", flush=True)

    return hear


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs="+", help="default: every op that declares token_numel")
    parser.add_argument("--rows", nargs="+", help="default: every row dispatch could pick on each worker")
    parser.add_argument("--tokens", type=int, nargs="+", default=list(DEFAULT_TOKENS))
    parser.add_argument("--numels", type=int, nargs="+", help="element counts instead of token counts")
    parser.add_argument("--dtypes", nargs="+", default=["bf16"], choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--no-forms", action="store_true", help="only each op's declared form (not OpDecl.forms)")
    parser.add_argument("--executor", default="local", choices=["local", "ray"])
    parser.add_argument("--ray-address", help="a running Ray cluster to join (default: start a local one)")
    parser.add_argument("--task-timeout", type=float, help="seconds after which a local worker's task is killed")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--results", action="store_true",
                        help="merge the figures into the package (ops/<group>/<op>/figures/<gpu kind>.json)")
    parser.add_argument("--out", type=Path, help="merge the figures into a folder shaped like the ops folder instead")
    parser.add_argument("--replace", action="store_true", help="start each written figures file afresh")
    parser.add_argument("--json", type=Path, help="write every record (figures and failures) to this file")
    args = parser.parse_args(argv)

    if args.executor == "ray":
        from rapid_llm.bench.sweeps.ray_executor import RayExecutor

        executor = RayExecutor(args.ray_address)
    else:
        executor = LocalPool(task_timeout_s=args.task_timeout)
    count = [0]
    start = time.perf_counter()
    result = sweep(args.ops, args.rows, tokens=args.tokens, numels=args.numels, dtypes=args.dtypes,
                   forms=not args.no_forms, executor=executor, warmup=args.warmup, repeats=args.repeats,
                   on_records=_progress(count))
    print()
    print(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in result.records], indent=1) + "\n")
        print(f"records: {args.json}")
    if args.results or args.out:
        cpu = [k for k in result.gpu_kinds() if k == "cpu"]
        if args.results and cpu:
            print("--results: CPU figures are not committed (they rank nothing on a GPU kind); --out DIR keeps them")
            result.records = [r for r in result.records if r.env.gpu_kind != "cpu"]
        for path in result.merge(args.out if args.out else None, replace=args.replace):
            print(f"wrote {path}")
    print(f"wall time {time.perf_counter() - start:.1f} s ({result.workers} workers, {result.executor})")
    return 0 if not [r for r in result.records if r.status in ("crashed", "error", "refused")] else 1


if __name__ == "__main__":
    sys.exit(main())
