"""Catch what a build writes to the process's stdout and stderr file descriptors.

torch's verbose extension build runs ninja and nvcc with their output on fd 1,
which a notebook kernel does not reliably show in the cell, and torch's error
then carries no compiler log. ``--verbose`` builds run inside this capture so
the full log can be shown in the cell and the errors read from it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Iterator

__all__ = ["CapturedLog", "capture_fds"]


class CapturedLog:
    """The captured text; filled in when the capture ends."""

    text: str = ""


@contextlib.contextmanager
def capture_fds() -> Iterator[CapturedLog]:
    """Redirect fds 1 and 2 to a temporary file for the duration; restore them whatever happens."""
    captured = CapturedLog()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = (os.dup(1), os.dup(2))
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield captured
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            captured.text = tmp.read().decode("utf-8", errors="replace")
