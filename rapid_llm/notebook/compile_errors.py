"""Compiler logs told in the cell's own line numbers, raised without a Python traceback.

The cell is written unchanged to ``csrc/<group>/NAME.cu`` and compiled from
there, so the line numbers nvcc (``NAME.cu(12): error: ...``) and the host
compiler (``NAME.cu:12:5: error: ...``) report for that file are the cell's
own, one line down: JupyterLab numbers the ``%%cuda_jit`` line as line 1, so
file line 12 is what the editor shows as cell line 13. This module keeps the
error diagnostics with their context lines, drops the build tool's chatter,
and says ``cell line 13`` instead of a path.
"""
from __future__ import annotations

import re
from pathlib import Path

from rapid_llm.kernels.toolchain.cell_lines import cell_line
from rapid_llm.kernels.toolchain.jit import BuildError

__all__ = ["CellBuildError", "cell_diagnostics", "first_error"]

_NVCC = re.compile(r"^(?P<file>\S.*?)\((?P<line>\d+)\): (?P<rest>(?:catastrophic |fatal )?error\b.*)$")
_GCC = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:\d+:)? (?P<rest>(?:fatal )?error:.*)$")
_OTHER_ERROR = re.compile(r"(?:^|\s)(?:ptxas |nvlink |nvcc )?(?:fatal )?error\b", re.I)
_DIAGNOSTIC = re.compile(r"^\S.*?(?:\(\d+\)|:\d+:(?:\d+:)?) (?:\w+ )?(?:error|warning|remark|note)\b")
_NOISE = re.compile(
    r"^(?:\[\d+/\d+\]|FAILED:|ninja: |Error building extension|\d+ errors? detected in the compilation"
    r"|In file included from|\s+from |compilation terminated)"
)
_AT_LINE = re.compile(r"at line (\d+) of (\S+)")
_AT_LINE_BARE = re.compile(r"at line (\d+)\b(?! of)")  # nvcc's note when the line is in the same file
_GCC_ECHO = re.compile(r"^(\s*)(\d+)( \|.*)$")  # gcc's "   12 |   source" under a diagnostic

MAX_LINES = 40


class CellBuildError(BuildError):
    """A cell failed to compile; shows as the message alone, not a traceback."""

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


def _is_cell(file: str, source: Path) -> bool:
    return Path(file.strip('"')).name == source.name


def _tell(match: re.Match, source: Path) -> str:
    if _is_cell(match["file"], source):
        return f"cell line {cell_line(match['line'])}: {match['rest']}"
    return f"{match['file']}({match['line']}): {match['rest']}"


def _map_context(line: str, source: Path, in_cell: bool) -> str:
    """``at line 30 of /x/NAME.cu`` -> ``at cell line 31``; gcc's ``30 | src`` -> ``31 | src``."""
    if in_cell:
        echo = _GCC_ECHO.match(line)
        if echo:
            return f"{echo[1]}{cell_line(echo[2])}{echo[3]}"
    line = _AT_LINE.sub(lambda m: f"at cell line {cell_line(m[1])}" if _is_cell(m[2], source) else m[0], line)
    if in_cell:
        line = _AT_LINE_BARE.sub(lambda m: f"at cell line {cell_line(m[1])}", line)
    return line


def cell_diagnostics(log: str, source: Path) -> tuple[list[str], int]:
    """The error diagnostics of ``log`` (each with its context lines) and how many there are.

    Context is what a compiler prints under a diagnostic: the offending source
    line, the caret, nvcc's "detected during instantiation" trail. Without a
    recognisable diagnostic the log's last lines come back, so nothing is lost.
    """
    out: list[str] = []
    count = 0
    in_error = in_cell = False
    for raw in log.splitlines():
        line = raw.rstrip()
        match = _NVCC.match(line) or _GCC.match(line)
        if match:
            out.append(_tell(match, source))
            count += 1
            in_error = True
            in_cell = _is_cell(match["file"], source)
        elif in_error and line[:1].isspace() and line.strip():
            out.append(_map_context(line, source, in_cell))  # compilers indent a diagnostic's context
        else:
            in_error = False
            if (not _NOISE.match(line) and not _DIAGNOSTIC.match(line) and _OTHER_ERROR.search(line)
                    and not line.startswith(("/", "c++ ", "g++ ", "gcc "))):
                out.append(line.strip())  # ptxas / nvlink / nvcc fatal: no source line
                count += 1
    if not out:
        tail = [ln for ln in log.strip().splitlines() if ln.strip() and not _NOISE.match(ln)]
        return tail[-20:], 0
    if len(out) > MAX_LINES:
        out = out[:MAX_LINES] + [f"... ({len(out) - MAX_LINES} more lines; --verbose shows the full log)"]
    return out, count


_CELL_ERROR = re.compile(r"^cell line (\d+): (?:catastrophic |fatal )?error\b")
_HINTS = (
    (re.compile(r'expected (?:a )?["\']?;'), "a ';' is missing: compilers report it where the next statement "
                                            "starts, so look at the end of the line(s) just above cell line {line}"),
    (re.compile(r"(?:identifier .* is undefined|was not declared in this scope)"),
     "the name is not declared where it is used: a typo, a missing #include, or device code used under "
     "#if RL_HOST (or host code under #if RL_DEVICE)"),
    (re.compile(r"expected (?:a )?[\"']?[)}\]]"), "a bracket is not closed before cell line {line}"),
)


def first_error(diagnostics: list[str]) -> tuple[list[str], str]:
    """The first error with its context (the one to fix: later ones often follow from it), and a hint."""
    start = next((i for i, line in enumerate(diagnostics) if "error" in line and not line[:1].isspace()), 0)
    end = next((i for i in range(start + 1, len(diagnostics)) if not diagnostics[i][:1].isspace()),
               len(diagnostics))
    block = diagnostics[start:end]
    head = block[0] if block else ""
    match = _CELL_ERROR.match(head)
    line = match[1] if match else "?"
    for pattern, hint in _HINTS:
        if pattern.search(head):
            return block, "hint: " + hint.format(line=line)
    return block, "hint: fix the first error first; the others often follow from it"

