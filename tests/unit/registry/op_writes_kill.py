"""Run by test_op_writes.py, in a process of its own: write_all killed after each of its steps, then its
recovery killed after each of its own. Prints one JSON object per kill.

``python -m tests.unit.registry.op_writes_kill FOLDER``
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from rapid_llm.kernels.registry import op_writes
from tests.kill_steps import empty_folders, killed_at, leftovers, snapshot, steps_of

#: The ops folder before: a group with an op whose source the write replaces.
OLD = {"elementwise/__init__.py": '"""group"""\n', "elementwise/scale/scale.cu": "// the shipped scale\n"}
#: What the write puts there: a replaced file, and a new group with a new op (three folders that do not exist).
NEW = {"elementwise/scale/scale.cu": "// the promoted scale\n", "demo/twice/native.py": "def twice(x): ...\n",
       "demo/twice/__init__.py": "DECLARATION = ...\n", "demo/__init__.py": '"""demo"""\n',
       "demo/twice/twice.cu": "// twice\n"}


def reset(ops: Path) -> None:
    shutil.rmtree(ops, ignore_errors=True)
    for rel, text in OLD.items():
        (ops / rel).parent.mkdir(parents=True, exist_ok=True)
        (ops / rel).write_text(text)


def write(ops: Path) -> None:
    op_writes.write_all(ops, {ops / rel: text for rel, text in NEW.items()})


def recover_timed(ops: Path) -> tuple[bool, float]:
    start = time.perf_counter()
    recovered = op_writes.recover(ops)
    return recovered, time.perf_counter() - start


def state(ops: Path, old: dict, new: dict) -> dict:
    tree = snapshot(ops)
    return {"old": tree == old, "new": tree == new, "empty": empty_folders(ops), "leftovers": leftovers(ops)}


def main(root: Path) -> None:
    ops = root / "ops"
    reset(ops)
    old = snapshot(ops)
    steps = steps_of(lambda: write(ops))
    new = snapshot(ops)
    for k, step in enumerate(steps, 1):
        reset(ops)
        killed = killed_at(k, lambda: write(ops))
        pending = op_writes.pending(ops)
        recovered, seconds = recover_timed(ops)
        report = {"kill": "write", "step": step, "killed": killed, "pending": pending, "recovered": recovered,
                  "seconds": seconds, **state(ops, old, new)}
        write(ops)
        report["rerun_new"] = snapshot(ops) == new
        print(json.dumps(report), flush=True)
    # Killed after its last file, before its commit: the most to undo. Then the recovery is killed too.
    last = steps.index("journal removed")
    reset(ops)
    killed_at(last, lambda: write(ops))
    recovery = steps_of(lambda: op_writes.recover(ops))
    for k, step in enumerate(recovery, 1):
        reset(ops)
        killed_at(last, lambda: write(ops))
        killed = killed_at(k, lambda: op_writes.recover(ops))
        pending = op_writes.pending(ops)
        recovered, seconds = recover_timed(ops)
        print(json.dumps({"kill": "recovery", "step": step, "killed": killed, "pending": pending,
                          "recovered": recovered, "seconds": seconds, **state(ops, old, new)}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
