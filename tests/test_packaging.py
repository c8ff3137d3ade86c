"""A wheel carries what the package reads at run time: the shipped figures dispatch ranks by, and the sources."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rapid_llm.kernels.dispatch import measurements
from rapid_llm.kernels import platform

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out, src = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):  # built from a copy: a build writes build/ beside its sources
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "rapid_llm", src / "rapid_llm", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(out), str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"pip could not build a wheel here: {proc.stderr.strip().splitlines()[-1:]}")
    return next(out.glob("rapid_llm-*.whl"))


def test_the_wheel_carries_the_shipped_figures_and_sources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in measurements.committed_results():
        assert f"rapid_llm/kernels/results/{path.name}" in names
    for path in platform.SHIPPED_CU.rglob("*"):
        if path.suffix in (".cu", ".cuh", ".h", ".cpp"):
            assert f"rapid_llm/kernels/shipped_cu/{path.relative_to(platform.SHIPPED_CU).as_posix()}" in names
    assert {"rapid_llm/kernels/build/fastpath/fastcall.c", "rapid_llm/kernels/build/fastpath/fastcall_dispatch.inc"} <= names
