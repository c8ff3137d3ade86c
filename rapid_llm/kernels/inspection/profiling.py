"""``profile(op or row, *inputs)``: one call of each row under Nsight Compute, and why it is not at the roofline.

A child Python (rapid_llm.kernels.inspection.profile_child) rebuilds the rows (as
``verify``'s isolated runs do), calls each once to warm it, then once more
inside an NVTX range named after the row, and last a copy kernel moving the
same number of bytes: the copy roofline, measured in the same run. ``ncu``
profiles only that stretch (``--profile-from-start off``), so the notebook's
own process never runs under the profiler, and a row's kernels are told apart
by their range. Per kernel it reports achieved DRAM bandwidth (and its share of
the copy's), SM throughput, achieved against theoretical occupancy, L2 hit
rate and the top warp stall reasons.

ncu replays each kernel many times to read its counters: figures are of one
call on a flushed cache, not of a steady state; ``bench`` times the steady state.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rapid_llm.kernels.platform import cuda_tool

__all__ = ["KernelProfile", "Profile", "profile", "ncu_path", "parse_ncu_csv", "kernel_profiles", "RANGE_PREFIX",
           "COPY_RANGE", "COMPILE_RANGE", "ncu_problem", "profile_one_call"]

#: NVTX ranges the child opens around each call: "rapid_llm.profile|<row name>".
RANGE_PREFIX = "rapid_llm.profile|"
COPY_RANGE = "copy roofline"
#: Seconds the profiled child may take: torch's start-up, the builds, and ncu's replays of each kernel.
TIMEOUT_S = float(os.environ.get("RAPID_LLM_PROFILE_TIMEOUT_S", "600"))

#: ncu metric -> KernelProfile field.
METRICS = {
    "gpu__time_duration.sum": "time_ns",
    "dram__bytes_read.sum": "dram_read",
    "dram__bytes_write.sum": "dram_write",
    "dram__bytes.sum.per_second": "dram_bytes_per_s",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct_of_peak",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct_of_peak",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate",
    "launch__registers_per_thread": "registers",
}
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
#: Reasons that are not stalls: a warp that issues, or waits only because another one was picked.
_NOT_STALLS = {"selected", "not_selected"}


@dataclass(frozen=True)
class KernelProfile:
    """One kernel launch under ncu."""

    row: str
    kernel: str
    block: str
    grid: str
    time_ns: float
    dram_read: float
    dram_write: float
    dram_bytes_per_s: float
    dram_pct_of_peak: float
    sm_pct_of_peak: float
    achieved_occupancy: float
    theoretical_occupancy: float
    l2_hit_rate: float
    registers: float
    stalls: tuple[tuple[str, float], ...] = ()  # (reason, warps stalled per issued instruction), largest first

    def top_stalls(self, n: int = 3) -> list[tuple[str, float]]:
        return [s for s in self.stalls if s[0] not in _NOT_STALLS][:n]


@dataclass
class Profile:
    """What ncu measured for each row's kernels, beside the copy roofline of the same run."""

    target: str
    kernels: list[KernelProfile] = field(default_factory=list)
    copy: KernelProfile | None = None
    bytes_moved: int | None = None
    problem: str | None = None  # one line, when nothing could be measured
    notes: list[str] = field(default_factory=list)
    log: str = field(default="", repr=False)  # ncu's raw CSV, to keep or to open in other tools

    HEAD = ("row", "kernel", "time us", "DRAM GB/s", "of copy", "SM %", "occupancy ach/theo", "L2 hit",
            "top stalls (warps per issue)")

    def of_copy(self, k: KernelProfile) -> float | None:
        """A kernel's DRAM bandwidth as a fraction of the copy's in the same run."""
        if self.copy is None or not self.copy.dram_bytes_per_s:
            return None
        return k.dram_bytes_per_s / self.copy.dram_bytes_per_s

    def rows(self) -> list[tuple[str, ...]]:
        out = []
        for k in [*self.kernels, *([self.copy] if self.copy else [])]:
            share = self.of_copy(k)
            out.append((k.row, _short(k.kernel), f"{k.time_ns / 1e3:.2f}", f"{k.dram_bytes_per_s / 1e9:.0f}",
                        "-" if share is None else f"{100 * share:.0f}%", f"{k.sm_pct_of_peak:.0f}",
                        f"{k.achieved_occupancy:.0f}% / {k.theoretical_occupancy:.0f}%", f"{k.l2_hit_rate:.0f}%",
                        ", ".join(f"{r} {v:.1f}" for r, v in k.top_stalls())))
        return out

    def __str__(self) -> str:
        if self.problem:
            return f"profile({self.target}): {self.problem}"
        head = f"profile({self.target}): {len(self.kernels)} kernels under Nsight Compute"
        if self.bytes_moved:
            head += f"; the call moves {self.bytes_moved / 2**20:.1f} MiB, the copy roofline moves the same"
        table = [self.HEAD, *self.rows()]
        widths = [max(len(r[i]) for r in table) for i in range(len(self.HEAD) - 1)]
        lines = [head, *("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in table)]
        return "\n".join(line.rstrip() for line in [*lines, *self.notes])

    def __repr__(self) -> str:
        return str(self)


def _short(kernel: str, width: int = 48) -> str:
    """A kernel's name without its parameter list, cut to ``width``."""
    name = re.sub(r"\((?:[^()]|\([^()]*\))*\)\s*$", "", kernel.strip())
    name = re.sub(r"^void ", "", name)
    return name if len(name) <= width else name[: width - 3] + "..."


# ------------------------------------------------------------------ the tool


def ncu_path() -> str | None:
    return cuda_tool("ncu")


_PROBLEMS = (
    ("ERR_NVGPUCTRPERM", "this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root, or "
                         "load the nvidia driver with NVreg_RestrictProfilingToAdminUsers=0 "
                         "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)"),
    ("No kernels were profiled", "ncu saw no kernel launch in the profiled calls"),
)


def ncu_problem(log: str) -> str | None:
    """The one line that explains why ncu measured nothing, from its output."""
    for marker, line in _PROBLEMS:
        if marker in log:
            return line
    errors = [ln.split("==ERROR==", 1)[1].strip() for ln in log.splitlines() if "==ERROR==" in ln]
    return f"ncu: {errors[0]}" if errors else None


def parse_ncu_csv(text: str) -> list[dict[str, str]]:
    """The kernels of ncu's ``--csv --page raw`` output, each as {column: value}; ncu's own ``==PROF==`` lines
    and the units row are skipped."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    table = list(csv.reader(lines))
    if len(table) < 2:
        return []
    head, rows = table[0], table[1:]
    if rows and not (rows[0] and rows[0][0].strip().isdigit()):
        rows = rows[1:]  # the units row
    return [dict(zip(head, r)) for r in rows if r]


def _number(text: str | None) -> float:
    try:
        return float((text or "").replace(",", ""))
    except ValueError:
        return float("nan")


_RANGE = re.compile(re.escape(RANGE_PREFIX) + r"([^:\"]+)")


def kernel_profiles(records: list[dict[str, str]]) -> list[KernelProfile]:
    """One KernelProfile per record, its row taken from the NVTX range it ran in."""
    out = []
    for rec in records:
        where = next((v for k, v in rec.items() if "Range" in k and RANGE_PREFIX in v), "")
        found = _RANGE.search(where)
        stalls = sorted(((m[1], _number(v)) for k, v in rec.items() if (m := _STALL.match(k)) and v),
                        key=lambda kv: -kv[1])
        out.append(KernelProfile(row=found[1] if found else "?", kernel=rec.get("Kernel Name", "?"),
                                 block=rec.get("Block Size", ""), grid=rec.get("Grid Size", ""),
                                 stalls=tuple(stalls),
                                 **{name: _number(rec.get(metric)) for metric, name in METRICS.items()}))
    return out


# ------------------------------------------------------------------ profile()


def _rows_to_profile(target: Any, inputs: tuple, rows: Sequence[str] | None) -> tuple[str, list[Any]]:
    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.registry.opdecl import get_decl
    from rapid_llm.kernels.platform import dtype_name

    if not isinstance(target, str):
        return target.name, [target]
    if target not in spec.all_ops():
        return target, [spec.get_row(target)]  # raises, naming the known rows, for neither an op nor a row
    if rows is not None:
        return target, [spec.get_row(r) for r in rows]
    decl = get_decl(target)
    if len(inputs) <= decl.dispatch_arg:
        raise TypeError(f"profile: op {target!r} takes its tensor as argument {decl.dispatch_arg}; "
                        f"got {len(inputs)} inputs")
    x = inputs[decl.dispatch_arg]
    dtype = dtype_name(x.dtype)
    return target, [r for r in spec.rows_for(target) if dtype in r.dtypes and "cuda" in r.devices and r.probe(x.device)]


#: The range of torch.compile's kernels when profile(..., against_compile=True): "torch.compile(<floor row>)".
COMPILE_RANGE = "torch.compile({})"


def profile(target: Any, *inputs: Any, rows: Sequence[str] | None = None, against_compile: bool = False,
            timeout: float = TIMEOUT_S, **kwargs: Any) -> Profile:
    """Profile one call of ``target`` (an op: each of its rows that takes these inputs, or ``rows``; a row name
    or KernelSpec: that row) on ``inputs`` under Nsight Compute, in a child process.

    ``against_compile``: also one call of ``torch.compile`` of the op's native floor on the same inputs (static
    shapes, compiled and warmed before the profiler starts), so the rows' counters sit beside the kernels
    Inductor generates for the same op: at few tokens, where a row and Inductor move the same bytes, the
    difference is in the launch shape, the instructions and the stalls."""
    import torch

    from rapid_llm.kernels.verification.isolate import recipe

    label, chosen = _rows_to_profile(target, inputs, rows)
    result = Profile(label)
    ncu = ncu_path()
    if ncu is None:
        result.problem = ("Nsight Compute (ncu) is not installed here: it ships with the CUDA toolkit "
                          "(or install the nsight-compute package) and must be on PATH")
        return result
    tensors = [a for a in (*inputs, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not tensors or any(t.device.type != "cuda" for t in tensors):
        result.problem = "profile needs CUDA tensors (Nsight Compute measures GPU kernels)"
        return result
    recipes = []
    for row in chosen:
        r = recipe(row)
        if r is None:
            result.notes.append(f"{row.name}: skipped (a child process cannot rebuild it: its function is defined "
                                "in this notebook; give it a \"module:attr\" target or a .cu source)")
        else:
            recipes.append(r)
    if not recipes:
        result.problem = "no row to profile here"
        return result
    compiled = None
    if against_compile:
        from rapid_llm.kernels.registry import spec

        floor = spec.native_row(target if isinstance(target, str) else chosen[0].op)
        compiled = recipe(floor) if floor is not None else None
        if compiled is None:
            result.notes.append(f"{label}: no native floor a child can rebuild, so nothing to compile")
    with tempfile.TemporaryDirectory(prefix="rapid_llm_profile_") as tmp:
        job_path, inputs_path, log_path = Path(tmp, "job.json"), Path(tmp, "inputs.pt"), Path(tmp, "ncu.csv")
        torch.save((inputs, kwargs), inputs_path)
        job_path.write_text(json.dumps({"recipes": recipes, "compile": compiled, "inputs": str(inputs_path)}))
        metrics = ",".join([*METRICS, r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"])
        cmd = [ncu, "--profile-from-start", "off", "--nvtx", "--csv", "--page", "raw", "--print-units", "base",
               "--metrics", metrics, "--log-file", str(log_path),
               sys.executable, "-m", "rapid_llm.kernels.inspection.profile_child", str(job_path)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=dict(os.environ, PYTHONUNBUFFERED="1"))
        except subprocess.TimeoutExpired:
            result.problem = f"ncu did not finish in {timeout:g} s (RAPID_LLM_PROFILE_TIMEOUT_S sets the limit)"
            return result
        log = log_path.read_text() if log_path.exists() else ""
    result.log = log
    child = _child_result(proc.stdout)
    kernels = kernel_profiles(parse_ncu_csv(log))
    result.kernels = [k for k in kernels if k.row != COPY_RANGE]
    result.copy = next((k for k in kernels if k.row == COPY_RANGE), None)
    result.bytes_moved = child.get("bytes") if child else None
    if not result.kernels:
        result.problem = (ncu_problem(log + proc.stdout + proc.stderr)
                          or f"ncu measured no kernel (exit status {proc.returncode}): "
                             + _last_line(proc.stderr + proc.stdout))
    if child:
        result.notes += child.get("notes", [])
    return result


def profile_one_call(fn: Any, range_name: str, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` once inside the profiled range (torch.cuda.profiler start/stop) and an NVTX range of that
    name: under ``ncu --profile-from-start off`` the report holds this call's kernels only. Warm ``fn`` first."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    with torch.cuda.nvtx.range(range_name):
        result = fn(*args, **kwargs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return result


def _child_result(stdout: str) -> dict[str, Any] | None:
    from rapid_llm.kernels.verification.worker import RESULT_MARK

    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    return None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
