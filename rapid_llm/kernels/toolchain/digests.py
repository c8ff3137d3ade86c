"""The digest of the code a row runs: what a measured figure names, so an edited row is never ranked by the
figures of its old code.

A JIT row's code is its ``.cu`` source (the row line left out: promote rewrites that line, not the code), every
project header it includes, transitively (the norms' kernels live in a header their ``.cu`` files share), and its
build flags. A Python row's (native, Triton, Gluon, CuTe) is its module's file, and the files beside it that the
module names in a ``CODE_FILES`` tuple (a CuTe row's kernel and C launcher live in their own files). A row whose target is an object made in a
notebook has no file to name: None, and its figures are taken as they are.
"""
from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.toolchain.cache import local_sources
from rapid_llm.kernels.toolchain.jit_row import JitRow, files_digest, source_digest

__all__ = ["code_digest", "code_files", "module_file"]

#: (paths, their stat stamps) -> digest: a Python row's digest is read on every resolution, hashed once per edit.
_memo: dict[tuple, str] = {}
#: (module path, its stat stamp) -> the CODE_FILES it names.
_named: dict[tuple, tuple[str, ...]] = {}


def code_files(row: KernelSpec) -> list[Path]:
    """The files whose text is the row's code (empty where it has none on disk)."""
    target = row.target
    if isinstance(target, JitRow):
        return local_sources(target.source) if target.source.is_file() else []
    if isinstance(target, str):
        path = module_file(target.split(":", 1)[0])
        return [path, *(path.with_name(name) for name in named_code_files(path))] if path is not None else []
    return []


def named_code_files(module: Path) -> tuple[str, ...]:
    """The names in the module's ``CODE_FILES = ("kernel.py", "launcher.cpp")``, read from its text (the module
    is not imported: a row's digest must not load its language)."""
    try:
        stat = module.stat()
    except OSError:
        return ()
    stamp = (str(module), stat.st_mtime_ns, stat.st_size)
    if stamp not in _named:
        names: tuple[str, ...] = ()
        for node in ast.parse(module.read_text(errors="replace")).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CODE_FILES"
                                                    for t in node.targets):
                value = ast.literal_eval(node.value)
                names = tuple(value) if isinstance(value, (tuple, list)) else ()
        _named[stamp] = names
    return _named[stamp]


def code_digest(row: KernelSpec, kind: str | None = None) -> str | None:
    """The sha256 of the row's code (see the module's docstring), or None where it has no files. A tunable JIT
    row's code is the variant it builds on a GPU kind (default: this process's): its pinned config's defines are
    among its flags, so the digest of an H100's figures is computed on any machine with ``kind``."""
    target = row.target
    if isinstance(target, JitRow):
        return files_digest(target.source, target.flags_for(kind))
    files = code_files(row)
    if not files:
        return None
    try:
        stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    except OSError:
        return None
    digest = _memo.get(stamp)
    if digest is None:
        texts = [p.read_text(errors="replace") for p in files]
        # One file: its digest as before (figures of such rows stay fresh); more: each file named and hashed.
        digest = source_digest(texts[0] if len(files) == 1 else
                               "".join(f"\n// file {p.name}\n{t}" for p, t in zip(files, texts)))
        _memo[stamp] = digest
    return digest


def module_file(module: str) -> Path | None:
    loaded = sys.modules.get(module)
    origin = getattr(loaded, "__file__", None)
    if origin is None:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        origin = found.origin if found is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None
