"""A source and the headers it includes, read once: what a build hashes and compiles.

A cell's file can change under a build: another process running a cell of the
same name saves its own body to the same ``csrc/`` path. Reading the path
again in each pass (key, host pass, device pass, kept sources) would then key
one content and compile another. So a build reads the source and its local
headers once, here; the cache key is the hash of these bytes, and the
compilers read a copy of them written to a folder named by that hash
(:func:`materialize`), which nothing rewrites. The project's shared headers
(``kernels/cuda``) are not copied (a header included through two paths would
be two headers to ``#pragma once``): their hashes are part of the key and are
checked again before a build is published (:meth:`Snapshot.shared_unchanged`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
from pathlib import Path

from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain.cache_safety import check_folder, entry_problem, remove_obstacle

__all__ = ["Snapshot", "take", "materialize", "INCLUDE_RE"]

INCLUDE_RE = re.compile(rb'^\s*#\s*include\s*"([^"]+)"', re.M)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The bytes of a source and of its local headers, with where they came from."""

    origin: Path                                  # the source as the user named it (resolved)
    root: Path                                    # the folder the files' relative paths start from
    files: tuple[tuple[str, bytes], ...]          # (path relative to root, bytes); the source first
    shared: tuple[tuple[Path, str], ...]          # project headers (kernels/cuda) and their sha256

    @property
    def source_relpath(self) -> str:
        return self.files[0][0]

    @property
    def text(self) -> str:
        """The source's text as it was read (what was built)."""
        return self.files[0][1].decode("utf-8", errors="replace")

    @property
    def digest(self) -> str:
        """sha256 over every local file's path and bytes and every shared header's hash."""
        h = hashlib.sha256()
        for rel, data in self.files:
            h.update(f"{rel}\0{len(data)}\0".encode())
            h.update(data)
        for path, sha in self.shared:
            h.update(f"{path.name}\0{sha}\0".encode())
        return h.hexdigest()

    def shared_unchanged(self) -> bool:
        """Whether the project headers still hold the bytes the key was computed from."""
        return all(_sha256_file(path) == sha for path, sha in self.shared)


def _sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def take(source: Path, text: str | None = None) -> Snapshot:
    """Read ``source`` (or take ``text`` as its content) and every local header it includes, transitively.

    A quoted include resolves beside the including file, then in the project's shared headers, as the
    compilers resolve it.
    """
    origin = Path(source).resolve()
    shared_root = platform.CUDA_INCLUDE.resolve()
    local: dict[Path, bytes] = {}
    shared: dict[Path, str] = {}

    def visit(path: Path, data: bytes) -> None:
        if path.is_relative_to(shared_root):
            if path in shared:
                return
            shared[path] = hashlib.sha256(data).hexdigest()
        else:
            if path in local:
                return
            local[path] = data
        for inc in INCLUDE_RE.findall(data):
            name = inc.decode(errors="replace")
            for base in (path.parent, shared_root):
                found = (base / name).resolve()
                if found.is_file():
                    visit(found, found.read_bytes())
                    break

    visit(origin, text.encode("utf-8") if text is not None else origin.read_bytes())
    root = Path(os.path.commonpath([p.parent for p in local]))
    files = tuple((p.relative_to(root).as_posix(), data) for p, data in local.items())
    return Snapshot(origin, root, files, tuple(sorted(shared.items())))


def materialize(snapshot: Snapshot, sources_root: Path) -> Path:
    """The snapshot's files under ``sources_root/<digest>``, written once; the source's path there.

    Written to a staging folder and renamed into place, so the folder is complete or absent. The folder is
    the build cache's, under its rules (cache_safety): a damaged or unsafe one of ours is replaced, one of
    another user's is refused.
    """
    check_folder(sources_root)
    folder = sources_root / snapshot.digest[:32]
    if _holds(folder, snapshot):
        return folder / snapshot.source_relpath
    sources_root.mkdir(mode=0o755, parents=True, exist_ok=True)
    staging = sources_root / f".{folder.name}.staging-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        for rel, data in snapshot.files:
            dest = staging / rel
            dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            dest.write_bytes(data)
            os.chmod(dest, 0o644)
        if folder.exists() or folder.is_symlink():
            if _holds(folder, snapshot):  # another process wrote it meanwhile
                return folder / snapshot.source_relpath
            remove_obstacle(folder)
        try:
            os.rename(staging, folder)
        except OSError:
            if not _holds(folder, snapshot):  # a racing writer's folder must be the same bytes
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder / snapshot.source_relpath


def _holds(folder: Path, snapshot: Snapshot) -> bool:
    """Whether ``folder`` is ours, safe, and holds exactly the snapshot's files."""
    if not (folder.exists() or folder.is_symlink()) or entry_problem(folder) is not None:
        return False
    try:
        return all(entry_problem(folder / rel) is None and (folder / rel).read_bytes() == data
                   for rel, data in snapshot.files)
    except OSError:
        return False
