"""``sweep``: rows x sizes x dtypes x GPU kinds, on an executor, into the figures files dispatch reads."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Protocol, Sequence

from rapid_llm.bench.sweeps.records import Record, SweepResult
from rapid_llm.bench.sweeps.tasks import DEFAULT_TOKENS, Task, plan

__all__ = ["sweep", "Executor", "make_executor", "sizes_for"]


class Executor(Protocol):
    """Runs tasks and returns their records; each task's rows are timed in one worker, on one device."""

    name: str
    workers: int

    def run(self, tasks: Sequence[Task], on_records: Callable[[list[Record]], None] | None = None) -> list[Record]: ...


def make_executor(executor: str | Executor) -> Executor:
    """``"local"`` (one worker per visible GPU), ``"ray"`` (Ray actors; the optional extra), or an Executor."""
    if not isinstance(executor, str):
        return executor
    if executor == "local":
        from rapid_llm.bench.sweeps.local import LocalPool

        return LocalPool()
    if executor == "ray":
        from rapid_llm.bench.sweeps.ray_executor import RayExecutor

        return RayExecutor()
    raise ValueError(f"sweep: unknown executor {executor!r}; 'local', 'ray' or an Executor object")


def sizes_for(op: str, tokens: Sequence[int] | None, numels: Sequence[int] | None) -> list[int]:
    """The element counts of ``op`` to time: ``numels`` as given, else ``tokens`` x the op's ``token_numel``."""
    from rapid_llm.kernels.registry import spec

    if numels is not None:
        sizes = [int(n) for n in numels]
    else:
        per_token = spec.get_decl(op).token_numel
        if per_token is None:
            raise ValueError(f"sweep({op!r}): the op declares no token_numel, so token counts mean nothing to it; "
                             "give numels= (element counts) instead")
        sizes = [int(t) * per_token for t in tokens or ()]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"sweep({op!r}): sizes must be >= 1 element, got {sizes}")
    return sizes


def _ops(ops: str | Sequence[str] | None) -> list[str]:
    from rapid_llm.kernels.registry import spec

    if ops is None:
        return [op for op in spec.all_ops() if spec.get_decl(op).token_numel is not None]
    ops = [ops] if isinstance(ops, str) else list(ops)
    unknown = [op for op in ops if op not in spec.all_ops()]
    if unknown:
        raise ValueError(f"sweep: unknown op {unknown[0]!r}; ops are {', '.join(spec.all_ops())}")
    return ops


def _rows_of(op: str, rows: Sequence[str] | None) -> list[str] | None:
    from rapid_llm.kernels.registry import spec

    if rows is None:
        return None
    mine = {r.name for r in spec.rows_for(op)}
    return [r for r in rows if r in mine]


def sweep(ops: str | Sequence[str] | None = None, rows: Sequence[str] | None = None,
          tokens: Sequence[int] | None = DEFAULT_TOKENS, dtypes: Sequence[str] = ("bf16",), *,
          numels: Sequence[int] | None = None, forms: bool | Sequence[str | None] = True,
          executor: str | Executor = "local", warmup: int = 5, repeats: int = 50,
          on_records: Callable[[list[Record]], None] | None = None) -> SweepResult:
    """Time ``rows`` (default: every row dispatch could pick on each worker) of ``ops`` (default: every op that
    declares ``token_numel``) at each size and dtype, on every GPU kind the executor reaches.

    One task per (op, form, size, dtype), all its rows timed one after another in one worker on one device,
    so two rows are never compared across devices. ``forms``: True also times the op's other forms
    (OpDecl.forms), whose figures rank calls of that form. Nothing is written: ``result.merge()`` puts the
    figures into ``ops/<group>/<op>/figures/<gpu kind>.json`` (``merge(root)`` into a folder of that shape).
    """
    from rapid_llm.kernels.registry import spec

    chosen = _ops(ops)
    if rows is not None:
        every = {r.name for op in chosen for r in spec.rows_for(op)}
        stray = [r for r in rows if r not in every]
        if stray:
            raise ValueError(f"sweep: row {stray[0]!r} serves none of {', '.join(chosen)}")
    tasks: list[Task] = []
    notes: list[str] = []
    for op in chosen:
        mine = _rows_of(op, rows)
        if mine == []:
            continue
        decl = spec.get_decl(op)
        op_forms: list[str | None] = [None]
        if forms is True:
            op_forms += list(decl.forms)
        elif forms is not False:
            op_forms = list(forms)
        planned, said = plan(op, sizes_for(op, tokens, numels), dtypes, forms=op_forms, rows=mine, warmup=warmup,
                             repeats=repeats)
        tasks += planned
        notes += said
    tasks = [Task(**{**t.__dict__, "index": i}) for i, t in enumerate(tasks)]
    runner = make_executor(executor)
    start = time.perf_counter()
    records = runner.run(tasks, on_records)
    records.sort(key=lambda r: (r.env.gpu_kind, r.op, r.form or "", r.dtype, r.numel, r.row))
    result = SweepResult(records, time.perf_counter() - start, runner.name, runner.workers, notes, len(tasks))
    _remember_refusals(result.records)
    return result


def _remember_refusals(records: Sequence[Record]) -> None:
    """A row a worker's bench refused is refused here too (spec.refuse) when this process runs the same code."""
    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.toolchain.digests import code_digest

    for r in records:
        if r.status != "refused" or r.source_digest is None:
            continue
        try:
            row = spec.get_row(r.row)
        except spec.RegistryError:
            continue
        if not row.is_native and code_digest(row) == r.source_digest and not row.golden.refused:
            spec.refuse(r.row, f"bench on {r.env.gpu_kind} ({r.dtype}, numel={r.numel}): {r.detail}")


def merge(result: SweepResult, root: str | Path | None = None, *, replace: bool = False) -> list[Path]:
    """:meth:`SweepResult.merge`, as a function."""
    return result.merge(root, replace=replace)
