"""profile(): ncu's CSV parsed from a captured H200 run, and the one-line answers where nothing can be measured.
profile() of real rows, and inspect()'s occupancy against the CUDA driver's, are in
tests/gpu/unit/inspection/test_profiling.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.inspection.profiling import KernelProfile, Profile
from rapid_llm.kernels.inspection import profiling

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SAMPLE = SAMPLES / "ncu_scale_rows_h200.csv"  # ncu --metrics ... over three rows, without ranges


def _kernels() -> list[KernelProfile]:
    return profiling.kernel_profiles(profiling.parse_ncu_csv(SAMPLE.read_text()))


def test_ncu_csv_gives_each_kernel_its_metrics_without_the_units_row_or_ncu_lines():
    vec, triton, torch_mul = _kernels()
    assert vec.kernel.startswith("void scale_vec_kernel<__nv_bfloat16>") and triton.kernel == "_scale_kernel"
    assert (vec.time_ns, vec.block, vec.grid, vec.registers) == (17600.0, "(256, 1, 1)", "(528, 1, 1)", 40.0)
    assert vec.dram_read == 33_562_624 and vec.dram_bytes_per_s == pytest.approx(2.3948e12, rel=1e-4)
    assert (vec.achieved_occupancy, vec.theoretical_occupancy, vec.l2_hit_rate) == (44.71, 75.0, 50.21)
    assert torch_mul.sm_pct_of_peak == 20.76


def test_top_stalls_are_the_largest_real_stall_reasons():
    vec, triton, _ = _kernels()
    assert [r for r, _ in vec.top_stalls()] == ["long_scoreboard", "wait", "imc_miss"]  # "selected" is issuing
    assert triton.top_stalls(1) == [("long_scoreboard", 38.37)]


def test_rows_come_from_the_nvtx_range_and_the_copy_is_the_roofline():
    # what profile("scale", x, 1.7, rows=["jit/scale", "triton/scale"]) read back from ncu on an H200
    kernels = profiling.kernel_profiles(profiling.parse_ncu_csv((SAMPLES / "ncu_profile_scale_h200.csv").read_text()))
    assert [k.row for k in kernels] == ["jit/scale", "triton/scale", profiling.COPY_RANGE]
    result = Profile("scale", kernels[:2], kernels[2], bytes_moved=2 * 2**25)
    assert result.of_copy(kernels[0]) == pytest.approx(0.93, abs=0.005)
    text = str(result).splitlines()
    assert text[0] == ("profile(scale): 2 kernels under Nsight Compute; the call moves 64.0 MiB, "
                       "the copy roofline moves the same")
    assert text[1].split()[:3] == ["row", "kernel", "time"]
    assert text[2].startswith("jit/scale ") and " 93% " in text[2] and "long_scoreboard 24.8" in text[2]
    assert "scale_vec_kernel<__nv_bfloat16>" in text[2] and "(T1" not in text[2]
    assert text[4].startswith("copy roofline ") and " 100% " in text[4]


@pytest.mark.parametrize("log, says", [
    ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters",
     "NVreg_RestrictProfilingToAdminUsers=0"),
    ("==PROF== Disconnected\n==WARNING== No kernels were profiled.", "saw no kernel launch"),
    ("==ERROR== The application returned an error code (1).", "ncu: The application returned an error code (1)."),
    ("all fine", None),
])
def test_why_ncu_measured_nothing_is_one_line(log, says):
    found = profiling.ncu_problem(log)
    assert found is None if says is None else says in found


def test_without_ncu_or_without_a_gpu_profile_says_so_in_one_line(monkeypatch):
    x = torch.ones(8)
    monkeypatch.setattr(profiling, "ncu_path", lambda: None)
    result = profiling.profile("scale", x, 2.0)
    assert str(result).startswith("profile(scale): Nsight Compute (ncu) is not installed here")
    assert len(str(result).splitlines()) == 1
    monkeypatch.setattr(profiling, "ncu_path", lambda: "/usr/bin/true")
    assert str(profiling.profile("jit/scale", x, 2.0)) == \
        "profile(jit/scale): profile needs CUDA tensors (Nsight Compute measures GPU kernels)"


def test_profile_of_neither_an_op_nor_a_row_names_the_problem():
    from rapid_llm.kernels.registry.spec import RegistryError

    with pytest.raises(RegistryError, match="nonexistent"):
        profiling.profile("nonexistent", torch.ones(2))


def test_against_compile_profiles_the_floor_of_the_op():
    """torch.compile is given the op's native floor: the kernels Inductor makes for the same op."""
    from rapid_llm.kernels.registry import spec

    assert spec.native_row("rms_norm").name == "native/rms_norm"
    assert spec.native_row("jit/rms_norm") is None  # a row name is no op
    assert profiling.COMPILE_RANGE.format("native/rms_norm") == "torch.compile(native/rms_norm)"
