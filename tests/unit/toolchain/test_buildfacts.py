"""Build facts: ptxas's report parsed from captured output, occupancy from it, and inspect() on a shipped row."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.toolchain import buildfacts
from rapid_llm.kernels.inspection import inspector as inspection
from rapid_llm.kernels.toolchain.buildfacts import KernelFacts

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
VEC4, VEC2 = "_Z19rms_norm_vec_kernelIfLi4EEvPT_PKS0_S3_lif", "_Z19rms_norm_vec_kernelIfLi2EEvPT_PKS0_S3_lif"
SCALE = "_Z16scale_vec_kernelIfEvPT_PKS0_fl"


def test_nvrtc_report_is_parsed_per_kernel():
    facts = buildfacts.parse_ptxas((SAMPLES / "ptxas_nvrtc.log").read_text(), {VEC4: "rms_norm_vec_kernel<float, 4>"})
    assert set(facts) == {VEC4, VEC2}
    assert facts[VEC4] == KernelFacts(VEC4, "rms_norm_vec_kernel<float, 4>", "sm_90", registers=60, barriers=1,
                                      smem_static=64)
    assert facts[VEC2].registers == 40 and facts[VEC2].label == VEC2


def test_spills_from_nvcc_are_parsed_and_called_out():
    facts = buildfacts.parse_ptxas((SAMPLES / "ptxas_nvcc_maxrregcount16.log").read_text())
    f = facts[SCALE]
    assert (f.registers, f.stack_frame, f.spill_stores, f.spill_loads) == (24, 80, 80, 96)
    assert buildfacts.notable(facts) == [f"{SCALE}: 80 B spill stores, 96 B spill loads per thread"]


@pytest.mark.parametrize("registers, smem, threads, percent, limiter", [
    (32, 64, 256, 100, "warps"),
    (40, 64, 256, 75, "registers"),      # 1280 registers a warp: 6 blocks of 8 warps
    (60, 64, 256, 50, "registers"),
    (128, 0, 256, 25, "registers"),
    (32, 100_000, 256, 25, "shared memory"),  # two blocks of ~98 KiB fit in 228 KiB
    (32, 0, 32, 50, "blocks"),           # 32 one-warp blocks at most
])
def test_occupancy_follows_the_sm90_rules(registers, smem, threads, percent, limiter):
    occ = buildfacts.occupancy(KernelFacts("k", arch="sm_90a", registers=registers, smem_static=smem), threads)
    assert (round(100 * occ.fraction), occ.limiter) == (percent, limiter), str(occ)


def test_low_occupancy_is_notable_and_unknown_archs_are_refused():
    assert "25% occupancy" in buildfacts.notable({"k": KernelFacts("k", arch="sm_90", registers=128)})[0]
    with pytest.raises(ValueError, match="no occupancy limits for sm_70"):
        buildfacts.occupancy(KernelFacts("k", arch="sm_70", registers=32), 256)


@pytest.fixture
def optimised_device_pass(monkeypatch):
    """The build's own flags, without the suite's unoptimised device pass on a machine without a GPU
    (tests/conftest.py): unoptimised, every device function is a function of its own in ptxas's report. The build
    cache keys on the flags, so this build and the suite's never share an entry."""
    monkeypatch.delenv("NVCC_APPEND_FLAGS", raising=False)


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                    reason="the fast path needs g++ and nvcc (the device pass) to build the row")
def test_inspect_of_a_shipped_row_shows_its_kernels_and_code(monkeypatch, optimised_device_pass):
    from rapid_llm.kernels import platform

    find = platform.cuda_tool  # as on a machine without the SASS tools
    monkeypatch.setattr(platform, "cuda_tool", lambda tool: None if tool in ("nvdisasm", "cuobjdump") else find(tool))
    report = inspection.inspect("jit/scale")
    assert len(report.facts) == 6 and all(f.registers > 0 for f in report.facts.values())
    assert any("SASS: neither nvdisasm nor cuobjdump is installed here" in n for n in report.notes)
    vec = next(s for s, f in report.facts.items() if f.label.startswith("void scale_vec_kernel<float>"))
    if report.ptx is not None:  # NVRTC's pass keeps the PTX: the 128-bit streaming loads are there to see
        assert "ld.global.cs.v4" in report.code(vec, "ptx")
    assert "registers" in str(report).splitlines()[1]


def test_cuda_tools_are_found_beside_nvcc_when_not_on_path(monkeypatch, tmp_path):
    from rapid_llm.kernels import platform

    (tmp_path / "nvcc").touch()
    (tmp_path / "ncu").touch()
    for variable in ("CUDA_HOME", "CUDA_PATH"):  # a toolkit chosen on purpose comes first: not this case
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(shutil, "which", lambda tool: str(tmp_path / "nvcc") if tool == "nvcc" else None)
    assert platform.cuda_tool("ncu") == str(tmp_path / "ncu")
    assert platform.cuda_tool("no-such-tool") is None


def test_rows_without_build_facts_say_why(monkeypatch):
    assert "build facts exist for JIT, Triton, Gluon and CuTe rows" in inspection.inspect("native/scale").notes[0]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "Triton's interpreter runs it here" in inspection.inspect("triton/scale").notes[0]


def test_a_gluon_row_without_a_gpu_or_without_gluon_says_why(monkeypatch):
    """Gluon ignores the interpreter: on CPU there is nothing compiled and no GPU to compile on; without Gluon,
    the probe's reason (its module is never imported)."""
    from rapid_llm.kernels.registry.spec import Availability
    from rapid_llm.kernels.toolchain import gluon_support

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if gluon_support.installed() and not torch.cuda.is_available():
        assert "no compiled Gluon kernel in this process" in inspection.inspect("gluon/rms_norm").notes[0]
    missing = Availability(False, "triton is not installed (Gluon ships with Triton >= 3.6: pip install triton)")
    monkeypatch.setattr(gluon_support, "installed", lambda: missing)
    assert inspection.inspect("gluon/rms_norm").notes == [f"gluon/rms_norm: {missing.reason}"]


class _FakeCompiled:
    """What Triton 3.6 keeps per compiled specialisation (the attributes read; seen on an H200)."""

    class metadata:  # noqa: N801 - Triton's attribute name
        name, num_warps, shared = "_scale_kernel", 4, 0

        class target:  # noqa: N801
            arch = 90

    n_regs, n_spills, n_max_threads, asm = 40, 3, 1024, {"ptx": ".visible .entry _scale_kernel(", "cubin": b""}


def test_triton_specialisations_become_build_facts_at_their_own_block_size():
    from rapid_llm.kernels.inspection import triton_facts

    class Fn:
        device_caches = {0: ({"[('*bf16', 'D'), ('*bf16', 'D'), ('fp32', None), ('i32', 'D'), ('constexpr', 4096)]"
                              "{'debug': False, 'instrumentation_mode': ''}": _FakeCompiled()}, None, None, None, None)}

    [k] = triton_facts.compiled_kernels(Fn())
    f = k.facts
    assert f.symbol == "_scale_kernel[*bf16,*bf16,fp32,i32,4096]"
    assert f.label == "_scale_kernel(*bf16, *bf16, fp32, i32, 4096)"
    assert (f.arch, f.registers, f.threads_per_block, f.spill_stores, f.stack_frame) == ("sm_90", 40, 128, 12, 12)
    assert f.max_threads == 1024
    assert k.ptx.startswith(".visible") and "12 B spill stores" in buildfacts.notable({f.symbol: f})[0]


def test_a_notebook_launchers_kernels_are_the_jit_functions_it_names():
    """A cell's Gluon or Triton row has a function as its target: inspect reads the kernels it launches."""
    from rapid_llm.kernels.inspection import triton_facts

    class Kernel:
        device_caches, fn = {}, None

    scope = {"kernel": Kernel(), "other": Kernel(), "helper": len}
    exec("def launch(x):\n    return kernel[(helper(x),)](x)\n", scope)
    assert triton_facts.jit_functions(scope["launch"]) == [scope["kernel"]]


def test_sass_with_lineinfo_asks_nvdisasm_first_and_names_cell_lines(monkeypatch, tmp_path):
    called = []

    class Done:
        returncode, stdout = 0, '.text.k:\n        //## File "/p/csrc/elementwise/x.cu", line 9\n  /*0000*/ STG.E [R2], R5 ;\n'

    monkeypatch.setattr(inspection.platform, "cuda_tool", lambda tool: f"/bin/{tool}")
    monkeypatch.setattr(inspection.subprocess, "run", lambda cmd, **kw: called.append(cmd[0]) or Done())
    inspection.sass_of(tmp_path / "k.cubin")
    inspection.sass_of(tmp_path / "k.cubin", lineinfo=True)
    assert called == ["/bin/cuobjdump", "/bin/nvdisasm"]  # cuobjdump prints no source lines; nvdisasm -g does
    sass = inspection.annotate_cell_lines(Done.stdout, Path("/p/csrc/elementwise/x.cu"))
    assert '//## File "/p/csrc/elementwise/x.cu", line 9 (cell line 10)' in sass
    shipped = Path("/site/rapid_llm/kernels/ops/elementwise/x/x.cu")  # a shipped source has no cell lines
    assert "cell line" not in inspection.annotate_cell_lines(Done.stdout.replace("/p/", "/site/rapid_llm/kernels/"),
                                                             shipped)


def test_nvdisasm_line_notes_of_a_cell_become_cell_lines():
    sass = (SAMPLES / "nvdisasm_lineinfo_h200.sass").read_text()
    cell = Path("/tmp/pytest-of-root/pytest-0/test_sass_of_a_lineinfo_cell_n0/csrc/elementwise/scale_lines.cu")
    annotated = inspection.annotate_cell_lines(sass, cell)
    block = annotated.split('scale_lines.cu", line 10 (cell line 11)')[1].split("//##")[0]
    assert "LDG.E.CONSTANT" in block and "STG.E" in block  # out[idx] = in[idx] * factor: file line 10
    assert set(inspection.split_by_kernel(annotated, "sass")) == {"_Z12scale_kernelIfEvPT_PKS0_fl"}


def test_cuobjdump_listing_splits_at_each_function():
    pieces = inspection.split_by_kernel((SAMPLES / "cuobjdump_scale_scalar_h200.sass").read_text(), "sass")
    assert list(pieces) == ["_Z19scale_scalar_kernelI13__nv_bfloat16EvPT_PKS1_fl",
                            "_Z19scale_scalar_kernelI6__halfEvPT_PKS1_fl"]
    for piece in pieces.values():
        assert piece.count("Function :") == 1 and "STG.E.U16" in piece and "EXIT" in piece


def test_cuda_home_comes_first_for_every_tool(monkeypatch, tmp_path):
    """One search order for nvcc and the other toolkit programs: a toolkit named in $CUDA_HOME wins over PATH."""
    from rapid_llm.kernels import platform

    (tmp_path / "bin").mkdir()
    for tool in ("nvcc", "ncu"):
        (tmp_path / "bin" / tool).touch()
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/bin/{tool}")
    assert platform.nvcc_path() == str(tmp_path / "bin" / "nvcc") and platform.cuda_tool("ncu") == str(tmp_path / "bin" / "ncu")
    assert platform.cuda_tool("cuobjdump") == "/usr/bin/cuobjdump"  # not in that toolkit: PATH next
