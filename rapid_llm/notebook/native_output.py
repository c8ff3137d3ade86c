"""Output that compiled code writes during a cell (a kernel's ``printf``, C's ``printf``) shows in that cell.

A CUDA kernel's ``printf`` lands in a device buffer that the driver copies to
the process's stdout when the host synchronises; C's stdio buffers it again
when stdout is a pipe, as in a Jupyter kernel. Without help it surfaces in
some later cell, or in the server's log. At the end of each cell this
synchronises CUDA (when it has been started), flushes C's stdio, and gives
ipykernel's file-descriptor forwarder a moment to pass the bytes on, so the
output is part of the cell that produced it, in the order it was written.
"""
from __future__ import annotations

import ctypes
import sys
import time
from typing import Any

__all__ = ["flush_native_output", "attach", "detach"]

#: Seconds ipykernel's forwarder gets to read what was flushed (it polls its pipe from a thread).
FORWARD_WAIT_S = 0.05
_libc: Any = None


def flush_native_output(*_: Any) -> None:
    """Synchronise CUDA if started, flush C stdio, then Python's: what the cell's native code wrote, shown now."""
    global _libc
    torch = sys.modules.get("torch")
    cuda_started = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
    if cuda_started:
        try:
            torch.cuda.synchronize()  # the device's printf buffer reaches file descriptor 1 here
        except RuntimeError:
            pass  # a failed kernel reports itself where it was called; nothing to add at the end of the cell
    if _libc is None:
        _libc = ctypes.CDLL(None)
    _libc.fflush(None)
    if cuda_started:  # only a device flush needs the forwarder's moment; C stdio alone it already handles
        time.sleep(FORWARD_WAIT_S)
    sys.stdout.flush()
    sys.stderr.flush()


def attach(ipython: Any) -> None:
    if flush_native_output not in ipython.events.callbacks["post_run_cell"]:
        ipython.events.register("post_run_cell", flush_native_output)


def detach(ipython: Any) -> None:
    if flush_native_output in ipython.events.callbacks["post_run_cell"]:
        ipython.events.unregister("post_run_cell", flush_native_output)
