"""Real disk faults for tests: a small tmpfs (full disk), a read-only one, another user's files.

Mounting and chown need root; where they are refused the tests skip and say so.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

#: A user that is not the one running the tests (its files are "another user's").
OTHER_UID = 1001


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or 'mount failed'}): needs root and "
                    "CAP_SYS_ADMIN")


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount_read_only(path: Path) -> None:
    _mount("-o", "remount,ro", str(path))


def fill(path: Path, leave: int = 4096) -> Path:
    """Fill the file system holding ``path`` until about ``leave`` bytes are free; the filler's path."""
    filler = path / "filler"
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


def give_away(path: Path, uid: int = OTHER_UID) -> None:
    """Make ``path`` (and everything under it) another user's, links themselves included."""
    if os.geteuid() != 0:
        pytest.skip("making files another user's needs root (chown)")
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, uid)
    os.lchown(path, uid, uid)
