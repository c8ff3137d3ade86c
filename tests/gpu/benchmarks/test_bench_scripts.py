"""The benchmark scripts' arms that CPU CI leaves to the GPU suite, run here on CUDA.

bench_custom_op_overhead's C++ floors (``--cpp-floor``: a C++ kernel built with torch's cpp_extension, and a C kernel
through torch's stable C shim) take about 20 s of compiling on a 2-core CPU machine; CPU CI
(tests/benchmarks/test_bench_scripts.py) runs the script's other arms.
"""
from __future__ import annotations

import pytest

from tests.benchmarks.test_bench_scripts import _load
from tests.unit.bench.conftest import isolated_store  # noqa: F401 - autouse: each script's run gets its own store

pytestmark = pytest.mark.gpu


def test_custom_op_overhead_prints_every_path_and_torch_s_floors_on_cuda(capsys, monkeypatch, tmp_path):
    """The call paths of an op, and what torch.ops costs by itself: a Python kernel, aten's, and one of our own
    in C++ (the registration path a compiled graph would need to go under a Python kernel's floor)."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "torch_extensions"))
    assert _load("bench_custom_op_overhead").main(["--op", "scale", "--device", "cuda", "--pairs", "1", "--n", "20",
                                                   "--cpp-floor"]) == 0
    printed = capsys.readouterr().out
    for arm in ("K.scale", "torch.ops.rapid_llm.scale.default", "torch.library.custom_op", "direct",
                "torch.ops, same schema, kernel = the row", "torch.ops, same schema, kernel does no work",
                "torch.ops, same schema, C shim, no work", "Python kernel (returns its input)",
                "aten C++ kernel (mul.Scalar)", "C++ kernel (returns its input)"):
        assert arm in printed, printed
