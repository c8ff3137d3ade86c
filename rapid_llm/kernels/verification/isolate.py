"""A row's first runs, and its sanitizer runs, in a child process with a time limit.

In-process, one illegal address or failed device ``assert`` in a freshly built
kernel leaves the CUDA context unusable (every later CUDA call fails, and the
notebook must restart and lose its state), and an endless loop hangs it. So
``verify`` first runs a JIT row's checks in a child Python: a crash or a hang
there marks the row broken with the device's message and leaves this process
and its tensors intact. ``verify(row, sanitize=True)`` runs the same child under
compute-sanitizer (memcheck, racecheck, initcheck, synccheck) with torch's
caching allocator off, so out-of-bounds writes inside a cached block are seen.

A row can run in a child when the child can rebuild it: a JIT row (its source,
launcher and out rule), or any row whose target is an importable
``"module:attr"`` string. An op the library does not declare as it is live here
(a notebook's) reaches the child as a module written by
:mod:`rapid_llm.kernels.registry.opsource`. A child that cannot set the row up (that
module, the build) says so, and the parent reports it as not run, not as a crash.

The child is ``python -m rapid_llm.kernels.verification.isolate_child '<recipe json>'``; it prints one JSON line last.
"""
from __future__ import annotations

import base64
import json
import os
import pickle
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rapid_llm.kernels.toolchain import cell_lines
from rapid_llm.kernels.verification import worker
from rapid_llm.kernels.verification.worker import RESULT_MARK
from rapid_llm.kernels.platform import cuda_tool

__all__ = ["ChildResult", "SanitizerFinding", "recipe", "run_child", "sanitize", "SANITIZER_TOOLS", "TIMEOUT_S",
           "sanitizer_path"]

#: Seconds a child may take: torch's import and CUDA start-up take a few, a cached build a fraction of one.
TIMEOUT_S = float(os.environ.get("RAPID_LLM_CHILD_TIMEOUT_S", "120"))
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
#: "0" runs each first run in a fresh child instead of the warm worker.
WARM = os.environ.get("RAPID_LLM_WARM_WORKER", "1") != "0"


@dataclass(frozen=True)
class SanitizerFinding:
    """One compute-sanitizer report: its first line and where (file:line, and the cell line for a cell)."""

    tool: str
    what: str
    where: str

    def __str__(self) -> str:
        return f"{self.tool}: {self.what}" + (f" at {self.where}" if self.where else "")


@dataclass(frozen=True)
class ChildResult:
    """What a child run of a row's checks came to."""

    status: str  # "passed" | "failed" | "crashed" | "hung" | "unavailable" | "not_set_up"
    message: str
    report: str = ""
    findings: tuple[SanitizerFinding, ...] = field(default=())
    golden: dict[str, Any] | None = None
    #: Where the time went: "start" (a fresh child's whole run, or waiting for the warm worker), "rebuild"
    #: (setting the row up in the child), "checks"; seconds.
    times: dict[str, float] = field(default_factory=dict)
    #: The child's GoldenReport (rapid_llm.kernels.verification.report), when it sent one: its checks are this
    #: process's checks, run on the same build, so a passing one is adopted instead of run again here.
    verified: Any = None

    def times_text(self) -> str:
        """'worker warm, rebuild 0.02 s, checks 0.31 s' (what verify's notes show)."""
        parts = []
        if "start" in self.times:
            start = self.times["start"]
            parts.append("worker warm" if start < 0.05 else f"waited {start:.2f} s for the worker to start")
        parts += [f"{k} {self.times[k]:.2f} s" for k in ("rebuild", "checks") if k in self.times]
        return ", ".join(parts)

    @property
    def broken(self) -> bool:
        """The row took its process down, or never finished."""
        return self.status in ("crashed", "hung")


def recipe(row: Any) -> dict[str, Any] | None:
    """How a child rebuilds ``row`` (a KernelSpec), or None when it cannot (a function defined in a notebook).

    Raises opsource.ExportError when the row could be rebuilt but its op's declaration cannot be written out.
    """
    from rapid_llm.kernels.toolchain.jit_row import JitRow

    target = row.target
    if isinstance(target, JitRow):
        job = {"kind": "jit", "name": row.name, "op": row.op, "source": str(target.source),
               "build_from": str(target.built_from or target.source), "fn": target.fn,
               "flags": list(target.base_flags), "config": target.config or {},
               "out": target.out, "dtypes": list(row.dtypes), "layouts": list(row.layouts),
               "baseline": row.golden.baseline}
    elif isinstance(target, str) and (row.available is None or isinstance(row.available, str)):
        job = {"kind": "ref", "name": row.name, "op": row.op, "backend": row.backend, "target": target,
               "available": row.available, "dtypes": list(row.dtypes), "devices": list(row.devices),
               "layouts": list(row.layouts), "baseline": row.golden.baseline}
    else:
        return None
    declaration = declaration_file(row.op)
    if declaration is not None:
        job["declaration"] = str(declaration)
    return job


def declaration_file(op: str) -> Path | None:
    """A module declaring ``op`` as it is live here, for a child to import; None for the library's own ops."""
    from rapid_llm.kernels import platform
    from rapid_llm.kernels.toolchain.jit_row import source_digest
    from rapid_llm.kernels.registry import opsource
    from rapid_llm.kernels.toolchain.cache_safety import remove_obstacle, trusted

    if not opsource.needs_export(op):
        return None
    text = opsource.module_source(op, ship=False, local_imports=True)  # the child starts in our cwd
    digest = source_digest(text)[:16]  # the one digest of a source
    path = platform.cache_dir("declarations") / f"{op}_{digest}.py"
    if not trusted(path) or path.read_text() != text:  # the child imports it: only ever our own bytes
        remove_obstacle(path)
        platform.write_atomic(path, text)
    return path


def sanitizer_path() -> str | None:
    return cuda_tool("compute-sanitizer")


def sanitizer_wrapper(sanitizer: str, tool: str) -> worker.Wrapper:
    """The command a child runs under for ``tool``, and the environment it needs: torch's caching allocator
    off (a write past a tensor inside a cached block is seen) and no guard bands (nothing absorbs it)."""
    command = (sanitizer, "--tool", tool, "--print-limit", "20", "--show-backtrace", "no") + \
        (("--racecheck-report", "all") if tool == "racecheck" else ())
    return command, (("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"), ("RAPID_LLM_GUARD_BANDS", "0"))


def warm_sanitizers() -> tuple[str, ...]:
    """The compute-sanitizer tools whose worker starts with the plain one: ``RAPID_LLM_WARM_SANITIZERS``
    (comma-separated; empty for none), memcheck by default, the tool a kernel author reaches for first."""
    return tuple(t.strip() for t in os.environ.get("RAPID_LLM_WARM_SANITIZERS", "memcheck").split(",") if t.strip())


def prewarm() -> None:
    """Start the warm workers in the background (a cell's row was built and is about to be verified): the
    plain one, those this process has used, and the sanitizer tools of :func:`warm_sanitizers` where
    compute-sanitizer is installed. Each holds a CUDA context (a few hundred MB) while it lives."""
    sanitizer = sanitizer_path()
    also = tuple(sanitizer_wrapper(sanitizer, tool) for tool in warm_sanitizers()) if sanitizer else ()
    worker.prewarm(also)


def run_child(recipe: dict[str, Any], *, dtypes: Sequence[str] | None = None, sizes: Sequence[int] | None = None,
              tool: str | None = None, timeout: float = TIMEOUT_S) -> ChildResult:
    """Run ``verify`` of the recipe's row in a child Python (under compute-sanitizer ``tool`` if given)."""
    job = dict(recipe, dtypes_to_check=list(dtypes) if dtypes else None, sizes=list(sizes) if sizes else None,
               lineinfo=tool is not None)
    wrapper = worker.PLAIN
    if tool is not None:
        sanitizer = sanitizer_path()
        if sanitizer is None:
            return ChildResult("unavailable", "compute-sanitizer is not installed here (it ships with the CUDA "
                                              "toolkit, beside nvcc): the sanitizer checks did not run")
        wrapper = sanitizer_wrapper(sanitizer, tool)
    if WARM:
        return _from_worker(recipe, job, timeout, wrapper, tool)
    command, extra_env = wrapper
    cmd = [*command, sys.executable, "-m", "rapid_llm.kernels.verification.isolate_child", json.dumps(job)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **dict(extra_env))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        tail = _tail((exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""))
        return ChildResult("hung", f"{recipe['name']} did not finish in {timeout:g} s in a child process (an endless "
                                   "loop, or a kernel waiting forever); the child was killed" + tail)
    findings = tuple(parse_sanitizer(proc.stdout + proc.stderr, tool, Path(recipe.get("source", "")))) if tool else ()
    result = _result_line(proc.stdout)
    if result is None:
        return ChildResult("crashed", f"{recipe['name']} crashed its process (exit status {proc.returncode}): "
                                      f"{_device_message(proc.stderr + proc.stdout)}", findings=findings)
    return _judge(recipe["name"], result, findings)


def _judge(name: str, result: dict[str, Any], findings: tuple[SanitizerFinding, ...] = (),
           times: dict[str, float] | None = None) -> ChildResult:
    """A child's result line as a ChildResult."""
    times = dict(times or {})
    times.update({k: result[f"{k}_s"] for k in ("setup", "checks") if f"{k}_s" in result})
    if "setup" in times:
        times["rebuild"] = times.pop("setup")
    if result.get("setup_error"):
        return ChildResult("not_set_up", f"the child process could not set up {name}: {result['setup_error']}",
                           findings=findings, times=times)
    if result.get("device_error"):  # the checks caught it, but the child's CUDA context is gone: in ours it would be
        return ChildResult("crashed", f"{name} left its process's CUDA context unusable: {result['device_error']}",
                           result.get("report", ""), findings, times=times)
    status = "passed" if result["passed"] and not findings else "failed"
    verified = None
    if result.get("report_pickle"):
        verified = pickle.loads(base64.b64decode(result["report_pickle"]))  # our own child's answer
    return ChildResult(status, result.get("summary", ""), result.get("report", ""), findings, result.get("golden"),
                       times, verified)


def _from_worker(recipe: dict[str, Any], job: dict[str, Any], timeout: float, wrapper: worker.Wrapper,
                 tool: str | None) -> ChildResult:
    """The job run by a warm worker (rapid_llm.kernels.verification.worker), judged as a fresh child's would be;
    under ``tool``, the worker runs under compute-sanitizer and its reports during the job are the findings."""
    name = recipe["name"]
    answer = worker.ask(job, timeout, wrapper)
    times = {"start": answer.wait_s}
    findings = tuple(parse_sanitizer(answer.output, tool, Path(recipe.get("source", "")))) if tool else ()
    if findings and answer.status == "answered":
        worker.replace(wrapper)  # its print limit and its state are spent on this row
    if answer.status == "hung":
        return ChildResult("hung", f"{name} did not finish in {timeout:g} s in a child process (an endless loop, or "
                                   "a kernel waiting forever); the child was killed" + _tail(answer.output), times=times)
    if answer.status == "crashed":
        return ChildResult("crashed", f"{name} crashed its process: {_device_message(answer.output)}", times=times,
                           findings=findings)
    if answer.status == "no_start" or answer.result is None:
        return ChildResult("not_set_up", f"the child process could not start: {_tail(answer.output).lstrip('; ')}",
                           times=times)
    return _judge(name, answer.result, findings, times=times)


def sanitize(recipe: dict[str, Any], tools: Sequence[str] = SANITIZER_TOOLS, *, dtypes: Sequence[str] | None = None,
             sizes: Sequence[int] = (1, 4097), timeout: float = 600) -> dict[str, ChildResult]:
    """Each tool's child run; a machine without compute-sanitizer answers once, for every tool."""
    unknown = [t for t in tools if t not in SANITIZER_TOOLS]
    if unknown:
        raise ValueError(f"unknown compute-sanitizer tool {unknown[0]!r}; the tools are {', '.join(SANITIZER_TOOLS)}")
    if sanitizer_path() is None:
        r = run_child(recipe, tool="memcheck")
        return {tool: r for tool in tools}
    return {tool: run_child(recipe, dtypes=dtypes, sizes=sizes, tool=tool, timeout=timeout) for tool in tools}


# ------------------------------------------------------------------ reading what the child said


def _tail(text: str, n: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return ("; last output: " + " | ".join(lines[-n:])) if lines else ""


def _result_line(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            try:
                return json.loads(line[len(RESULT_MARK):])
            except ValueError:
                return None
    return None


_DEVICE_ERROR = re.compile(r"(CUDA error: [^\n]*|device-side assert[^\n]*|Assertion `[^\n]*|illegal [^\n]*|"
                           r"RuntimeError: [^\n]*|Error: [^\n]*)")


def _device_message(text: str) -> str:
    """The device's own words from a crashed child's output: the first CUDA error line, else the last line."""
    hits = _DEVICE_ERROR.findall(text)
    if hits:
        return hits[0].strip()
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output (killed by a signal?)"


_REPORT_START = re.compile(r"^========= (?!ERROR SUMMARY|[A-Z]+ SUMMARY|COMPUTE-SANITIZER|Program hit|Target application|"
                           r"Error: process didn't terminate)(\S.*)$")
_AT_SHORT = re.compile(r"([\w./-]+\.(?:cu|cuh)):(\d+)")
_ADDRESS = re.compile(r"0x[0-9a-f]+")


def parse_sanitizer(text: str, tool: str | None, source: Path | None = None) -> list[SanitizerFinding]:
    """The reports in compute-sanitizer's output: each one's first line and its source location, with a
    cell's file line turned into the cell line the user sees (files saved by %%cuda_jit). Reports that
    differ only in an address (racecheck gives one per shared-memory byte) are counted as one."""
    found: list[SanitizerFinding] = []
    for line in text.splitlines():
        start = _REPORT_START.match(line)
        if start:
            at = _AT_SHORT.search(line)
            what = _AT_SHORT.sub("", start[1]).strip() if at else start[1].strip()
            where = cell_lines.where(Path(at[1]), int(at[2]), source) if at else ""
            found.append(SanitizerFinding(tool or "", what, where))
        elif found and not found[-1].where and line.startswith("========="):
            at = _AT_SHORT.search(line)
            if at:
                at_cell = cell_lines.where(Path(at[1]), int(at[2]), source)
                found[-1] = SanitizerFinding(found[-1].tool, found[-1].what, at_cell)
    counts: dict[tuple[str, str], list[SanitizerFinding]] = {}
    for f in found:
        counts.setdefault((_ADDRESS.sub("0x...", f.what), f.where), []).append(f)
    return [SanitizerFinding(fs[0].tool, what if len(fs) == 1 else f"{what} ({len(fs)} reports)", where)
            for (what, where), fs in counts.items()]
