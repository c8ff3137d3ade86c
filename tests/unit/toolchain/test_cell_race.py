"""Same-named cells in several processes on one build cache: every process builds its own cell, and every entry
holds the binary of the source its key names.

Each process runs ``%%cuda_jit cell`` once per round (tests/unit/toolchain/race_worker.py): half share one body
per round (same content: one key, one build, the others load it), half run bodies of their own; all save to the
same csrc/race/cell.cu. The bodies compile a marker into the host code and one into the device code, so a
binary says which source it was built from, and on a GPU each bound function is run: each cell multiplies by
a factor of its own. On a GPU machine the race is 8 processes x 20 rounds, every cell bound and run; CPU CI
takes the compile path with 4 x 9 (every body built or loaded three times; 36 cells, 9 contents).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.toolchain import cache

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                reason="compiling a cell needs g++ and nvcc")

PROCESSES, ROUNDS = (8, 20) if torch.cuda.is_available() else (4, 9)
REPO = Path(__file__).resolve().parents[3]
_HOST = re.compile(rb"RLHOST:([\w-]+):END")
_DEVICE = re.compile(rb"RLDEV:([\w-]+):END")
_SOURCE = re.compile(r"marked ([\w-]+)")
#: Far above what the race takes (about 20 s on two cores); only a hang gets there.
HANG_GUARD_S = 600


def _marks(pattern: re.Pattern, data: bytes) -> set[str]:
    return {m.decode() for m in pattern.findall(data)}


def test_same_named_cells_in_several_processes_never_mix(tmp_path):
    env = dict(os.environ, RAPID_LLM_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    outs = [tmp_path / f"proc{i}.json" for i in range(PROCESSES)]
    procs = [subprocess.Popen([sys.executable, "-m", "tests.unit.toolchain.race_worker", str(i), str(ROUNDS),
                               str(out)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
             for i, out in enumerate(outs)]
    for proc in procs:
        _, err = proc.communicate(timeout=HANG_GUARD_S)
        assert proc.returncode == 0, err[-3000:]
    records = [r for out in outs for r in json.loads(out.read_text())]
    assert len(records) == PROCESSES * ROUNDS
    failed = [r for r in records if "error" in r]
    assert not failed, f"{len(failed)} failed builds; the first:\n{failed[0]['error']}"
    foreign = [r for r in records
               if _marks(_HOST, Path(r["binary"]).read_bytes()) != {r["mark"]}
               or _marks(_DEVICE, Path(r["binary"]).read_bytes()) != {r["mark"]}]
    assert not foreign, f"{len(foreign)} of {len(records)} cells got another cell's build: {foreign[:3]}"
    ran = [r["computed_own_cell"] for r in records if "computed_own_cell" in r]  # where a GPU bound them
    assert ran in ([], [True] * len(records)), f"{ran.count(False)} bound functions computed another cell"
    entries = [m.parent for m in (tmp_path / "cache" / "jit").glob(f"cell_*/{cache.MANIFEST}")]
    assert len(entries) == len({r["mark"] for r in records})  # one entry per content, whatever the races
    for entry in entries:
        source = (entry / cache.SOURCES_DIR / "cell.cu").read_text()
        binary = (entry / json.loads((entry / cache.MANIFEST).read_text())["binary"]).read_bytes()
        (meant,) = _SOURCE.findall(source)
        assert _marks(_HOST, binary) == _marks(_DEVICE, binary) == {meant}, entry
