"""The CUDA rows jit/rms_norm and jit/fused_add_rms_norm: their build and checks.

On CPU the shipped sources build for real through the fast path (host pass and
device pass) and their launchers refuse CPU tensors. What they do on a GPU is in
tests/gpu/ops/test_rms_norm_jit.py; their numerics against the oracle are in
test_rms_norm.py and test_rows.py.
"""
from __future__ import annotations

import shutil

import pytest
import torch

from rapid_llm.kernels.registry import spec

needs_toolchain = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                     reason="the fast path needs g++ and the CUDA toolkit's headers (nvcc)")

RMS, FUSED = "jit/rms_norm", "jit/fused_add_rms_norm"


def launcher(row: str):
    return spec.get_row(row).target.launcher()


@needs_toolchain
def test_sources_build_and_refuse_cpu_tensors():
    rms, fused = launcher(RMS), launcher(FUSED)
    x, w = torch.randn(2, 8), torch.ones(8)
    with pytest.raises(ValueError, match=r"^rms_norm: CUDA tensors only"):
        rms(torch.empty_like(x), x, w, 1e-6)
    with pytest.raises(ValueError, match=r"^fused_add_rms_norm: CUDA tensors only"):
        fused(x, x.clone(), w, 1e-6)


def test_rows_declare_their_out_rule():
    assert spec.get_row(RMS).target.out == "like_input"
    assert spec.get_row(FUSED).target.out == "none"
