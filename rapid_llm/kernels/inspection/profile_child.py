"""The child side of rapid_llm.kernels.inspection.profiling: rebuild the rows, call each in its NVTX range for ncu.

    ncu --profile-from-start off --nvtx ... python -m rapid_llm.kernels.inspection.profile_child JOB.json

The warm-up calls (builds, Triton compiles, allocator growth) run before the
profiler starts, so ncu sees exactly one call of each row and one copy.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rapid_llm.kernels.verification.worker import RESULT_MARK
from rapid_llm.kernels.inspection.profiling import COMPILE_RANGE, COPY_RANGE, RANGE_PREFIX


def _bytes_of(args: tuple, kwargs: dict[str, Any], result: Any) -> int:
    """Bytes a call reads and writes, counted as its tensors' sizes: inputs, and the result unless it is one."""
    import torch

    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    outs = [r for r in (result if isinstance(result, (tuple, list)) else (result,)) if isinstance(r, torch.Tensor)]
    seen = {t.data_ptr() for t in tensors}
    return sum(t.nbytes for t in tensors) + sum(r.nbytes for r in outs if r.data_ptr() not in seen)


def main(job_path: str) -> int:
    import torch

    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.verification.isolate_child import register

    job = json.loads(Path(job_path).read_text())
    names = [register(r) for r in job["recipes"]]
    args, kwargs = torch.load(job["inputs"], weights_only=False)
    calls = {name: spec.get_row(name).load() for name in names}
    if job.get("compile"):
        floor = register(job["compile"])
        calls[COMPILE_RANGE.format(floor)] = torch.compile(spec.get_row(floor).load(), dynamic=False)
    moved = 0
    for fn in calls.values():  # warm: builds, compiles, first allocations (twice: torch.compile's first call traces)
        moved = max(moved, _bytes_of(args, kwargs, fn(*args, **kwargs)))
        fn(*args, **kwargs)
    # The roofline is a copy *kernel*: copy_ of a contiguous tensor is a DMA transfer, which ncu does not profile.
    # An identity bitwise_and reads and writes each 4-byte word once, as torch's vectorised elementwise kernel.
    src = torch.zeros(max(1, moved // 8), dtype=torch.int32, device=args[0].device if args else "cuda")
    dst = torch.empty_like(src)
    torch.bitwise_and(src, -1, out=dst)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, fn in calls.items():
        torch.cuda.nvtx.range_push(RANGE_PREFIX + name)
        fn(*args, **kwargs)
        torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push(RANGE_PREFIX + COPY_RANGE)
    torch.bitwise_and(src, -1, out=dst)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(RESULT_MARK + json.dumps({"bytes": moved, "rows": names}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
