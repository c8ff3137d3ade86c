"""Kill a package write with SIGKILL after each of its steps, and read the tree it leaves.

The steps are the calls of rapid_llm.kernels.registry.op_writes._reached (one after each change on disk). A
forked child replaces that hook with one that kills the child at step k; the parent then looks at the tree.
Run from a helper script (a process of its own), never inside pytest's: forking pytest's workers is not safe.
"""
from __future__ import annotations

import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from rapid_llm.kernels.registry import op_writes


def steps_of(run: Callable[[], Any]) -> list[str]:
    """The steps ``run`` goes through, by name (it runs to the end, here)."""
    steps: list[str] = []
    hook, op_writes._reached = op_writes._reached, steps.append
    try:
        run()
    finally:
        op_writes._reached = hook
    return steps


def killed_at(step: int, run: Callable[[], Any]) -> bool:
    """Run ``run`` in a forked child that SIGKILLs itself right after step ``step`` (1-based); True when it died so."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns to the caller's code
        count = [0]

        def reached(what: str) -> None:
            count[0] += 1
            if count[0] == step:
                os.kill(os.getpid(), signal.SIGKILL)

        op_writes._reached = reached
        try:
            run()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``, bytecode caches left out."""
    tree: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        tree[path.relative_to(root).as_posix()] = None if path.is_dir() else path.read_bytes()
    return tree


def empty_folders(root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in sorted(root.rglob("*")) if p.is_dir() and not any(p.iterdir())]


def leftovers(root: Path) -> list[str]:
    """The journal and temporaries a write leaves only while it is not done."""
    return [p.relative_to(root).as_posix() for p in sorted(root.rglob("*"))
            if p.name == op_writes.JOURNAL or p.name.endswith(".promote-tmp")]
