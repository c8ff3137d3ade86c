"""A wheel carries what the package reads at run time: the shipped figures dispatch ranks by, and the sources."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from rapid_llm.kernels.toolchain.fastpath import binding
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
    kernels = platform.PACKAGE_DIR / "kernels"
    assert measurements.committed_results()
    for path in measurements.committed_results():
        assert f"rapid_llm/kernels/{path.relative_to(kernels).as_posix()}" in names
    for path in (*platform.OPS_DIR.rglob("*"), *platform.CUDA_INCLUDE.rglob("*")):
        if path.suffix in (".cu", ".cuh", ".h", ".cpp"):
            assert f"rapid_llm/kernels/{path.relative_to(kernels).as_posix()}" in names
    assert {f"rapid_llm/kernels/{path.resolve().relative_to(kernels).as_posix()}" for path in binding.SOURCES} <= names


def test_a_wheel_installed_in_a_new_venv_ranks_by_its_own_figures_from_any_directory(wheel, tmp_path):
    """Not editable, not the checkout: the figures dispatch ranks by come from the installed package's data."""
    venv = tmp_path / "venv"
    # --system-site-packages: torch comes from this interpreter; rapid_llm only from the wheel.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if sys.prefix != sys.base_prefix:
        # This interpreter is itself a venv (a GPU image's torch lives in one): --system-site-packages reaches the
        # base Python's packages, not ours, so a .pth line adds ours, after the new venv's own.
        ours = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
        (Path(site) / "this_interpreters_packages.pth").write_text("\n".join(ours) + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target", site,
                           str(wheel)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"pip could not install the wheel here: {proc.stderr.strip().splitlines()[-1:]}")
    elsewhere = tmp_path / "another_project"
    (elsewhere / "benchmarks" / "results").mkdir(parents=True)
    (elsewhere / "pyproject.toml").write_text("[project]\nname = 'another'\n")  # a project root that is not ours
    code = (
        "import rapid_llm, rapid_llm.kernels as K\n"
        "from rapid_llm.kernels.dispatch import measurements\n"
        "print(rapid_llm.__file__)\n"
        "from rapid_llm.kernels.toolchain.digests import code_digest\n"
        "digest = code_digest(K.get_row('jit/rms_norm'), 'NVIDIA H100 80GB HBM3')  # that kind's pinned variant\n"
        "fig = measurements.lookup('rms_norm', 'jit/rms_norm', 'NVIDIA H100 80GB HBM3', 'bf16', 13, digest)\n"
        "print(fig.median_us > 0, fig.source)\n"
        "print(sorted(measurements.committed_label(p) for p in measurements.committed_results()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a PYTHONPATH naming the checkout would win
    out = subprocess.run([str(python), "-c", code], cwd=elsewhere, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    location, figure, files = out.stdout.splitlines()
    assert location.startswith(site), f"imported {location}, not the installed wheel under {site}"
    assert figure == "True committed norm/rms_norm/figures/nvidia_h100_80gb_hbm3.json", figure
    shipped = sorted(measurements.committed_label(p) for p in measurements.committed_results())
    assert files == str(shipped)
