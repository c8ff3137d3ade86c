"""The launch configuration a call really used: grid, block and shared memory of each kernel it launched.

Build facts say what the compiler decided; the grid and block size are the
launcher's decision at run time, and a change there (a new block size, a
grid that stops covering every SM) explains many a speed difference. They
are read from the CUDA profiler's record of one call (torch.profiler, which
records every kernel launch with its configuration). Its times are not
used: timing goes through the harness only.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Launch", "capture", "parse_trace"]


@dataclass(frozen=True)
class Launch:
    """One kernel launch: its name and configuration as the profiler recorded it."""

    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_memory: int | None = None   # bytes per block, static and dynamic
    registers: int | None = None       # per thread

    def config(self) -> str:
        """``grid 4096x1x1, block 256x1x1, 0 B smem, 16 regs``."""
        dims = lambda d: "x".join(str(x) for x in d) or "-"  # noqa: E731
        parts = [f"grid {dims(self.grid)}", f"block {dims(self.block)}"]
        if self.shared_memory is not None:
            parts.append(f"{self.shared_memory} B smem")
        if self.registers is not None:
            parts.append(f"{self.registers} regs")
        return ", ".join(parts)


def parse_trace(doc: dict[str, Any]) -> list[Launch]:
    """The kernel launches in a Chrome trace that torch.profiler exported, in launch order."""
    events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("cat") == "kernel"]
    events.sort(key=lambda e: e.get("ts", 0))
    out = []
    for e in events:
        args = e.get("args", {})

        def num(*keys: str) -> int | None:
            for k in keys:
                if isinstance(args.get(k), (int, float)):
                    return int(args[k])
            return None

        out.append(Launch(str(e.get("name", "?")), tuple(int(x) for x in args.get("grid", ())),
                          tuple(int(x) for x in args.get("block", ())),
                          num("shared memory", "static shared memory"), num("registers per thread")))
    return out


def capture(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[list[Launch], str | None]:
    """(launches of one call of ``fn``, None), or ([], why there are none: no GPU, no profiler)."""
    import torch

    if not torch.cuda.is_available() or not any(isinstance(a, torch.Tensor) and a.is_cuda
                                                for a in (*args, *kwargs.values())):
        return [], "launch configuration: read from the CUDA profiler's record of a call, so it needs a GPU"
    from torch.profiler import ProfilerActivity, profile

    fn(*args, **kwargs)  # compiled and loaded before the recorded call
    torch.cuda.synchronize()
    try:
        with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": one cycle here
            warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn(*args, **kwargs)
                torch.cuda.synchronize()
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path) as fh:
                doc = json.load(fh)
        finally:
            os.unlink(path)
    except (RuntimeError, OSError, ValueError) as exc:
        return [], f"launch configuration: the CUDA profiler could not record a call ({exc})"
    launches = parse_trace(doc)
    return launches, None if launches else "launch configuration: the profiler recorded no kernel launch"
