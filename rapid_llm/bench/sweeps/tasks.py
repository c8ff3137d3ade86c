"""A sweep's unit of work, planned where the sweep starts and run in a worker.

A :class:`Task` is one (op, form, size, dtype): every row of it is timed in the one
worker that takes it, one after the other on one device, so a comparison of two rows
never spans two devices. Rows the package ships need nothing but their names; a row
made in this process (a ``%%cuda_jit`` cell, a row pointing at a module of the user's)
travels as a :class:`ShippedRow`: a cell's source text and flags, compiled on the
worker (``build_jit(..., text=...)``), or the row's import reference; either is
verified there before it is timed, since only a verified row may rank.

This module imports torch only inside the functions a worker runs.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import platform as _host
import re
import subprocess
import traceback
from pathlib import Path
from typing import Any, Sequence

from rapid_llm.bench.sweeps.records import OK, Environment, Record

__all__ = ["Task", "ShippedRow", "plan", "run_task", "environment", "commit_id", "driver_version",
           "DEFAULT_TOKENS"]

#: Token counts a sweep times by default: decode (1, 16) to long prefill (16384).
DEFAULT_TOKENS = (1, 16, 128, 1024, 4096, 16384)


@dataclasses.dataclass(frozen=True)
class ShippedRow:
    """A row the worker's registry does not have: a cell's source (``kind="jit"``) or an import reference."""

    name: str
    op: str
    kind: str  # "jit" or "ref"
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    graph_safe: bool = True
    # jit: the launcher, its out rule, the build flags, and the files (relative path, text), the source first
    fn: str = ""
    out: str = "like_input"
    flags: tuple[str, ...] = ("-O3",)
    files: tuple[tuple[str, str], ...] = ()
    # ref: "package.module:attr" of the row and its probe, its backend and devices
    target: str = ""
    available: str | None = None
    backend: str = ""
    devices: tuple[str, ...] = ("cuda",)
    digest: str | None = None  # the code's digest where the sweep started (the worker computes its own)


@dataclasses.dataclass(frozen=True)
class Task:
    """One (op, form, size, dtype); ``rows`` None: every row dispatch could pick on the worker's device."""

    op: str
    numel: int
    dtype: str
    form: str | None = None
    rows: tuple[str, ...] | None = None
    ship: tuple[ShippedRow, ...] = ()
    declaration: str | None = None  # the module text declaring an op this process declared (opsource)
    warmup: int = 5
    repeats: int = 50
    index: int = 0

    def __str__(self) -> str:
        form = f"[{self.form}]" if self.form else ""
        return f"{self.op}{form} {self.dtype} numel={self.numel}"


# ------------------------------------------------------------------ the sweep's side


def shippable(row: Any) -> ShippedRow | str:
    """How a worker gets ``row`` (a KernelSpec this process registered), or why it cannot."""
    from rapid_llm.kernels import platform
    from rapid_llm.kernels.toolchain.cache import local_sources
    from rapid_llm.kernels.toolchain.digests import code_digest
    from rapid_llm.kernels.toolchain.jit_row import JitRow

    common = dict(name=row.name, op=row.op, dtypes=tuple(row.dtypes), layouts=tuple(row.layouts),
                  graph_safe=row.graph_safe, digest=code_digest(row))
    target = row.target
    if isinstance(target, JitRow):
        source = target.built_from if target.built_from is not None and target.built_from.is_file() else target.source
        if not source.is_file():
            return f"its source {source} is gone"
        shared = platform.CUDA_INCLUDE.resolve()
        files = []
        for path in local_sources(source):
            if path.is_relative_to(shared):
                continue  # the project's headers: the worker's package has them
            if not path.is_relative_to(source.resolve().parent):
                return f"it includes {path}, outside its folder"
            files.append((path.relative_to(source.resolve().parent).as_posix(), path.read_text()))
        return ShippedRow(kind="jit", fn=target.fn, out=target.out, flags=tuple(target.flags), files=tuple(files),
                          **common)
    if isinstance(target, str) and (row.available is None or isinstance(row.available, str)):
        return ShippedRow(kind="ref", target=target, available=row.available, backend=row.backend,
                          devices=tuple(row.devices), **common)
    return "it is an object of this process (a function defined here), not source a worker can load"


def plan(op: str, numels: Sequence[int], dtypes: Sequence[str], *, forms: Sequence[str | None] = (None,),
         rows: Sequence[str] | None = None, warmup: int = 5, repeats: int = 50) -> tuple[list[Task], list[str]]:
    """The tasks of one op, and a line for each row that cannot travel to a worker."""
    from rapid_llm.kernels.registry import spec

    all_rows = spec.rows_for(op)
    if not all_rows:
        raise ValueError(f"sweep: unknown op {op!r}")
    known = {r.name for r in all_rows}
    unknown = [r for r in rows or () if r not in known]
    if unknown:
        raise ValueError(f"sweep({op!r}): no row {unknown[0]!r}; rows are {', '.join(sorted(known))}")
    shipped = set(spec.shipped_rows(op))
    ship, notes = [], []
    for row in all_rows:
        if row.name in shipped or (rows is not None and row.name not in rows):
            continue
        how = shippable(row)
        if isinstance(how, str):
            notes.append(f"{row.name}: not swept: {how}")
        else:
            ship.append(how)
    declaration = None
    from rapid_llm.kernels.registry import opsource

    if opsource.needs_export(op):
        declaration = opsource.module_source(op, ship=False, local_imports=True)
    chosen = None if rows is None else tuple(rows)
    tasks = [Task(op, int(n), d, form, chosen, tuple(ship), declaration, warmup, repeats)
             for form in forms for d in dtypes for n in numels]
    return tasks, notes


# ------------------------------------------------------------------ the worker's side


@functools.cache
def commit_id() -> str:
    """The git commit of the package's checkout (``+dirty`` when its files differ from it), else its version.
    ``RAPID_LLM_COMMIT`` names it outright, for a tree copied to a machine without its history (a stale or missing
    ``.git`` there would name another commit)."""
    from rapid_llm.kernels import platform

    given = os.environ.get("RAPID_LLM_COMMIT", "").strip()
    if given:
        return given

    root = platform.PACKAGE_DIR.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", head.stdout.strip()):
            dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--", "rapid_llm"],
                                   capture_output=True, timeout=10).returncode != 0
            return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"rapid_llm {version('rapid_llm')}"
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def driver_version() -> str | None:
    """The NVIDIA kernel driver's version (the kernel module's, else nvidia-smi's), or None without one."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
        if found:
            return found.group(1)
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def worker_device() -> Any:
    """The device a worker times on: its one visible GPU (the pool pins it), else the CPU."""
    import torch

    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


@functools.cache
def environment(accelerator: str | None = None) -> Environment:
    """This worker's machine: GPU kind as dispatch names it, driver, CUDA, torch, commit, copy roofline."""
    import torch

    from rapid_llm.bench.harness import copy_roofline, l2_bytes
    from rapid_llm.kernels import platform

    device = worker_device()
    cuda = device.type == "cuda"
    return Environment(gpu_kind=platform.device_label(device), driver=driver_version() if cuda else None,
                       cuda=torch.version.cuda if cuda else None, torch=torch.__version__, commit=commit_id(),
                       accelerator=accelerator, copy_roofline_gbps=copy_roofline(device),
                       l2_bytes=l2_bytes(device) if cuda else None, host=_host.node())


#: name -> (what was registered, its verdict: None when it may be timed, else why not); per worker process
_registered: dict[str, tuple[ShippedRow, str | None]] = {}
_declared: set[str] = set()


def _declare(op: str, text: str) -> None:
    from rapid_llm.kernels import platform
    from rapid_llm.kernels.verification.isolate_child import load_declaration

    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest in _declared:
        return
    path = platform.cache_dir("sweep") / "declarations" / f"{op}_{digest[:16]}.py"
    platform.write_atomic(path, text)
    load_declaration(op, str(path))
    _declared.add(digest)


def _register(row: ShippedRow, device: Any) -> str | None:
    """Register ``row`` here (a cell: written out and compiled) and verify it; None, or why it is not timed."""
    if row.name in _registered and _registered[row.name][0] == row:
        return _registered[row.name][1]
    from rapid_llm.kernels import platform
    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
    from rapid_llm.kernels.verification.golden import verify

    native = spec.native_row(row.op)
    golden = GoldenRecord(verified=False, baseline=native.name if native is not None else None)
    if row.kind == "jit":
        from rapid_llm.kernels.toolchain import jit
        from rapid_llm.kernels.toolchain.jit_row import JitRow

        probe = jit.available(device)
        if not probe:
            why = f"not built here: {probe.reason}"
            _registered[row.name] = (row, why)
            return why
        folder = platform.cache_dir("sweep") / "cells" / hashlib.sha256(repr(row.files).encode()).hexdigest()[:16]
        for rel, text in row.files:
            platform.write_atomic(folder / rel, text)
        source = folder / row.files[0][0]
        module_name = re.sub(r"\W", "_", row.name.split("/", 1)[1])
        built = jit.build_jit(module_name, source, extra_cuda_cflags=row.flags, text=row.files[0][1])
        target: Any = JitRow(source, row.fn, launcher=getattr(built.module, row.fn), out=row.out, flags=row.flags,
                             built_from=built.compiled_source)
        spec.register(KernelSpec(name=row.name, op=row.op, backend="jit", target=target,
                                 available="rapid_llm.kernels.toolchain.jit:available", dtypes=row.dtypes,
                                 devices=("cuda",), golden=golden, graph_safe=row.graph_safe, layouts=row.layouts),
                      replace=True)
    else:
        spec.register(KernelSpec(name=row.name, op=row.op, backend=row.backend, target=row.target,
                                 available=row.available, dtypes=row.dtypes, devices=row.devices, golden=golden,
                                 graph_safe=row.graph_safe, layouts=row.layouts), replace=True)
    why = None
    if device.type in row.devices:
        report = verify(row.name, device=device, isolate=False)
        if not report.passed:
            why = f"failed verify here: {'; '.join(report.defect_lines()[:2]) or 'see verify()'}"
    _registered[row.name] = (row, why)
    return why


def _tail(text: str, n: int = 1500) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def run_task(task: Task, accelerator: str | None = None, worker: str = "") -> list[Record]:
    """Time every row of ``task`` on this worker's device; one record per row, figure or failure."""
    from rapid_llm.bench.integrity import BenchRefused
    from rapid_llm.bench.ops import bench_op, eligible_rows, stored_figures
    from rapid_llm.kernels.toolchain.digests import code_digest
    from rapid_llm.kernels.registry import spec

    env = environment(accelerator)
    device = worker_device()
    base = dict(op=task.op, form=task.form, dtype=task.dtype, numel=task.numel, env=env, worker=worker)
    if task.declaration:
        _declare(task.op, task.declaration)
    out: list[Record] = []
    held: dict[str, str] = {}
    for row in task.ship:
        try:
            why = _register(row, device)
        except Exception as exc:  # a build that fails says so, with the compiler's words; the rest is timed
            _registered[row.name] = (row, f"{type(exc).__name__}: {_tail(str(exc), 600)}")
            why = _registered[row.name][1]
        if why is not None:
            held[row.name] = why
    verdicts = eligible_rows(task.op, task.dtype, device, task.numel)
    chosen = list(verdicts) if task.rows is None else list(task.rows)
    for name in chosen:
        why = held.get(name) or verdicts.get(name, "not registered on this worker")
        if why is not None:
            if task.rows is not None or name in held:  # asked for, or shipped: say why it has no figure
                out.append(Record(row=name, status="skipped", detail=why, **base))
            continue
        digest = code_digest(spec.get_row(name))
        try:
            (m,) = bench_op(task.op, [task.numel], [task.dtype], rows=[name], record=False, device=device,
                            warmup=task.warmup, repeats=task.repeats, form=task.form)
        except BenchRefused as exc:
            out.append(Record(row=name, status="refused", source_digest=digest, detail=f"{exc.kind}: {exc.detail}",
                              **base))
            continue
        except Exception as exc:  # noqa: BLE001 - one row's failure is its record; the task's other rows go on
            out.append(Record(row=name, status="error", source_digest=digest,
                              detail=_tail(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"), **base))
            continue
        figures = stored_figures(m.result) | {k: v for k, v in (("host_us", m.host_us), ("graph_us", m.graph_us))
                                               if v is not None}
        out.append(Record(row=name, status=OK if m.flag is None else "flagged", median_us=m.result.median_us,
                          source_digest=digest, figures=figures, detail=m.flag or "", **base))
    return out


def worker_env(cpu: bool) -> dict[str, str]:
    """Environment variables a worker needs: on a CPU, Triton's interpreter, serving calls (the CPU-runnable
    Triton rows are timed there too; their figures rank nothing on a GPU kind)."""
    if not cpu:
        return {}
    return {"TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1"),
            "RAPID_LLM_SERVE_INTERPRETER": os.environ.get("RAPID_LLM_SERVE_INTERPRETER", "1")}
