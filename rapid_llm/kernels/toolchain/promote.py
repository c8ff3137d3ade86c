"""promote(): ship a verified notebook kernel as a row of the package, in one call.

The cell's source is copied unchanged into the op's folder,
``kernels/ops/<group>/<op>/<name>.cu``, with one line added at the top: the row
it declares, with the golden record of its last passing ``verify``. The registry
reads that line (see jit_row), so the row is then shipped: dispatched, verified
by the parametrized row tests and timed by ``bench_op`` like any other, with no
Python file to write.

A row of an op the library does not declare ships its op too, in the shape of
every op folder: the notebook's declaration is written out
(rapid_llm.kernels.registry.opsource) as ``__init__.py`` (``DECLARATION``),
``native.py`` (the floor) and ``reference.py`` (the oracle and bench case), so
the library never holds a row without its op, and a promoted op reads like a
hand-written one.

A row of a library op ships only if it was verified against the library's
own declaration. A notebook that shadows the op
(``declare_op(..., shadow_library=True)``) verifies its rows against its own
reference and floor; shipped as rows of the library's op they would compute
what the notebook meant for every caller of the library's (a shadowed
``scale`` with a doubling floor ships a kernel that doubles). So promote
refuses them, naming the two ways on. It does not offer to ship the
shadow's declaration over the library's: the op's folder also holds the
library's other rows (their golden records checked against the library's
reference, their committed figures) and its callers' signature, which a
replaced declaration would silently turn into claims about another op. A
different op is a new name, and promote ships it whole; a changed library
op is an edit of its folder, with its rows verified again.

A Gluon or Triton row of a notebook ships the same way as one module,
``<name>.py``, its launcher and kernels by their source and the row declared
on its first line (rapid_llm.kernels.toolchain.promote_python).

The package is written all or nothing, also when the process is killed
half-way (rapid_llm.kernels.registry.op_writes: a journal the next promote,
or the registry reading the package, rolls back).
"""
from __future__ import annotations

from pathlib import Path

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import op_writes
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.toolchain.jit_row import JitRow, read_header, row_from_header, source_digest, write_header
from rapid_llm.kernels.registry.out_rules import DEFAULT as DEFAULT_OUT
from rapid_llm.kernels.registry.spec import KernelSpec, RegistryError
from rapid_llm.kernels.toolchain.promotion import PromoteError, Promotion
from rapid_llm.kernels.toolchain.promotion import declaration_files as _declaration_files
from rapid_llm.kernels.toolchain.promotion import default_group as _default_group

__all__ = ["promote", "Promotion", "PromoteError"]


def _carry_pins(cell: JitRow, promoted: KernelSpec, dest: Path) -> None:
    """The cell's pinned configs (tune, in the local store) into the op folder's tuned/, keyed by the shipped
    file's digest. After the row's files: a promote killed in between ships the row untuned, never a pin
    without its row."""
    old = cell.untuned_digest()
    if old is None or cell.space() is None:
        return
    from rapid_llm.kernels.registry import pins

    new = promoted.target.untuned_digest()
    if new is not None:
        pins.carry(old, dest, new, promoted.op, promoted.name)


def _check_declaration(row: str, op: str) -> None:
    """Refuse a row of a library op that this process verified against another declaration (see the module
    docstring for why shipping that declaration instead is not offered)."""
    if not _spec.library_declares(op) or _spec.is_library_decl(op):
        return
    raise PromoteError(
        f"promote({row!r}): op {op!r} is the library's, but this process shadows it with a notebook declaration "
        f"(declare_op({op!r}, ..., shadow_library=True)), so {row} was verified against that declaration, not the "
        f"library's: shipped as a {op!r} row it would compute what the notebook's {op!r} means for every caller of "
        f"the library's. To ship it as the library's {op!r}: restore_op({op!r}), verify({row!r}) again, then "
        f"promote. To ship the notebook's op: declare it under a new name, register the cell for it (--op), verify "
        f"and promote (the op ships whole, declaration and row)")


def promote(row: str, *, name: str | None = None, group: str | None = None, replace: bool = False,
            package: Path | None = None) -> Promotion:
    """Ship the verified JIT row ``row`` (e.g. a ``%%cuda_jit`` cell's ``jit/scale_vec``), or a verified Gluon or
    Triton row whose launcher is a notebook function (rapid_llm.kernels.toolchain.promote_python: one module,
    ``<name>.py``, whose first line declares the row).

    ``name`` is the shipped file's stem and the row's name after ``jit/``
    (default: the cell's NAME); ``group`` the group folder under kernels/ops/
    (default: the op's group in the library, else the cell's ``--group``). ``package`` is the package folder
    written into (default: the installed rapid_llm; a tutorial or a test
    passes a copy). Replacing an existing
    shipped source or row needs ``replace=True``. Refuses, with the reason,
    a row that is not a JIT row with a source, is golden-unverified, whose
    source changed since it was built, of a library op this process shadows,
    or whose op cannot be shipped with it (its declaration uses a lambda,
    say); nothing is written then.
    """
    spec = _spec.get_row(row)
    target = spec.target
    _check_declaration(row, spec.op)
    if spec.backend in ("gluon", "triton", "cute"):
        from rapid_llm.kernels.toolchain.promote_python import promote_python_row

        return promote_python_row(spec, name=name, group=group, replace=replace, package=package)
    if spec.backend != "jit" or not isinstance(target, JitRow):
        raise PromoteError(f"promote({row!r}): only a JIT row built from a .cu source can ship, or a Gluon, "
                           f"Triton or CuTe row whose launcher is a notebook function (this is a {spec.backend} row with "
                           f"target {target!r})")
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
    package = Path(package) if package is not None else platform.PACKAGE_DIR
    ops_dir = package / "kernels" / "ops"
    if not ops_dir.is_dir():
        raise PromoteError(f"promote({row!r}): {package} is not a rapid_llm package folder (it has no kernels/ops/); "
                           "pass the folder of the package itself, or a copy of it")
    op_writes.recover(ops_dir)  # a promote killed half-way: rolled back before anything here reads the folder
    name = name or target.source.stem
    group = group or _default_group(spec.op, target.source)
    for what, value in (("name", name), ("group", group)):
        if not value.isidentifier():
            raise PromoteError(f"promote({row!r}): {what} must be an identifier, got {value!r}")
    dest = ops_dir / group / spec.op / f"{name}.cu"
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
        "golden": golden.to_json(),  # verified: checked above
        "graph_safe": spec.graph_safe, "min_sm": spec.min_sm,
        "description": f"promoted from {target.source.name}, launcher {target.fn}()",
        "out": None if target.out == DEFAULT_OUT else target.out,
        "layouts": list(spec.layouts) if spec.layouts != ("contiguous",) else None,
    }
    fields = {k: v for k, v in fields.items() if v is not None}
    shipped_text = write_header(text, fields)
    read_header(shipped_text, str(dest))  # what the registry will read back must parse
    files = {} if _spec.library_declares(spec.op) else _declaration_files(spec.op, group, package, replace)
    files[dest] = shipped_text  # last: a row is never on disk without its op
    op_writes.write_all(ops_dir, files)  # all of them or none, killed or not
    promoted = row_from_header(fields, dest)
    _carry_pins(target, promoted, dest)
    _spec.register(promoted, replace=True)
    declaration = next((p for p in files if p.name == "__init__.py" and p.parent.name == spec.op), None)
    return Promotion(shipped, spec.op, dest, target.fn, golden, clobbers, declaration)
