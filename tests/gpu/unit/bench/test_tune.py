"""tune on a GPU: a CUDA row's candidates compiled in parallel, verified in the warm child, timed with the
harness's checks, the winner pinned (where interleaved pairs confirm it beats the untuned row) and run by
dispatch; a candidate that fails verify is never timed. The CPU
checks (a Triton row in the interpreter, pins across processes) are in tests/unit/bench/test_tune.py."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.bench.tune import tune
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain.jit_row import JitRow
from tests.unit.bench.conftest import isolated_store  # noqa: F401 - autouse: each bench test gets its own store

pytestmark = pytest.mark.gpu

SOURCE = Path(__file__).resolve().parents[4] / "benchmarks" / "tune" / "rms_norm_tunable.cu"
#: A wrong variant: the sum of squares over half the row (the first half's threads only).
WRONG = ("  for (int offset = 16; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);",
         "  if (BUG && threadIdx.x >= THREADS / 2) sum_sq = 0.0f;\n"
         "  for (int offset = 16; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);")


def _row(tmp_path: Path, text: str) -> str:
    path = tmp_path / "rms_norm_tunable.cu"
    path.write_text(text)
    K.register(KernelSpec(name="jit/rms_norm_tunable", op="rms_norm", backend="jit",
                          target=JitRow(path, "rms_norm_tunable"),
                          available="rapid_llm.kernels.toolchain.jit:available", dtypes=("bf16", "fp16", "fp32"),
                          devices=("cuda",), golden=GoldenRecord(verified=False, baseline="native/rms_norm")),
               replace=True)
    return "jit/rms_norm_tunable"


def test_tune_a_cuda_row_pins_a_verified_winner(tmp_path):
    text = SOURCE.read_text()
    assert WRONG[0] in text
    text = text.replace(WRONG[0], WRONG[1]).replace(
        '"STREAM": [0, 1],', '"STREAM": [0, 1], "BUG": [0, 1],').replace("#ifndef STREAM", "#ifndef BUG\n#define BUG 0\n#endif\n#ifndef STREAM")
    row = _row(tmp_path, text)
    try:
        result = tune(row, tokens=(1, 128), dtype="bf16", limit=8, verify_dtypes=("bf16", "fp32"))
        print(result.summary())
        by_state = {c.label: c.state for c in result.candidates}
        assert all(state == ("verify_failed" if "BUG=1" in label else "timed") for label, state in by_state.items())
        assert all(not c.times_us for c in result.candidates if c.config["BUG"] == 1)
        assert result.winner is not None and result.winner.config["BUG"] == 0
        assert result.confirmation is not None and len(result.confirmation.shapes) == 2
        target = K.get_row(row).target
        if not result.confirmed:  # the winner's lead is noise (or it is slower): the defaults stay, said so
            assert result.pin is None and "the row keeps its defaults" in result.not_pinned, result.summary()
            assert target.config is None and "-DTHREADS" not in " ".join(target.flags)
            return
        assert result.pin is not None and result.pin.config == result.winner.config
        assert target.config == result.winner.config
        assert f"-DTHREADS={result.winner.config['THREADS']}" in target.flags
        x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(K.get_row(row).call_path()(x, w, 1e-6), K.get_row("native/rms_norm").load()(x, w, 1e-6))
        why = K.explain("rms_norm", dtype="bf16", device="cuda", numel=4096 * 64).verdict(row).reason
        assert f"tuned: {result.winner.label}, pinned for {torch.cuda.get_device_name()}" in why
    finally:
        K.unregister(row)
