"""Where %%cuda_jit cells land on disk, and writing them there safely.

Cells go to ``<project>/csrc/<group>/<NAME>.cu``: the project root is the
nearest folder at or above the working directory that holds a
``pyproject.toml`` (a notebook in ``notebooks/`` writes to the repository's
``csrc/``), else the working directory. Names are plain identifiers, so no
cell can write outside ``csrc/``.
"""
from __future__ import annotations

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
    """``csrc/<group>/<name><suffix>``, checked to stay inside ``csrc`` even through symlinks."""
    check_identifier(name, "NAME")
    if group:
        check_identifier(group, "--group")
    csrc = Path(csrc).expanduser().resolve()
    path = (csrc / group / f"{name}{suffix}") if group else (csrc / f"{name}{suffix}")
    if csrc not in path.resolve().parents:
        raise WorkspaceError(f"{path} resolves outside {csrc} (a symlink?); refusing to write there")
    return path


def write_atomic(path: Path, text: str) -> bool:
    """Write a cell's source atomically (rapid_llm.kernels.platform.write_atomic); False when unchanged."""
    from rapid_llm.kernels.platform import write_atomic as write

    return write(path, text)
