"""promote(): ship a verified notebook kernel as a row of the package, in one call.

The cell's source is copied unchanged into ``kernels/csrc/<group>/<name>.cu``
with one line added at the top: the row it declares, with the golden record of
its last passing ``verify``. The registry reads that line (see jit_row), so the
row is then shipped: dispatched, verified by the parametrized row tests and
timed by ``bench_op`` like any other, with no Python file to write.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from rapid_llm.kernels import platform
from rapid_llm.kernels import spec as _spec
from rapid_llm.kernels.jit_row import JitRow, read_header, row_from_header, source_digest, write_header
from rapid_llm.kernels.spec import GoldenRecord, RegistryError

__all__ = ["promote", "Promotion", "PromoteError"]


class PromoteError(RegistryError):
    """A row that cannot ship as it is; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class Promotion:
    """What promote() did."""

    row: str
    op: str
    path: Path
    launcher: str
    golden: GoldenRecord
    replaced: bool

    def __str__(self) -> str:
        shown = self.path.relative_to(platform.PACKAGE_DIR.parent) if self.path.is_relative_to(
            platform.PACKAGE_DIR.parent) else self.path
        what = "replaced" if self.replaced else "added"
        return (f"{what} {self.row} for op {self.op!r}: {shown} (launcher {self.launcher}()), golden verified, "
                f"max |diff| {self.golden.max_abs_diff:g} vs {self.golden.baseline}. It is now a shipped row: "
                f"tests/kernels/test_rows.py verifies it and bench_op({self.op!r}) times it.")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def promote(row: str, *, name: str | None = None, group: str | None = None, replace: bool = False,
            csrc: Path | None = None) -> Promotion:
    """Ship the verified JIT row ``row`` (e.g. a ``%%cuda_jit`` cell's ``jit/scale_vec``).

    ``name`` is the shipped file's stem and the row's name after ``jit/``
    (default: the cell's NAME); ``group`` the folder under kernels/csrc/
    (default: the cell's ``--group``). Replacing an existing shipped source
    or row needs ``replace=True``. Refuses, with the reason, a row that is
    not a JIT row with a source, is golden-unverified, or whose source
    changed since it was built.
    """
    spec = _spec.get_row(row)
    target = spec.target
    if spec.backend != "jit" or not isinstance(target, JitRow):
        raise PromoteError(f"promote({row!r}): only a JIT row built from a .cu source can ship "
                           f"(this is a {spec.backend} row with target {target!r})")
    if not spec.golden.verified:
        raise PromoteError(f"promote({row!r}): the row is golden-unverified; run verify({row!r}) until it passes "
                           "(only verified rows ship)")
    if target.built_digest is None:
        raise PromoteError(f"promote({row!r}): the row was never built in this process; run its cell first")
    text = target.source.read_text()
    if source_digest(text) != target.built_digest:
        raise PromoteError(f"promote({row!r}): {target.source} changed since it was built and verified; "
                           "re-run its cell and verify it again")
    bad = next((i for i, line in enumerate(text.splitlines(), 1) if not line.isascii()), None)
    if bad is not None:
        raise PromoteError(f"promote({row!r}): line {bad} of {target.source} is not ASCII (shipped sources are)")
    name = name or target.source.stem
    group = group or target.source.parent.name
    for what, value in (("name", name), ("group", group)):
        if not value.isidentifier():
            raise PromoteError(f"promote({row!r}): {what} must be an identifier, got {value!r}")
    dest = (csrc or platform.CSRC) / group / f"{name}.cu"
    shipped = f"jit/{name}"
    try:
        existing = _spec.get_row(shipped)
    except RegistryError:
        existing = None
    clobbers = dest.exists() or (existing is not None and existing.name != spec.name)
    if clobbers and not replace:
        raise PromoteError(f"promote({row!r}): {dest} or row {shipped} already exists; pass replace=True to "
                           "replace it")
    if existing is not None and existing.op != spec.op:
        raise PromoteError(f"promote({row!r}): row {shipped} serves op {existing.op!r}, not {spec.op!r}")
    golden = spec.golden
    fields = {
        "name": shipped, "op": spec.op, "fn": target.fn, "dtypes": list(spec.dtypes),
        "golden": {"verified": True, "max_abs_diff": golden.max_abs_diff, "baseline": golden.baseline,
                   "per_dtype": [list(p) for p in golden.per_dtype]},
        "graph_safe": spec.graph_safe, "min_sm": spec.min_sm,
        "description": f"promoted from {target.source.name}, launcher {target.fn}()",
        "out": None if target.out == "like_input" else target.out,
        "layouts": list(spec.layouts) if spec.layouts != ("contiguous",) else None,
    }
    fields = {k: v for k, v in fields.items() if v is not None}
    shipped_text = write_header(text, fields)
    read_header(shipped_text, str(dest))  # what the registry will read back must parse
    _write_atomic(dest, shipped_text)
    _spec.register(row_from_header(fields, dest), replace=True)
    return Promotion(shipped, spec.op, dest, target.fn, golden, clobbers)
