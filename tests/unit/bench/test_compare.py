"""compare() on CPU: verify first, interleaved pairs, the verdict per shape, the text, and bad input.

Timing on CPU is whatever it is, so nothing here asserts on a time or on a
verdict of measured samples; the verdict logic is checked on synthetic samples.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rapid_llm.bench.build_diff import BuildDiff, KernelDiff, pair_kernels
from rapid_llm.bench.compare import HEAD, Comparison, CompareError, ShapeResult, Side, compare
from rapid_llm.bench.launch_config import Launch, parse_trace
from rapid_llm.bench.paired_stats import FASTER, NO_DIFFERENCE, SLOWER, estimate
from rapid_llm.kernels.toolchain.buildfacts import KernelFacts, occupancy
from rapid_llm.kernels.inspection.sass_diff import diff as sass_diff
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec, register

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "sass_diff"
QUICK = dict(sizes=[4096], dtypes=["fp32"], seconds=1.0, min_pairs=5, max_pairs=40, repeats=2, warmup=1)
#: Where compare runs the rows: the GPU when there is one (both rows here run on either).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _wrong_scale(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    result = input * factor + 1  # off by one everywhere
    return result if out is None else out.copy_(result)


def test_native_against_triton_end_to_end():
    c = compare("native/scale", "triton/scale", **QUICK)
    assert (c.a.verdict, c.b.verdict) == ("pass", "pass")
    assert c.refused is None and len(c.shapes) == 1
    s = c.shapes[0]
    assert (s.dtype, s.numel, s.kind) == ("fp32", 4096, DEVICE)
    assert len(s.a_us) == len(s.b_us) == s.estimate.pairs >= 5
    assert s.verdict in (FASTER, SLOWER, NO_DIFFERENCE)
    assert c.a.digest and c.b.digest and c.a.digest != c.b.digest
    text = str(c)
    first = text.splitlines()[0]  # "on <the device's name>" (cpu, or the GPU's model)
    assert first.startswith("compare('scale') on ") and ": A = native/scale (working tree, source " in first
    assert "verified first: A pass, B pass" in text
    assert ("CPU numbers" in text) == (DEVICE == "cpu")
    assert "95% Student-t interval" in text
    assert "why (A -> B):" in text
    if DEVICE == "cpu":
        assert "Triton's interpreter runs it here" in text
        assert "needs a GPU" in text  # the launch configuration, said in one line
    else:
        assert "block 128x1x1" in text  # triton/scale's launch, read from the profiler
    d = c.to_dict()
    assert d["a"]["digest"] == c.a.digest and d["shapes"][0]["pairs"] == s.estimate.pairs


def test_the_same_row_twice_is_an_a_a_comparison():
    c = compare("native/scale", "native/scale", verify=False, why=False, **QUICK)
    assert c.a.verdict == c.b.verdict == "not verified"
    assert c.why is None and c.shapes[0].estimate.pairs >= 5


def test_a_side_that_fails_verify_is_not_timed():
    register(KernelSpec(name="external/scale_wrong", op="scale", backend="external", target=_wrong_scale,
                        devices=("cpu", "cuda"), golden=GoldenRecord(verified=True, baseline="native/scale")))
    c = compare("native/scale", "external/scale_wrong", why=False, **QUICK)
    assert c.a.verdict == "pass" and c.b.verdict.startswith("FAIL")
    assert c.shapes == [] and "B (external/scale_wrong) failed verify" in c.refused
    assert "not timed:" in str(c)
    assert c.b.report is not None and not c.b.report.passed


@pytest.mark.parametrize("kwargs, match", [
    (dict(a="native/scale", b="native/rms_norm"), "native/scale is a row of op 'scale' and native/rms_norm of op "
                                                  "'rms_norm'"),
    (dict(a="native/scale", b="triton/scale", dtypes=["fp64"]),
     r"compare\('scale'\): triton/scale does not take .fp64."),
    (dict(a="native/scale", b="triton/scale", sizes=[0]), r"compare\('scale'\): sizes are element counts"),
    (dict(a="native/scale", b="nope/scale"), "no row named 'nope/scale'"),
    pytest.param(dict(a="native/scale", b="jit/scale"), r"compare\('scale'\): jit/scale runs on cuda only",
                 marks=pytest.mark.skipif(DEVICE == "cuda", reason="a machine without CUDA refuses jit/scale")),
    (dict(a="native/scale", b="triton/scale", min_pairs=2), "min_pairs must be at least 5"),
    (dict(a="native/scale", b="native/scale@"), "say which version after '@'"),
])
def test_bad_input_names_the_op_and_the_problem(kwargs, match):
    with pytest.raises(CompareError, match=match):
        compare(**kwargs)


# ---------------------------------------------------------------- rendering, on synthetic samples


def _shape(numel: int, ratio: float, noise: float = 0.01) -> ShapeResult:
    import random

    rng = random.Random(numel)
    a = [10.0 * rng.lognormvariate(0, noise) for _ in range(30)]
    b = [x * ratio * rng.lognormvariate(0, noise) for x in a]
    return ShapeResult("bf16", numel, "cuda", tuple(a), tuple(b), estimate(a, b), 12, "30 pairs detect 3%")


def _synthetic() -> Comparison:
    c = Comparison("scale", Side("A", "jit/scale_naive", "working tree", "a" * 64, "pass"),
                   Side("B", "jit/scale", "commit 1a2b3c4", "b" * 64, "pass"), "NVIDIA H200", repeats=20)
    c.shapes = [_shape(1 << 16, 1.0), _shape(1 << 20, 1 / 1.5), _shape(1 << 24, 1.1)]
    fa = KernelFacts("_Z12scale_kernelIfEvPT_PKS0_fl", "void scale_kernel<float>(float*, float const*, float, long)",
                     "sm_90a", registers=16)
    fb = KernelFacts("_Z16scale_vec_kernelIfEvPT_PKS0_fl",
                     "void scale_vec_kernel<float>(float*, float const*, float, long)", "sm_90a", registers=40,
                     spill_stores=8, spill_loads=8)
    sd = sass_diff((SAMPLES / "scale_loop_nvdisasm.sass").read_text(),
                   (SAMPLES / "scale_loop_plus_one_nvdisasm.sass").read_text(), fb.label)
    c.why = BuildDiff([KernelDiff(fa.symbol, fb.symbol, fa, fb, 256, 256, occupancy(fa, 256), occupancy(fb, 256), sd)],
                      {"bf16 numel=65536": (["scale_kernel: grid 256x1x1, block 256x1x1"],
                                            ["scale_vec_kernel: grid 64x1x1, block 256x1x1"])})
    return c


def test_the_text_says_the_verdict_of_each_shape():
    c = _synthetic()
    text = str(c)
    lines = text.splitlines()
    assert lines[0] == ("compare('scale') on NVIDIA H200: A = jit/scale_naive (working tree, source aaaaaaaaaa); "
                        "B = jit/scale (commit 1a2b3c4, source bbbbbbbbbb)")
    head = next(i for i, line in enumerate(lines) if line.startswith("dtype"))
    assert lines[head].split()[:4] == list(HEAD[:2]) + ["A", "us"]
    rows = lines[head + 1:head + 4]
    assert "no difference detectable" in rows[0]
    assert "B faster (1.50x)" in rows[1]
    assert "B slower (1.10x)" in rows[2]
    assert "30 (12)" in rows[1]
    assert "CPU numbers" not in text and "cold L2" in text
    assert "void scale_kernel<float>(float*, float const*, float, long) -> void scale_vec_kernel<float>" in text
    assert "16 -> 40" in text and "0/0 -> 8/8" in text
    assert "launch at bf16 numel=65536: A scale_kernel: grid 256x1x1" in text
    assert "@@ change 1" in text and "+ FFMA" in text


def test_kernels_pair_by_symbol_then_template_arguments_then_order():
    def k(symbol: str, name: str = "") -> KernelFacts:
        return KernelFacts(symbol, name)

    a = {"s1": k("s1"), "x": k("x", "void scale_kernel<float>(float*)"), "y": k("y", "void scale_kernel<__half>(a)"),
         "only_a": k("only_a")}
    b = {"s1": k("s1"), "v": k("v", "void vec<__half>(a)"), "w": k("w", "void vec<float>(float*)")}
    assert pair_kernels(a, b) == [("s1", "s1"), ("x", "w"), ("y", "v"), ("only_a", None)]


def test_launches_are_read_from_a_profiler_trace():
    doc = {"traceEvents": [
        {"cat": "cpu_op", "name": "aten::mul", "ts": 1},
        {"cat": "kernel", "name": "void scale_vec_kernel<float>(float*, float const*, float, long)", "ts": 20,
         "args": {"grid": [1024, 1, 1], "block": [256, 1, 1], "shared memory": 0, "registers per thread": 24}},
        {"cat": "kernel", "name": "copy_kernel", "ts": 10, "args": {"grid": [8, 1, 1], "block": [128, 1, 1]}},
    ]}
    got = parse_trace(doc)
    assert [g.kernel.split("(")[0] for g in got] == ["copy_kernel", "void scale_vec_kernel<float>"]
    assert got[1] == Launch(got[1].kernel, (1024, 1, 1), (256, 1, 1), 0, 24)
    assert got[1].config() == "grid 1024x1x1, block 256x1x1, 0 B smem, 24 regs"
    assert got[0].config() == "grid 8x1x1, block 128x1x1"
