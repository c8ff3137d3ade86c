"""%%cuda_jit when the disk says no: one line naming the path and what to do, and the old file kept.

Read-only faults are real (a tmpfs remounted read-only, where root allows; skipped otherwise).
"""
from __future__ import annotations

import re
import shutil

import pytest
from IPython.core.error import UsageError

from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels.registry import spec
from tests.disk_faults import remount_read_only, tmpfs
from tests.unit.notebook.conftest import NO_GPU
from tests.unit.toolchain.race_worker import race_body

needs_compilers = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                     reason="compiling a cell needs g++ and nvcc")


@pytest.fixture
def no_device(monkeypatch):
    monkeypatch.setattr(jit, "available", lambda device=None: spec.Availability(False, NO_GPU))


def _magics(shell):
    return shell.magics_manager.registry["CudaJitMagics"]


def test_a_read_only_csrc_is_one_line_and_keeps_the_saved_cell(shell, tmp_path):
    with tmpfs(tmp_path / "ro_csrc") as csrc:
        saved = csrc / "race" / "cell.cu"
        saved.parent.mkdir()
        saved.write_text("// the cell as it was\n")
        remount_read_only(csrc)
        _magics(shell).csrc_dir = str(csrc)
        with pytest.raises(UsageError) as err:
            shell.run_cell_magic("cuda_jit", "cell --group race", race_body("ro"))
        assert saved.read_text() == "// the cell as it was\n"
    message = str(err.value)
    assert "\n" not in message and f"cannot save the cell to {saved}" in message
    assert "read-only" in message.lower() and "csrc_dir" in message


@needs_compilers
def test_a_csrc_that_is_a_symlink_works_and_is_shown_as_csrc(shell, tmp_path, no_device, capsys):
    elsewhere = tmp_path / "cells_on_another_disk"
    elsewhere.mkdir()
    link = tmp_path / "project" / "csrc"
    link.parent.mkdir()
    link.symlink_to(elsewhere)
    _magics(shell).csrc_dir = str(link)
    shell.run_cell_magic("cuda_jit", "cell --group race", race_body("linked"))
    assert re.search(r"built in [\d.]+ s .*saved csrc/race/cell\.cu", capsys.readouterr().out)
    assert (elsewhere / "race" / "cell.cu").read_text() == race_body("linked")


def test_a_csrc_symlink_to_nothing_is_one_line(shell, tmp_path):
    link = tmp_path / "project" / "csrc"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "gone")
    _magics(shell).csrc_dir = str(link)
    with pytest.raises(UsageError) as err:
        shell.run_cell_magic("cuda_jit", "cell --group race", race_body("dangling"))
    assert "\n" not in str(err.value)
    assert f"{link} is a symlink to {tmp_path / 'gone'}, which is not a folder" in str(err.value)


@needs_compilers
def test_a_read_only_build_cache_is_one_line_naming_the_cache(shell, tmp_path, no_device, monkeypatch):
    with tmpfs(tmp_path / "ro_cache") as cache:
        monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(cache))
        remount_read_only(cache)
        with pytest.raises(UsageError) as err:
            shell.run_cell_magic("cuda_jit", "cell --group race", race_body("ro-cache"))
    message = str(err.value)
    assert "\n" not in message and str(cache) in message and "RAPID_LLM_CACHE_DIR" in message
