"""Writes into the ops folder land whole or not at all: an exception, or SIGKILL after any step, leaves it as it was."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rapid_llm.kernels.registry import op_writes
from tests.kill_steps import empty_folders, leftovers, snapshot
from tests.unit.registry.op_writes_kill import NEW, OLD, reset, write

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def ops(tmp_path):
    reset(tmp_path / "ops")
    return tmp_path / "ops"


def test_write_all_writes_every_file_and_leaves_nothing_else(ops):
    write(ops)
    assert {rel: (ops / rel).read_text() for rel in NEW} == NEW
    assert (ops / "elementwise" / "__init__.py").read_text() == OLD["elementwise/__init__.py"]
    assert leftovers(ops) == [] and empty_folders(ops) == []
    assert op_writes.write_all(ops, {ops / rel: text for rel, text in NEW.items()}) == []  # unchanged: untouched


def test_an_error_half_way_rolls_back_and_removes_the_folders_it_made(ops, monkeypatch):
    old = snapshot(ops)

    def fail(step):
        if step == "demo/twice/__init__.py written":
            raise OSError("disk full")

    monkeypatch.setattr(op_writes, "_reached", fail)
    with pytest.raises(OSError, match="disk full"):
        write(ops)
    assert snapshot(ops) == old and not op_writes.pending(ops)


def test_a_path_outside_the_ops_folder_is_refused_before_anything_is_written(ops, tmp_path):
    old = snapshot(ops)
    with pytest.raises(ValueError, match="is not inside"):
        op_writes.write_all(ops, {ops / "demo" / "a.py": "", tmp_path / "elsewhere.py": ""})
    assert snapshot(ops) == old and not (tmp_path / "elsewhere.py").exists()


def test_a_reader_leaves_the_live_write_of_its_own_process_alone(ops, monkeypatch):
    """Discovery in the writing process (a fresh registry, say) must not roll back the write under way."""
    seen = []

    def read_during(step):
        if step == "journal written":
            op_writes.recover_before_reading(ops)
            seen.append(op_writes.pending(ops))

    monkeypatch.setattr(op_writes, "_reached", read_during)
    write(ops)
    assert seen == [True] and {rel: (ops / rel).read_text() for rel in NEW} == NEW


def test_bytecode_a_reader_compiled_in_a_half_written_folder_goes_with_it(ops, monkeypatch):
    def stop(step):
        if step == "demo/twice/__init__.py written":
            (ops / "demo" / "twice" / "__pycache__").mkdir()
            (ops / "demo" / "twice" / "__pycache__" / "native.cpython.pyc").write_bytes(b"")
            raise KeyboardInterrupt

    old = snapshot(ops)
    monkeypatch.setattr(op_writes, "_reached", stop)
    with pytest.raises(KeyboardInterrupt):
        write(ops)
    assert snapshot(ops) == old and not (ops / "demo").exists()


def test_sigkill_after_any_step_of_a_write_or_of_its_recovery_leaves_the_old_tree_or_the_new(tmp_path):
    """A forked child killed after each step (tests/unit/registry/op_writes_kill.py): the next writer's recovery
    gives back exactly the old tree, with no empty folder and no temporary, and the write then runs whole; killed
    after its commit, the tree is the new one. A recovery killed after any of its own steps recovers when run again."""
    proc = subprocess.run([sys.executable, "-m", "tests.unit.registry.op_writes_kill", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    reports = [json.loads(line) for line in proc.stdout.splitlines()]
    writes = [r for r in reports if r["kill"] == "write"]
    recoveries = [r for r in reports if r["kill"] == "recovery"]
    assert len(writes) == 2 + 2 * len(NEW) + 1 and len(recoveries) == len(NEW) + 2, [r["step"] for r in reports]
    assert all(r["killed"] and r["empty"] == [] and r["leftovers"] == [] for r in reports), reports
    *before_commit, committed = writes
    assert committed["step"] == "journal removed" and committed["new"] and not committed["pending"]
    assert all(r["pending"] and r["old"] and r["rerun_new"] for r in before_commit), before_commit
    assert all(r["pending"] and r["recovered"] and r["old"] for r in recoveries), recoveries
