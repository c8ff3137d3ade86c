"""Where a %%cuda_jit cell's code is, in the lines the user sees.

The magic saves a cell as ``csrc/<group>/<name>.cu`` without its first line
(the ``%%cuda_jit`` line itself), so file line N is cell line N + 1. Compiler
errors, sanitizer reports and SASS line annotations all go through here.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["CELL_LINE_OFFSET", "cell_line", "is_cell_file", "where"]

#: The %%cuda_jit line is line 1 of the cell in the editor; the saved file starts below it.
CELL_LINE_OFFSET = 1


def cell_line(file_line: int | str) -> int:
    return int(file_line) + CELL_LINE_OFFSET


def is_cell_file(path: Path) -> bool:
    """A file the magic saved: ``<project>/csrc/<group>/<name>.cu``, not a source shipped in the package."""
    return path.parent.parent.name == "csrc" and "rapid_llm" not in path.parts


def where(path: Path, line: int, source: Path | None) -> str:
    """``name.cu:12``, with ``(cell line 13)`` when ``path`` is the cell file ``source``."""
    shown = f"{path.name}:{line}"
    if source is not None and path.name == source.name and is_cell_file(source):
        shown += f" (cell line {cell_line(line)})"
    return shown
