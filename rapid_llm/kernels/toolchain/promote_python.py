"""promote() for a notebook's Gluon, Triton or CuTe DSL row: its launcher and kernels shipped as one module of the
op folder.

The row's launcher (a function of the notebook) is written out with the kernels, functions, imports and
constants it uses (rapid_llm.kernels.registry.opsource), as ``ops/<group>/<op>/<name>.py``, with one line at the
top that declares the row and the golden record of its last passing ``verify``
(rapid_llm.kernels.toolchain.python_rows). The registry reads that line, so the row is then shipped like a
``.cu`` row: no shared file changes, and an op the library does not declare ships with it.
"""
from __future__ import annotations

import types
from pathlib import Path

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import op_writes
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.opsource import row_module_source
from rapid_llm.kernels.registry.spec import KernelSpec, RegistryError
from rapid_llm.kernels.toolchain import python_rows
from rapid_llm.kernels.toolchain.promotion import PromoteError, Promotion, declaration_files, default_group

__all__ = ["promote_python_row", "RESERVED"]

#: How a shipped module's docstring names its backend's language.
_LANGUAGES = {"gluon": "Gluon", "triton": "Triton", "cute": "CuTe DSL"}
#: File names an op folder gives its declaration, floor and reference: a row never takes them.
RESERVED = ("__init__", "native", "reference")


def promote_python_row(spec: KernelSpec, *, name: str | None, group: str | None, replace: bool,
                       package: Path | None) -> Promotion:
    """Ship ``spec`` (a verified Gluon, Triton or CuTe DSL row whose target is a notebook function); see promote()."""
    row, launcher = spec.name, spec.target
    if not isinstance(launcher, types.FunctionType):
        raise PromoteError(f"promote({row!r}): a {spec.backend} row ships from its launcher, a function defined in "
                           f"the notebook; this row's target is {launcher!r} (a shipped row is edited in its file)")
    if not spec.golden.verified:
        raise PromoteError(f"promote({row!r}): the row is golden-unverified; run verify({row!r}) until it passes "
                           "(only verified rows ship)")
    package = Path(package) if package is not None else platform.PACKAGE_DIR
    ops_dir = package / "kernels" / "ops"
    if not ops_dir.is_dir():
        raise PromoteError(f"promote({row!r}): {package} is not a rapid_llm package folder (it has no kernels/ops/); "
                           "pass the folder of the package itself, or a copy of it")
    op_writes.recover(ops_dir)
    name = name or launcher.__name__
    group = group or default_group(spec.op, Path(spec.op))
    for what, value in (("name", name), ("group", group)):
        if not value.isidentifier():
            raise PromoteError(f"promote({row!r}): {what} must be an identifier, got {value!r}")
    if name in RESERVED or name in (spec.backend, "triton", "gluon", "cute"):
        raise PromoteError(f"promote({row!r}): {name}.py is a module every op folder may hold for its declaration, "
                           "floor or listed rows; pass another name=")
    dest = ops_dir / group / spec.op / f"{name}.py"
    shipped = f"{spec.backend}/{name}"
    try:
        existing = _spec.get_row(shipped)
    except RegistryError:
        existing = None
    if dest.exists():
        with dest.open(errors="replace") as f:
            if python_rows.read_header(f.readline(), str(dest)) is None:
                raise PromoteError(f"promote({row!r}): {dest} is a module of the op that declares no row; pass "
                                   "another name=")
    clobbers = dest.exists() or (existing is not None and existing.name != spec.name)
    if clobbers and not replace:
        raise PromoteError(f"promote({row!r}): {dest} or row {shipped} already exists; pass replace=True to replace it")
    if existing is not None and existing.op != spec.op:
        raise PromoteError(f"promote({row!r}): row {shipped} serves op {existing.op!r}, not {spec.op!r}")
    fields = {
        "name": shipped, "op": spec.op, "fn": launcher.__name__, "dtypes": list(spec.dtypes), "devices": list(spec.devices),
        "golden": spec.golden.to_json(), "graph_safe": spec.graph_safe, "min_sm": spec.min_sm,
        "description": spec.description or f"promoted from the notebook, launcher {launcher.__name__}()",
        "layouts": list(spec.layouts) if spec.layouts != ("contiguous",) else None,
    }
    fields = {k: v for k, v in fields.items() if v is not None}
    language = _LANGUAGES.get(spec.backend, spec.backend)
    doc = (f"{shipped}: a {language} row of {spec.op!r}, promoted from a notebook.\n\nThe first line "
           "declares the row (rapid_llm.kernels.toolchain.python_rows); an ordinary module from here on.")
    text = python_rows.write_header(row_module_source(spec.op, launcher, doc), fields)
    python_rows.read_header(text.partition("\n")[0], str(dest))  # what the registry reads back must parse
    files = {} if _spec.library_declares(spec.op) else declaration_files(spec.op, group, package, replace)
    files[dest] = text  # last: a row is never on disk without its op
    op_writes.write_all(ops_dir, files)
    module = python_rows.module_of(dest, ops_dir)
    # in this process the row keeps the verified function: the written module imports only once it is installed
    promoted = python_rows.row_from_header(fields, module, target=None if package == platform.PACKAGE_DIR
                                           else launcher)
    _spec.register(promoted, replace=True)
    declaration = next((p for p in files if p.name == "__init__.py" and p.parent.name == spec.op), None)
    return Promotion(shipped, spec.op, dest, launcher.__name__, spec.golden, clobbers, declaration)
