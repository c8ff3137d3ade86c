"""Every defect .cu in tests/unit/verification/defects/ builds through the fast path, without a GPU.

The host pass, the device pass (NVRTC, else nvcc -cubin) and the link all run here; the launcher is
then called with CPU tensors, which its own checks refuse by name. What each kernel does on a GPU is
tests/gpu/unit/verification/test_defect_kernels.py's business. other_stream.cu reaches into the module's kernel table (the symbols
the builder writes), so a change there shows up here first.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.toolchain import jit

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                reason="the fast path needs g++ and the CUDA toolkit's headers (nvcc)")

DEFECTS = Path(__file__).resolve().parent / "defects"
SOURCES = sorted(DEFECTS.glob("*.cu"))


def test_every_defect_has_a_fixed_twin_and_a_readme_line():
    readme = (DEFECTS / "README.md").read_text()
    for src in SOURCES:
        assert f"`{src.name}`" in readme, f"{src.name} is missing from defects/README.md"
        first = src.read_text().splitlines()[0]
        assert first.startswith(("// DEFECT ", "// Fixed twin")), f"{src.name}: the first line names no defect"
        if first.startswith("// DEFECT "):
            twin = src.read_text().split("Fixed twin: ", 1)[1].split(".cu", 1)[0] + ".cu"
            assert (DEFECTS / twin).is_file(), f"{src.name} names a fixed twin {twin} that does not exist"


@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_builds_and_checks_its_arguments(src):
    module = jit.build_jit(f"defect_{src.stem}", src, builder="fast").module
    launcher = getattr(module, f"scale_{src.stem}")
    x = torch.ones(8)
    with pytest.raises(ValueError, match=rf"^scale_{src.stem}: CUDA tensors only"):
        launcher(torch.empty_like(x), x, 1.7)
