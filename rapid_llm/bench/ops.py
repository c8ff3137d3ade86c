"""Benchmark every eligible row of an op and record the medians that dispatch ranks by."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from rapid_llm.bench.harness import DEFAULT_REPEATS, DEFAULT_WARMUP, BenchResult, bench, bench_host
from rapid_llm.bench.integrity import BenchRefused
from rapid_llm.kernels.toolchain.fastpath.binding import plain_launches
from rapid_llm.kernels.dispatch import measurements
from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch.dispatcher import explain
from rapid_llm.kernels.registry.opdecl import CaseArgs
from rapid_llm.kernels.registry.spec import RegistryError, get_decl, get_row, native_row, refuse, rows_for
from rapid_llm.kernels.verification.remembered import remember_refusal
from rapid_llm.kernels.toolchain.digests import code_digest

__all__ = ["OpMeasurement", "bench_op", "floor_call", "eligible_rows", "stored_figures", "make_args", "write_results"]


@dataclass(frozen=True)
class OpMeasurement:
    op: str
    row: str
    dtype: str
    numel: int
    result: BenchResult
    host_us: float | None = None  # per call back to back, as a caller pays it (bench_host)
    flag: str | None = None  # why the figure is not believed (and was not recorded), or None
    graph_us: float | None = None  # replayed from a CUDA graph: the device's time alone (measurements.Figure)
    form: str | None = None  # one of the op's other forms (OpDecl.forms), None for its declared one

    def __str__(self) -> str:
        return f"{self.op} {self.row} {self.dtype} numel={self.numel}: {self.result}"


def make_args(op: str, numel: int, dtype: torch.dtype, device: torch.device | str,
              form: str | None = None) -> CaseArgs:
    """The arguments of one timed call of ``op``: its declared bench case at ``numel`` elements, or that of one
    of its forms (OpDecl.forms)."""
    if numel < 1:
        raise ValueError(f"{op}: benchmark sizes must be >= 1 element, got {numel}")
    try:
        decl = get_decl(op)
    except RegistryError as exc:
        raise ValueError(f"bench_op: {exc}") from None
    if form is not None and form not in decl.forms:
        raise ValueError(f"bench_op({op!r}): no form {form!r}; its other forms are "
                         f"{', '.join(repr(f) for f in decl.forms) or 'none'}")
    make = decl.bench if form is None else decl.forms[form]
    return make(int(numel), dtype, torch.device(device))


def floor_call(op: str) -> Any:
    """The op's native floor row, as bench's ``reference``: what a timed call's result is checked against."""
    return native_row(op).call_path()


def eligible_rows(op: str, dtype: str, device: torch.device, numel: int) -> dict[str, str | None]:
    """Each row of ``op`` -> None when dispatch could pick it here, else the reason it cannot."""
    ex = explain(op, dtype=dtype, device=device, numel=numel)
    return {v.name: (v.reason if v.verdict == "filtered" else None) for v in ex.rows}


def bench_op(op: str, sizes: Iterable[int], dtypes: Sequence[str] | None = None,
             rows: Sequence[str] | None = None, *, record: bool = True, device: torch.device | str | None = None,
             graph: bool = False, warmup: int = DEFAULT_WARMUP, repeats: int = DEFAULT_REPEATS,
             form: str | None = None) -> list[OpMeasurement]:
    """Time each eligible row of ``op`` at each size and dtype; record medians into the results measurements.

    Eligible means dispatch could choose the row here (toolchain present,
    dtype and device supported, golden verified): timing a row that may not
    run would rank nothing. Naming ``rows`` restricts the set, and a named
    row that is filtered raises with the reason. Recorded figures make
    dispatch order the rows by measured latency on this device; ``form``
    times one of the op's other forms (OpDecl.forms), whose figures rank
    calls of that form. A row bench refuses raises BenchRefused, and its build
    is refused in the registry (spec.refuse): dispatch passes it over, and
    explain names the refusal, until a new build of it passes verify.
    """
    all_rows = rows_for(op)
    if not all_rows:
        raise ValueError(f"bench_op: unknown op {op!r}")
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtypes is None:
        dtypes = list(dict.fromkeys(d for r in all_rows for d in r.dtypes if d in ("bf16", "fp16", "fp32")))
    sizes = [int(n) for n in sizes]
    if not sizes:
        raise ValueError(f"bench_op({op!r}): give at least one size")
    if rows is not None:
        known = {r.name for r in all_rows}
        unknown = [r for r in rows if r not in known]
        if unknown:
            raise ValueError(f"bench_op({op!r}): no row {unknown[0]!r}; rows are {', '.join(sorted(known))}")
    name = platform.device_label(device)
    out: list[OpMeasurement] = []
    for dtype in dtypes:
        tdtype = platform.torch_dtype(dtype)
        for numel in sizes:
            verdicts = eligible_rows(op, dtype, device, numel)
            chosen = [r for r, why in verdicts.items() if why is None] if rows is None else list(rows)
            for row in chosen:
                if verdicts[row] is not None:
                    raise ValueError(f"bench_op({op!r}): row {row!r} cannot run {dtype} on {device}: {verdicts[row]}")
            case = make_args(op, numel, tdtype, device, form)
            for row in chosen:
                fn = get_row(row).call_path()
                try:
                    result = bench(fn, *case.args, bytes_moved=case.bytes_moved, flops=case.flops, graph=graph,
                                   warmup=warmup, repeats=repeats, label=row, reference=floor_call(op),
                                   **case.kwargs)
                except BenchRefused as exc:
                    if not get_row(row).is_native:  # the floor is the reference: nothing to fall back to
                        why = f"bench ({dtype}, numel={numel}): {exc.kind}: {exc.detail}"
                        refused = refuse(row, why)
                        digest = getattr(refused.target, "digest", None)  # a cell's build: kept across kernels
                        if digest:
                            remember_refusal(digest, refused.op, why)
                    raise
                host = _host_us(fn, case, result)
                replayed = None if graph else _graph_us(get_row(row), fn, case, result, device, warmup, repeats)
                flag = implausible(result, device)
                out.append(OpMeasurement(op, row, dtype, numel, result, host, flag, replayed, form))
                if flag is not None:
                    print(f"bench_op({op!r}): {row} {dtype} numel={numel} not recorded: {flag}")
                elif record:
                    _record(measurements.form_key(op, form), row, dtype, numel, result, host, replayed)
            del case
    if record and out and out[0].result.roofline_gbps:
        measurements.record_meta(name, copy_roofline_gbps=out[0].result.roofline_gbps, torch=torch.__version__,
                          measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return out


#: How far above the copy roofline a figure from a working set larger than L2 may sit: the roofline is itself
#: a measurement (a copy kernel, a few percent from the DRAM bound), nothing more.
ROOFLINE_MARGIN = 1.05


def implausible(r: BenchResult, device: torch.device) -> str | None:
    """Why a figure cannot be right, or None: faster than a copy of the same bytes means the timer missed work
    (another stream, a host thread) or the data stayed in L2 (a warm cache below L2's size; above it, a
    persisting-L2 access window, which keeps data resident through any flush)."""
    if r.roofline_fraction is None or r.roofline_fraction <= 1.0 or device.type != "cuda" or not r.bytes_moved:
        return None
    from rapid_llm.bench.harness import l2_bytes

    if r.bytes_moved >= l2_bytes(device):
        if r.roofline_fraction <= ROOFLINE_MARGIN:
            return None
        return (f"{100 * r.roofline_fraction:.0f}% of the copy roofline with {r.bytes_moved} bytes, more than L2: "
                "faster than DRAM allows; work escaped the timer, or a persisting-L2 window kept the data resident")
    return (f"{100 * r.roofline_fraction:.0f}% of the copy roofline with {r.bytes_moved} bytes, less than L2: "
            "work off the current stream escaped the timer, or the data stayed in L2")


def stored_figures(r: BenchResult) -> dict[str, Any]:
    """The figures kept in the results store beside a median (what plots and explain show)."""
    return dict(p20_us=r.p20_us, p80_us=r.p80_us, repeats=r.repeats, kind=r.kind, graph=r.graph,
                cold_l2=r.cold_l2, rotation_sets=r.rotation_sets, bytes_moved=r.bytes_moved, gbps=r.gbps,
                tflops=r.tflops, roofline_fraction=r.roofline_fraction)


#: Host time is measured where it can matter: calls short enough that the host may be the bottleneck.
HOST_TIMED_BELOW_US = 200.0


def _host_us(fn: Any, case: CaseArgs, r: BenchResult) -> float | None:
    if r.median_us >= HOST_TIMED_BELOW_US:
        return None
    return bench_host(fn, *case.args, n=200, rounds=5, warmup=20, **case.kwargs).median_us


def _graph_us(row: Any, fn: Any, case: CaseArgs, r: BenchResult, device: torch.device, warmup: int,
              repeats: int) -> float | None:
    """The call replayed from a CUDA graph, where a slow launch could hide in the events' figure (short calls
    of a graph-safe row on a GPU); its content was checked by the timed run before."""
    if r.median_us >= HOST_TIMED_BELOW_US or not row.graph_safe or device.type != "cuda":
        return None
    # The row's own time, as plain launches: back to back in one graph, a dependent launch (rl::launch_dependent)
    # would overlap the row's previous call, which a model's graph, with other kernels between, mostly does not
    # give it (benchmarks/models/bench_dependent_launch.py); the rows rank on what each costs alone.
    with plain_launches():
        return bench(fn, *case.args, bytes_moved=case.bytes_moved, graph=True, warmup=warmup, repeats=repeats,
                     label=f"{row.name} (graph)", integrity=False, **case.kwargs).median_us


def _code(row: str) -> dict[str, str]:
    """The figure's note of the code it measured (dispatch ranks a row only by figures of its code now); none for
    an arm that is not a row (a notebook's ``torch.compile(native)`` baseline)."""
    try:
        digest = code_digest(get_row(row))
    except RegistryError:
        return {}
    return {} if digest is None else {measurements.DIGEST_FIELD: digest}


def _record(op: str, row: str, dtype: str, numel: int, r: BenchResult, host_us: float | None = None,
            graph_us: float | None = None) -> None:
    extra = {k: v for k, v in (("host_us", host_us), ("graph_us", graph_us)) if v is not None} | _code(row)
    measurements.record(op, row, r.device, dtype, numel, r.median_us, **stored_figures(r), **extra)


def write_results(op: str, results: Sequence[OpMeasurement], device: torch.device | str,
                  out: str | Path | None = None) -> Path:
    """Write ``results`` as a figures file, each figure with the digest of the code it measured; by default into
    the op's folder (``ops/<group>/<op>/figures/<gpu kind>.json``), where, committed, it ranks rows on every
    machine of this GPU kind until the row's code changes."""
    from rapid_llm.bench.harness import copy_roofline, l2_bytes

    device = torch.device(device)
    meta: dict[str, Any] = {"copy_roofline_gbps": copy_roofline(device), "torch": torch.__version__,
                            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if device.type == "cuda":
        meta.update(cuda=torch.version.cuda, l2_bytes=l2_bytes(device))
    doc: dict[str, Any] = {"device": platform.device_label(device), "entries": {}, "meta": meta}
    for m in results:
        extra = {k: v for k, v in (("host_us", m.host_us), ("graph_us", m.graph_us)) if v is not None} | _code(m.row)
        key, entry = measurements.make_entry(measurements.form_key(op, m.form), m.row, m.dtype, m.numel,
                                             m.result.median_us,
                                             **stored_figures(m.result), **extra)
        doc["entries"][key] = entry
    out = Path(out) if out is not None else measurements.figures_path(op, doc["device"])
    platform.write_atomic(out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return out
