"""Writes into a package's op folders that land whole or not at all, even when the writer is killed.

promote() writes up to five files into ``kernels/ops/`` (an op's ``__init__.py``, ``native.py`` and
``reference.py``, its group's ``__init__.py``, the row's ``.cu`` source). A process killed between two of
them (a kernel restart, the OOM killer) would leave an op folder that imports half a declaration, or a row
without its op, in every process that reads the package from then on. So the writes go through a journal:

1. under an exclusive lock on the ops folder, ``.promote-journal.json`` is written there atomically: every
   target with its previous content (or its absence), and the folders that do not exist yet;
2. each file is written to a temporary beside it (``.<name>.promote-tmp``) and renamed over its target;
3. the journal is removed. That is the commit: before it, the write did not happen.

A journal on disk means a writer died before its commit. :func:`recover` rolls it back: previous contents
rewritten, new files and temporaries removed, the folders the writer created removed, so the package is
exactly as it was (its caller never saw the write succeed, and re-running it writes it whole). The next
writer recovers first, and so does the registry's discovery, the package's reader. Recovery is idempotent:
killed itself, it leaves the journal, and runs again. Process death is covered; power loss is not (the
folders are not fsynced).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import threading
import warnings
from pathlib import Path
from typing import Iterator, Mapping

__all__ = ["JOURNAL", "write_all", "recover", "pending", "recover_before_reading"]

#: The journal's name in the ops folder; only an interrupted write leaves it there.
JOURNAL = ".promote-journal.json"
_TMP_SUFFIX = ".promote-tmp"
_VERSION = 1

#: Ops folders whose lock this process holds (its own journal there is live, not a dead writer's).
_held: set[str] = set()
_held_guard = threading.Lock()


def _reached(step: str) -> None:
    """Called after each step that changes the disk; does nothing. The kill-at-every-step test replaces it
    (tests/unit/registry/test_op_writes.py, tests/unit/toolchain/test_promote_kill.py)."""


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}{_TMP_SUFFIX}")


def pending(ops_dir: Path) -> bool:
    """Whether an interrupted write left its journal in ``ops_dir`` (one stat: cheap enough for every reader)."""
    return (Path(ops_dir) / JOURNAL).exists() or _tmp(Path(ops_dir) / JOURNAL).exists()


@contextlib.contextmanager
def _locked(ops_dir: Path) -> Iterator[None]:
    """The ops folder's exclusive lock (flock: a killed holder releases it with its process)."""
    fd = os.open(ops_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with _held_guard:
            _held.add(_key(ops_dir))
        try:
            yield
        finally:
            with _held_guard:
                _held.discard(_key(ops_dir))
    finally:
        os.close(fd)  # releases the lock


def _key(ops_dir: Path) -> str:
    return os.path.realpath(ops_dir)


def _write_file(path: Path, data: bytes, mode: int) -> None:
    """``data`` to ``path`` through its temporary and a rename: a reader sees the old file or the new one."""
    tmp = _tmp(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    _reached(f"temporary of {path.name} written")
    os.replace(tmp, path)


def _missing_folders(ops_dir: Path, paths: list[Path]) -> list[Path]:
    """The folders between ``ops_dir`` and each path that do not exist yet, parents first."""
    missing: list[Path] = []
    for path in paths:
        for folder in reversed(path.relative_to(ops_dir).parents[:-1]):
            folder = ops_dir / folder
            if folder not in missing and not folder.exists():
                missing.append(folder)
    return missing


def _journal_entry(ops_dir: Path, path: Path) -> dict:
    try:
        data = path.read_bytes()
        return {"path": path.relative_to(ops_dir).as_posix(), "before": data.decode("utf-8", "surrogateescape"),
                "mode": path.stat().st_mode & 0o777}
    except FileNotFoundError:
        return {"path": path.relative_to(ops_dir).as_posix(), "before": None, "mode": 0o644}


def write_all(ops_dir: Path, files: Mapping[Path, str]) -> list[Path]:
    """Write ``files`` (paths inside ``ops_dir``, an existing folder), in order, all or none; returns the ones
    whose content changed. An exception rolls back what was written and propagates; a killed process leaves
    the journal, which the next writer or reader rolls back (see the module docstring)."""
    ops_dir = Path(ops_dir)
    outside = [p for p in map(Path, files) if not p.is_relative_to(ops_dir) or p == ops_dir]
    if outside:
        raise ValueError(f"write_all: {outside[0]} is not inside {ops_dir}")
    with _locked(ops_dir):
        _recover_locked(ops_dir)  # before reading what is there: a dead writer's half is not "before"
        changed = {Path(p): text.encode("utf-8") for p, text in files.items() if _differs(Path(p), text)}
        if not changed:
            return []
        journal = {"version": _VERSION, "targets": [_journal_entry(ops_dir, p) for p in changed],
                   "created": [f.relative_to(ops_dir).as_posix() for f in _missing_folders(ops_dir, list(changed))]}
        _write_file(ops_dir / JOURNAL, json.dumps(journal).encode(), 0o644)
        _reached("journal written")
        try:
            for (path, data), entry in zip(changed.items(), journal["targets"]):
                path.parent.mkdir(parents=True, exist_ok=True)
                _write_file(path, data, entry["mode"])
                _reached(f"{entry['path']} written")
        except BaseException:
            _roll_back(ops_dir, journal)
            raise
        (ops_dir / JOURNAL).unlink()
        _reached("journal removed")
    return list(changed)


def _differs(path: Path, text: str) -> bool:
    try:
        return path.read_bytes() != text.encode("utf-8")
    except FileNotFoundError:
        return True


def recover(ops_dir: Path) -> bool:
    """Roll back an interrupted :func:`write_all` in ``ops_dir``; True when there was one to roll back."""
    ops_dir = Path(ops_dir)
    if not pending(ops_dir):
        return False
    with _locked(ops_dir):
        return _recover_locked(ops_dir)


def recover_before_reading(ops_dir: Path) -> None:
    """What a reader of the package calls first: recover a dead writer's journal, unless this process is the
    writer (its journal is live). A package it may not write is read as it is, with a warning."""
    ops_dir = Path(ops_dir)
    if not pending(ops_dir):
        return
    with _held_guard:
        if _key(ops_dir) in _held:
            return
    try:
        recover(ops_dir)
    except OSError as exc:
        warnings.warn(f"{ops_dir / JOURNAL}: an interrupted promote() left this package half-written, and it "
                      f"could not be rolled back ({exc}); run rapid_llm.kernels.registry.op_writes.recover on it "
                      "with write access", RuntimeWarning, stacklevel=2)


def _recover_locked(ops_dir: Path) -> bool:
    journal_path = ops_dir / JOURNAL
    _tmp(journal_path).unlink(missing_ok=True)  # a journal never renamed into place: nothing was touched
    try:
        journal = json.loads(journal_path.read_text())
    except FileNotFoundError:
        return False
    _roll_back(ops_dir, journal)
    return True


def _roll_back(ops_dir: Path, journal: dict) -> None:
    """Put every target back as the journal says it was, remove the folders the writer created, then the
    journal (last: a recovery killed half-way runs again)."""
    for entry in reversed(journal["targets"]):
        path = ops_dir / entry["path"]
        _tmp(path).unlink(missing_ok=True)
        before = entry["before"]
        if before is None:
            path.unlink(missing_ok=True)
        elif not path.exists() or path.read_bytes() != (data := before.encode("utf-8", "surrogateescape")):
            _write_file(path, data, entry["mode"])
        _reached(f"{entry['path']} restored")
    for rel in reversed(journal["created"]):
        _remove_emptied(ops_dir / rel)
    _reached("created folders removed")
    (ops_dir / JOURNAL).unlink(missing_ok=True)


def _remove_emptied(folder: Path) -> None:
    """Remove a folder the writer created, once nothing but bytecode a reader compiled meanwhile is in it."""
    if not folder.is_dir():
        return
    cache = folder / "__pycache__"
    if cache.is_dir() and [p.name for p in folder.iterdir()] == ["__pycache__"]:
        shutil.rmtree(cache, ignore_errors=True)
    with contextlib.suppress(OSError):  # not empty: something else wrote there since; leave it
        folder.rmdir()
