"""Every shipped .cu row compiles for every supported GPU architecture, checked without a GPU.

CPU CI compiles every shipped row for the oldest supported arch (an A100's 8.0), and the GPU suite for
every one (8.0, an H100/H200's 9.0, a B200's 10.0: tests/gpu/unit/toolchain/test_cu_compile_archs.py), so
a source that does not compile for one of them never lands, even when nobody built it on that GPU. ``jit.compile_check`` runs the fast path's own host pass, device
pass per arch and link, in a temporary directory, and loads nothing.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain.fastpath.device import arch_name
from rapid_llm.notebook.compile_errors import cell_diagnostics

#: Every shipped .cu: a row by its header line, or behind a row its op declares (moe_topk_gate's, whose outputs fit no
#: out rule).
SHIPPED_ROWS = sorted(platform.OPS_DIR.glob("*/*/*.cu"))

needs_toolchain = pytest.mark.skipif(
    shutil.which("g++") is None or not platform.supported_archs(),
    reason="compile checks need g++ and nvcc (not found, or it targets none of "
           f"{', '.join(platform.SUPPORTED_ARCHS)}); put the CUDA toolkit's bin on PATH or set CUDA_HOME",
)

#: A fast-path source whose device code misses a semicolon on BROKEN_LINE (the brace on the same line, so
#: every compiler reports that line, not the next one).
BROKEN = """\
#include "common/rapid_llm.cuh"

#if RL_DEVICE
__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value }
#endif

#if RL_HOST
__global__ void fill_kernel(float* out, float value);
void fill(rl::Tensor out) { rl::launch(fill_kernel, 1, 32, 0, out.data<float>(), 1.0f); }
RL_EXPORT(fill)
#endif
"""
BROKEN_LINE = 4


def _write(tmp_path: Path, text: str, name: str = "broken.cu") -> Path:
    src = tmp_path / name
    src.write_text(text)
    return src


def test_there_are_shipped_rows_to_check():
    assert len(SHIPPED_ROWS) >= 5, SHIPPED_ROWS




def check_compiles(source: Path, archs: list[str], flags: tuple[str, ...] = ("-O3",)) -> None:
    """The host pass and the link once (host code is the same for every arch), the device pass per arch, as a
    build for several would run; a failure names the arch."""
    before = sorted(source.parent.iterdir())
    report = jit.compile_check(source, archs, extra_cuda_cflags=flags)
    assert list(report.kernels) == archs, report.kernels
    assert all(n > 0 for n in report.kernels.values()), f"{source.name} launches no kernel: {report.kernels}"
    assert sorted(source.parent.iterdir()) == before, "the check wrote beside the shipped source"


@needs_toolchain
@pytest.mark.parametrize("source", SHIPPED_ROWS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_row_compiles_for_the_oldest_arch(source: Path):
    """CPU CI compiles each row for the oldest supported arch this nvcc targets (an intrinsic a newer GPU has is
    the usual break), with NVVM's and ptxas's optimisers off as every build without a GPU in this suite
    (tests/conftest.py); tests/gpu/unit/toolchain/test_cu_compile_archs.py compiles every supported arch with the
    build's own flags."""
    check_compiles(source, list(platform.supported_archs()[:1]))


@needs_toolchain
def test_a_broken_source_names_the_arch_and_the_line(tmp_path):
    src = _write(tmp_path, BROKEN)
    arch = platform.supported_archs()[0]
    with pytest.raises(jit.BuildError) as info:
        jit.compile_check(src)
    message = str(info.value)
    assert "device pass" in message and f"for {arch_name(arch)}" in message, message
    assert f"broken.cu({BROKEN_LINE}): error" in info.value.log, info.value.log  # nvcc's and NVRTC's form
    diagnostics, count = cell_diagnostics(info.value.log, src)  # what the notebook shows: the cell's own line
    assert count >= 1 and any(f"cell line {BROKEN_LINE + 1}" in d for d in diagnostics), diagnostics
    assert sorted(tmp_path.iterdir()) == [src], "the check wrote beside the source"


@needs_toolchain
def test_a_broken_host_pass_keeps_the_line(tmp_path):
    fixed = BROKEN.replace("= value }", "= value; }")
    host_line = next(i for i, line in enumerate(fixed.splitlines(), 1) if line.startswith("void fill"))
    src = _write(tmp_path, fixed.replace("1.0f); }", "1.0f) }"))  # the launch's semicolon, in host code
    with pytest.raises(jit.BuildError, match="host pass") as info:
        jit.compile_check(src)
    assert f"broken.cu:{host_line}:" in info.value.log, info.value.log


@needs_toolchain
def test_each_arch_is_compiled_not_just_the_local_one(tmp_path):
    """Hopper's griddepcontrol compiles for 9.0 and fails for 8.0: the check must report 8.0."""
    if not {"8.0", "9.0"} <= set(platform.supported_archs()):
        pytest.skip("needs an nvcc that targets 8.0 and 9.0")
    text = BROKEN.replace("= value }", '= value; asm volatile("griddepcontrol.wait;"); }')
    src = _write(tmp_path, text, "hopper_only.cu")
    assert jit.compile_check(src, ("9.0",)).kernels == {"9.0": 1}
    with pytest.raises(jit.BuildError, match="sm_80"):
        jit.compile_check(src, ("9.0", "8.0"))


def test_a_torch_header_source_is_refused_clearly(tmp_path):
    src = _write(tmp_path, "#include <torch/extension.h>\nvoid f() {}\n", "seed.cu")
    assert jit.default_builder(src) == "torch"
    with pytest.raises(ValueError, match=r"seed\.cu includes torch's headers.*cpp_extension.*fast-path sources only"):
        jit.compile_check(src, ("9.0",))

