"""What the build cache may load, and what it says when the disk says no.

A cached binary is code this process will run. In a cache folder other users
can write (a team's shared ``RAPID_LLM_CACHE_DIR``, a world-writable /tmp),
anything they plant there would run as whoever loads it. So an entry is loaded
only when it, its manifest and its files are plain files and folders (never
symlinks) owned by the current user and writable by nobody else; a cache
folder others can write without the sticky bit (anyone could swap entries
after they are checked) is refused as a whole. ``RAPID_LLM_CACHE_SHARED=1``
opts into a cache every writer of which is trusted: ownership and group
write are then accepted, symlinks never are.

A disk fault (read-only, full, no permission) becomes one line naming the
path and what to do, instead of a traceback from the middle of a build.
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

__all__ = ["CacheError", "SHARED_ENV", "shared_opt_in", "check_folder", "entry_problem", "trusted", "open_lock",
           "remove_obstacle", "disk_fault", "low_on_space"]

SHARED_ENV = "RAPID_LLM_CACHE_SHARED"
_FIX_FOREIGN = (f"remove it, use a cache folder of your own (RAPID_LLM_CACHE_DIR), or set {SHARED_ENV}=1 if "
                "every user who can write there is trusted")


class CacheError(RuntimeError):
    """The build cache refused an entry or could not be written; the message is one line with the path and the fix."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def shared_opt_in() -> bool:
    return os.environ.get(SHARED_ENV, "") not in ("", "0")


def entry_problem(path: Path) -> str | None:
    """Why ``path`` (an entry's folder or one of its files) cannot be loaded as it is; None when it can.

    Raises CacheError for what is not ours to rebuild: another user's entry, without the opt-in. What is
    ours but unsafe (a symlink, writable by others) is a problem the caller heals by rebuilding.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{path.name} is missing"
    if st.st_uid != os.geteuid() and not shared_opt_in():
        raise CacheError(f"rapid_llm: refusing the build cache entry {path}: it is owned by uid {st.st_uid}, not by "
                         f"you (uid {os.geteuid()}), so code another user wrote could run in this process; "
                         f"{_FIX_FOREIGN}", path)
    if stat.S_ISLNK(st.st_mode):
        return f"{path.name} is a symlink (the cache never follows one)"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not shared_opt_in():
        return f"{path.name} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def trusted(path: Path) -> bool:
    """Whether a cached file may be believed: it exists, is ours (or the shared opt-in is on), no symlink,
    and nobody else can write it. For records (a remembered verdict), where the answer is to ignore, not to
    refuse."""
    try:
        return path.exists() and entry_problem(path) is None
    except CacheError:
        return False


def check_folder(folder: Path) -> None:
    """Refuse a folder of entries that others can write without the sticky bit (they could replace an entry
    after it is checked); one of ours in that state is tightened instead (``chmod go-w``)."""
    try:
        st = os.stat(folder)  # the cache folder itself may be a symlink the user made: its target counts
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(st.st_mode)
    if not mode & (stat.S_IWGRP | stat.S_IWOTH) or mode & stat.S_ISVTX or shared_opt_in():
        return
    if st.st_uid == os.geteuid():
        os.chmod(folder, mode & ~(stat.S_IWGRP | stat.S_IWOTH))
        return
    raise CacheError(f"rapid_llm: refusing the build cache folder {folder}: uid {st.st_uid} owns it and others can "
                     f"write it (mode {mode:o}, no sticky bit), so they could replace a build after it is checked; "
                     f"use a folder of your own (RAPID_LLM_CACHE_DIR), or set {SHARED_ENV}=1 if every user who can "
                     "write there is trusted", folder)


def remove_obstacle(path: Path) -> None:
    """Remove what sits where a cache entry, lock or staging folder goes, if it is ours; refuse if not."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if st.st_uid != os.geteuid() and not shared_opt_in():
        raise CacheError(f"rapid_llm: {path} is in the build cache's way and belongs to uid {st.st_uid}, not to "
                         f"you; {_FIX_FOREIGN}", path)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def open_lock(path: Path) -> int:
    """The lock file's descriptor, opened without following a symlink; a symlink or folder of ours in its
    place is removed, another user's refused."""
    for _ in range(3):
        if os.path.islink(path) or os.path.isdir(path):
            remove_obstacle(path)
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EISDIR):  # planted between the check and the open
                raise
    raise CacheError(f"rapid_llm: cannot create the build lock {path}: something keeps replacing it", path)


#: errno -> what to do about it.
_DISK_FIXES = {
    errno.EROFS: "the file system is read-only: point RAPID_LLM_CACHE_DIR at a writable folder",
    errno.EACCES: "no permission to write there: make it writable or point RAPID_LLM_CACHE_DIR elsewhere",
    errno.EPERM: "no permission to write there: make it writable or point RAPID_LLM_CACHE_DIR elsewhere",
    errno.ENOSPC: "the disk is full: free space there or point RAPID_LLM_CACHE_DIR at another disk",
    errno.EDQUOT: "the disk quota is used up: free space there or point RAPID_LLM_CACHE_DIR at another disk",
}


def disk_fault(exc: OSError, where: Path) -> CacheError | None:
    """A one-line CacheError for a disk fault while writing the cache at ``where``; None for any other error."""
    fix = _DISK_FIXES.get(exc.errno or 0)
    if fix is None:
        return None
    path = Path(exc.filename) if exc.filename else where
    return CacheError(f"rapid_llm: cannot write the build cache at {path} ({os.strerror(exc.errno)}): {fix}", path)


def low_on_space(folder: Path, below: int = 1 << 20) -> bool:
    """Whether the disk holding ``folder`` has less than ``below`` bytes left (a compiler's failure is then
    the full disk's, whatever its log says)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < below
