"""What promote() gives back and refuses with, and what every kind of row it ships shares: the op's group
and, for an op the library does not declare, the declaration's files (rapid_llm.kernels.toolchain.promote for a
.cu row, promote_python for a Gluon or Triton one)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.spec import GoldenRecord, RegistryError

__all__ = ["PromoteError", "Promotion", "default_group", "declaration_files"]


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
    declaration: Path | None = None  # the op's declaration, written because the library did not have it

    def __str__(self) -> str:
        what = "replaced" if self.replaced else "added"
        text = (f"{what} {self.row} for op {self.op!r}: {_shown(self.path)} (launcher {self.launcher}()), golden "
                f"verified, max |diff| {self.golden.max_abs_diff:g} vs {self.golden.baseline}.")
        if self.declaration is not None:
            text += f" The op itself is declared in {_shown(self.declaration)} (native floor, reference, bench case)."
        return text + (f" It is now a shipped row: tests/contract/test_rows.py verifies it and bench_op({self.op!r}) "
                       "times it.")


def _shown(path: Path) -> Path:
    root = platform.PACKAGE_DIR.parent
    return path.relative_to(root) if path.is_relative_to(root) else path


def default_group(op: str, source: Path) -> str:
    """The op's group where the library has the op; else the cell's folder, unless it sat in csrc/ itself; else
    the op's name."""
    group = _spec.op_group(op)
    if group:
        return group
    folder = source.parent.name
    return folder if folder and folder != "csrc" and folder.isidentifier() else op


def declaration_files(op: str, group: str, package: Path, replace: bool) -> dict[Path, str]:
    """What ships the op's declaration: its folder's __init__.py, native.py and reference.py, and the group's
    __init__.py where the group is new."""
    from rapid_llm.kernels.registry.opsource import package_sources

    folder = package / "kernels" / "ops" / group / op
    files = {folder / name: text for name, text in package_sources(op, f"rapid_llm.kernels.ops.{group}.{op}").items()}
    clash = next((path for path in files if path.exists()), None)
    if clash is not None and not replace:
        raise PromoteError(f"promote: {clash} already exists; pass replace=True to replace the op's declaration")
    init = folder.parent / "__init__.py"
    if not init.exists():
        files[init] = f'"""Ops of the {group} group, one folder each (written by promote())."""\n'
    return files
