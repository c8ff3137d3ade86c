"""What a sweep measured, where, and how it lands in the figures files dispatch reads.

A :class:`Record` is one row timed at one (op, form, dtype, size) on one device, keyed by
the machine it ran on (:class:`Environment`: GPU kind, driver, CUDA, torch, commit) and
the digest of the code it measured. Only records whose status is ``ok`` become figures;
the others (flagged, refused, skipped, crashed, error) say why in ``detail`` and are
kept in the result so a sweep never drops a failure silently.

:func:`merge_records` writes them into ``ops/<group>/<op>/figures/<gpu kind>.json``, one
file per op per GPU kind, by dispatch's key (op|row|dtype|bucket). Several processes may
merge into one file at once: each read-merge-write holds an exclusive lock, and the write
is atomic, so no entry is lost and no reader sees half a file.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch import measurements

__all__ = ["Environment", "Record", "SweepResult", "merge_records", "target_path", "OK", "STATUSES"]

OK = "ok"
#: ok: a figure; flagged: timed but not believed (bench_op.implausible); refused: bench's integrity checks
#: refused the row; skipped: the row cannot run there (the reason); crashed: the worker died; error: raised.
STATUSES = (OK, "flagged", "refused", "skipped", "crashed", "error")


@dataclasses.dataclass(frozen=True)
class Environment:
    """The machine a record was measured on: what makes two figures comparable or not."""

    gpu_kind: str  # platform.device_label: the name dispatch looks figures up by ("NVIDIA H100 80GB HBM3", "cpu")
    driver: str | None
    cuda: str | None
    torch: str
    commit: str  # git HEAD of the checkout the worker ran (+dirty), else the package version
    accelerator: str | None = None  # the scheduler's accelerator label (Ray's accelerator_type), when it had one
    copy_roofline_gbps: float | None = None
    l2_bytes: int | None = None
    host: str = ""

    def key(self) -> tuple[str, str | None, str | None, str, str]:
        return (self.gpu_kind, self.driver, self.cuda, self.torch, self.commit)


@dataclasses.dataclass(frozen=True)
class Record:
    """One row at one (op, form, dtype, size) on one device, or why it has no figure there."""

    op: str
    form: str | None
    row: str
    dtype: str
    numel: int
    env: Environment
    status: str = OK
    median_us: float | None = None
    source_digest: str | None = None
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)  # stored_figures + host_us / graph_us
    detail: str = ""
    worker: str = ""  # which worker timed it (a task's rows all name the same one)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def key(self) -> tuple:
        """(GPU kind, driver, CUDA, torch, source digest, commit) and what was measured."""
        gpu, driver, cuda, torch_v, commit = self.env.key()
        return (gpu, driver, cuda, torch_v, self.source_digest, commit, self.op, self.form, self.row, self.dtype,
                self.numel)

    def entry(self) -> tuple[str, dict[str, Any]]:
        """The figures file's key and entry (dispatch's form, plus where it was measured)."""
        if not self.ok or self.median_us is None:
            raise ValueError(f"{self.op}/{self.row}: a {self.status} record has no figure ({self.detail})")
        extra = dict(self.figures)
        if self.source_digest is not None:
            extra[measurements.DIGEST_FIELD] = self.source_digest
        extra.update(driver=self.env.driver, cuda=self.env.cuda, torch=self.env.torch, commit=self.env.commit)
        return measurements.make_entry(measurements.form_key(self.op, self.form), self.row, self.dtype, self.numel,
                                       self.median_us, **extra)


def target_path(op: str, gpu_kind: str, root: str | Path | None = None) -> Path:
    """The figures file of ``op`` for a GPU kind: ``<root>/<group>/<op>/figures/<kind>.json``, ``root`` being the
    package's ops folder by default (where committed files rank rows) or a folder of the same shape."""
    default = measurements.figures_path(op, gpu_kind)
    if root is None:
        return default
    return Path(root) / default.relative_to(platform.OPS_DIR)


def merge_records(records: Iterable[Record], root: str | Path | None = None, *, replace: bool = False) -> list[Path]:
    """Merge the ``ok`` records into their figures files (one per op per GPU kind); the files written.

    An entry replaces the one of the same key (op|row|dtype|bucket); the rest of the file stays. ``replace``
    starts each touched file afresh (a full re-measurement). The file's meta names the newest merge's
    environment; each entry names its own (driver, cuda, torch, commit) and its source digest.
    """
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        if r.ok:
            groups.setdefault((r.op, r.env.gpu_kind), []).append(r)
    written = []
    for (op, kind), mine in sorted(groups.items()):
        path = target_path(op, kind, root)
        with platform.locked(path, "figures"):
            doc: dict[str, Any] = {"device": kind, "entries": {}, "meta": {}}
            if path.exists() and not replace:
                doc = measurements.load_file(path)
                if doc["device"] != kind:
                    raise ValueError(f"{path} holds figures of {doc['device']!r}, not {kind!r}")
            entries = dict(doc["entries"])
            for r in sorted(mine, key=lambda r: tuple("" if v is None else str(v) for v in r.key())):
                key, entry = r.entry()
                entries[key] = entry
            env = mine[-1].env
            meta = {**doc.get("meta", {}), "torch": env.torch, "cuda": env.cuda, "driver": env.driver,
                    "commit": env.commit, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "by": "rapid_llm.bench.sweeps"}
            if env.copy_roofline_gbps:
                meta["copy_roofline_gbps"] = env.copy_roofline_gbps
            if env.l2_bytes:
                meta["l2_bytes"] = env.l2_bytes
            out = {"device": kind, "entries": entries, "meta": meta}
            platform.write_atomic(path, json.dumps(out, indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written


@dataclasses.dataclass
class SweepResult:
    """Every record of a sweep (figures and failures), and the seconds it took."""

    records: list[Record]
    seconds: float = 0.0
    executor: str = ""
    workers: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)  # rows that could not travel to a worker, and why
    tasks: int = 0

    @property
    def figures(self) -> list[Record]:
        return [r for r in self.records if r.ok]

    @property
    def failures(self) -> list[Record]:
        return [r for r in self.records if not r.ok]

    def gpu_kinds(self) -> list[str]:
        return sorted({r.env.gpu_kind for r in self.records})

    def keys(self) -> set[tuple]:
        return {r.key() for r in self.figures}

    def merge(self, root: str | Path | None = None, *, replace: bool = False) -> list[Path]:
        """Write the figures into the figures files dispatch reads (:func:`merge_records`)."""
        return merge_records(self.records, root, replace=replace)

    def table(self, records: Sequence[Record] | None = None) -> str:
        """Per GPU kind, op, dtype and size: each row's median (fastest first), then every failure and why."""
        rows = self.figures if records is None else [r for r in records if r.ok]
        lines = []
        cells: dict[tuple, list[Record]] = {}
        for r in rows:
            cells.setdefault((r.env.gpu_kind, r.op, r.form or "", r.dtype, r.numel), []).append(r)
        last = None
        for (kind, op, form, dtype, numel), mine in sorted(cells.items()):
            if (kind, op, form, dtype) != last:
                lines.append(f"== {kind}: {op}{f'[{form}]' if form else ''} {dtype} ==")
                last = (kind, op, form, dtype)
            mine.sort(key=lambda r: r.median_us or 0.0)
            best = mine[0].median_us or 1.0
            shown = "  ".join(f"{r.row} {r.median_us:.2f} us" + ("" if r is mine[0] else f" ({r.median_us / best:.2f}x)")
                              for r in mine)
            lines.append(f"  numel={numel:<10} {shown}")
        fails = self.failures if records is None else [r for r in records if not r.ok]
        for r in fails:
            lines.append(f"  {r.status}: {r.env.gpu_kind} {r.op} {r.row} {r.dtype} numel={r.numel}: {r.detail}")
        return "\n".join(lines)

    def __str__(self) -> str:
        head = (f"sweep: {self.tasks} tasks, {len(self.figures)} figures, {len(self.failures)} without one, on "
                f"{', '.join(self.gpu_kinds()) or 'nothing'} ({self.executor}, {self.workers} workers, "
                f"{self.seconds:.1f} s)")
        return "\n".join([head, *self.notes] + ([self.table()] if self.records else []))
