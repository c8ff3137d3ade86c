"""promote() is all or nothing under SIGKILL after any of its steps (tests/unit/toolchain/promote_kill.py kills it).

After each kill the package copy is exactly the old tree once recovered (no empty folder, no journal, no
temporary), or exactly the new one when the kill came after the commit; a promote run again then completes,
also straight after a kill (it recovers first); and a fresh interpreter that reads the package rolls a dead
promote back before it imports anything from the folder.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("mode, files", [("new", 5), ("replace", 1)])
def test_promote_killed_after_any_step_leaves_the_old_tree_or_the_new(tmp_path, mode, files):
    proc = subprocess.run([sys.executable, "-m", "tests.unit.toolchain.promote_kill", str(tmp_path), mode], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    reports = [json.loads(line) for line in proc.stdout.splitlines()]
    kills = [r for r in reports if "reader" not in r]
    # the journal (its temporary, then in place), each file (its temporary, then in place), the commit
    assert len(kills) == 2 + 2 * files + 1, [r["step"] for r in kills]
    assert all(r["killed"] and r["empty"] == [] and r["leftovers"] == [] for r in kills), kills
    *before_commit, committed = kills
    assert committed["step"] == "journal removed" and committed["new"] and not committed["pending"]
    assert all(r["pending"] and r["old"] for r in before_commit), before_commit
    assert all(r["rerun_new"] and r["promote_recovers"] for r in kills), kills
    if mode == "new":
        (reader,) = [r for r in reports if "reader" in r]
        assert reader["pending"] and reader["step"].endswith("/__init__.py written")
        package_file, has_twice = reader["reader"]
        assert package_file.startswith(str(tmp_path)) and has_twice == "False"  # the copy, rolled back on reading
        assert reader["old"] and reader["empty"] == [] and reader["leftovers"] == []
