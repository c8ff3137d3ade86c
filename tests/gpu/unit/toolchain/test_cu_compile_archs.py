"""Every shipped .cu row compiles for every supported GPU architecture (CPU CI compiles the oldest only:
tests/unit/toolchain/test_cu_compile.py, whose check this runs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from rapid_llm.kernels import platform
from tests.unit.toolchain.test_cu_compile import SHIPPED_ROWS, check_compiles, needs_toolchain

pytestmark = pytest.mark.gpu


@needs_toolchain
@pytest.mark.parametrize("source", SHIPPED_ROWS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_row_compiles_for_every_supported_arch(source: Path):
    archs = [arch for arch in platform.SUPPORTED_ARCHS if arch in platform.supported_archs()]
    check_compiles(source, archs)
    missing = [arch for arch in platform.SUPPORTED_ARCHS if arch not in archs]
    if missing:
        pytest.skip(f"compiled for {', '.join(archs)}; this nvcc cannot target {', '.join(missing)} "
                    "(nvcc --list-gpu-arch): a newer CUDA toolkit can")
