"""profile(): ncu's CSV parsed from a captured H200 run, and the one-line answers where nothing can be measured;
on a GPU (marked gpu), profile() of scale's rows and inspect()'s occupancy against the CUDA driver's.

    python -m pytest tests/unit/inspection/test_profiling.py -m gpu -s
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.inspection.profiling import KernelProfile, Profile
from rapid_llm.kernels.inspection import inspector as inspection, profiling

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


# ------------------------------------------------------------------ on a GPU (marked gpu)
# On a GPU with Nsight Compute: profile() of scale's rows, and inspect()'s occupancy against the CUDA driver's.

@pytest.mark.gpu
@pytest.mark.skipif(profiling.ncu_path() is None, reason="needs Nsight Compute (ncu)")
def test_profile_of_scale_gives_each_row_its_kernels_against_the_copy_roofline():
    x = torch.randn(1 << 24, device="cuda", dtype=torch.bfloat16)
    result = profiling.profile("scale", x, 1.7, rows=["jit/scale", "native/scale"])
    print(result)
    assert result.problem is None, str(result)
    assert [k.row for k in result.kernels] == ["jit/scale", "native/scale"]
    assert result.copy is not None and result.bytes_moved == 4 * x.numel()
    for k in result.kernels:
        assert 0.2 < result.of_copy(k) < 1.5 and 0 < k.achieved_occupancy <= 100 and k.top_stalls()
        assert k.dram_read >= x.nbytes * 0.9  # a flushed cache: the input comes from DRAM


@pytest.mark.gpu
@pytest.mark.parametrize("row", ["jit/scale", "triton/scale"])
def test_occupancy_from_the_rules_is_what_the_driver_says(row):
    report = inspection.inspect(row)
    print(report)
    assert report.facts and set(report.driver_blocks) == set(report.facts), report.notes
    for symbol, blocks in report.driver_blocks.items():
        assert report.occupancy(symbol).blocks_per_sm == blocks, (symbol, report.notes)
        assert report.facts[symbol].max_threads >= report.block_size(symbol)  # the driver's largest block


def test_against_compile_profiles_the_floor_of_the_op():
    """torch.compile is given the op's native floor: the kernels Inductor makes for the same op."""
    from rapid_llm.kernels.registry import spec

    assert spec.native_row("rms_norm").name == "native/rms_norm"
    assert spec.native_row("jit/rms_norm") is None  # a row name is no op
    assert profiling.COMPILE_RANGE.format("native/rms_norm") == "torch.compile(native/rms_norm)"


@pytest.mark.gpu
@pytest.mark.skipif(profiling.ncu_path() is None, reason="needs Nsight Compute (ncu)")
def test_profile_against_compile_puts_inductors_kernel_beside_the_row():
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    result = profiling.profile("rms_norm", x, w, 1e-6, rows=["jit/rms_norm"], against_compile=True)
    print(result)
    assert result.problem is None, str(result)
    assert [k.row for k in result.kernels] == ["jit/rms_norm", "torch.compile(native/rms_norm)"]
    assert all(k.time_ns > 0 for k in result.kernels)


@pytest.mark.gpu
def test_profile_one_call_runs_the_call_once_in_the_range_and_returns_its_result():
    """The benchmark scripts' ncu helper calls fn exactly once, with its arguments, and hands back its result."""
    x = torch.arange(8, device="cuda", dtype=torch.float32)
    calls = []

    def double(t, scale=1.0):
        calls.append(1)
        return t * 2 * scale

    got = profiling.profile_one_call(double, "rapid_llm.test|double", x, scale=0.5)
    assert len(calls) == 1
    assert torch.equal(got, x)
