"""Where %%cuda_jit cells land on disk, and writing them there safely.

Cells go to ``<project>/csrc/<group>/<NAME>.cu``: the project root is the
nearest folder at or above the working directory that holds a
``pyproject.toml`` (a notebook in ``notebooks/`` writes to the repository's
``csrc/``), else the working directory. Names are plain identifiers, so no
cell can write outside ``csrc/``.
"""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path

__all__ = ["WorkspaceError", "project_root", "default_csrc", "check_identifier", "cell_path", "write_atomic"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class WorkspaceError(ValueError):
    """A name or path that a cell may not use; the message says which and why."""


def project_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: cwd) holding a pyproject.toml."""
    from rapid_llm.kernels.platform import project_root as find

    return find(start)


def default_csrc(start: Path | None = None) -> Path:
    """``<project root>/csrc``, or ``<cwd>/csrc`` outside a project."""
    root = project_root(start)
    return (root if root is not None else Path(start if start is not None else os.getcwd()).resolve()) / "csrc"


def check_identifier(value: str, what: str) -> str:
    """``value`` if it is a plain ASCII identifier, else a WorkspaceError naming ``what``."""
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise WorkspaceError(
            f"{what} must be a plain identifier (letters, digits, underscore; no path separators, "
            f"no '..'), got {value!r}"
        )
    return value


def cell_path(csrc: Path, group: str, name: str, suffix: str = ".cu") -> Path:
    """``csrc/<group>/<name><suffix>``, checked to stay inside ``csrc`` even through symlinks.

    ``csrc`` itself may be a symlink to a folder elsewhere (cells kept on another disk): the path keeps the
    link's name, so messages and cell-line mapping still say ``csrc/``; a link to nothing is refused.
    """
    check_identifier(name, "NAME")
    if group:
        check_identifier(group, "--group")
    csrc = Path(os.path.abspath(Path(csrc).expanduser()))
    if csrc.is_symlink() and not csrc.resolve().is_dir():
        raise WorkspaceError(f"{csrc} is a symlink to {os.readlink(csrc)}, which is not a folder: create that "
                             f"folder, or remove the link so cells are saved in a real {csrc.name}/")
    path = (csrc / group / f"{name}{suffix}") if group else (csrc / f"{name}{suffix}")
    if csrc.resolve() not in path.resolve().parents:
        raise WorkspaceError(f"{path} resolves outside {csrc} (a symlink?); refusing to write there")
    return path


def write_atomic(path: Path, text: str) -> bool:
    """Write a cell's source atomically (rapid_llm.kernels.platform.write_atomic); False when unchanged.

    A disk fault (read-only, full, no permission) is one line naming the path and what to do; the file
    keeps its old content.
    """
    from rapid_llm.kernels.platform import write_atomic as write

    try:
        return write(path, text)
    except OSError as exc:
        fix = _SAVE_FIXES.get(exc.errno or 0)
        if fix is None:
            raise
        raise WorkspaceError(f"cannot save the cell to {path} ({os.strerror(exc.errno)}): {fix}") from None


_SAVE_FIXES = {
    errno.EROFS: "the folder is on a read-only file system; point the magic at a writable folder "
                 "(%config CudaJitMagics.csrc_dir = '...')",
    errno.EACCES: "no permission to write there; make it writable or point the magic elsewhere "
                  "(%config CudaJitMagics.csrc_dir = '...')",
    errno.EPERM: "no permission to write there; make it writable or point the magic elsewhere "
                 "(%config CudaJitMagics.csrc_dir = '...')",
    errno.ENOSPC: "the disk is full; free space there or point the magic at another disk "
                  "(%config CudaJitMagics.csrc_dir = '...')",
    errno.EDQUOT: "the disk quota is used up; free space there or point the magic at another disk",
}
