"""A notebook's CuTe DSL kernel on a GPU (cute_launcher): it computes what torch does, becomes a row of an op that
passes verify, reloads from the cache in a fresh process, and what a call costs the host is printed. Skipped,
with the reason, without the DSL or below sm_90. Its CPU half is tests/unit/toolchain/test_cute_cells.py.
"""
from __future__ import annotations

import sys

import pytest
import torch

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain import cute_support
from tests.unit.toolchain.test_cute_cells import SCALE

pytestmark = pytest.mark.gpu

ROW = "cute/scale_nb"


@pytest.fixture(scope="module")
def scale_cell(tmp_path_factory):
    avail = cute_support.available(torch.device("cuda"))
    if not avail:
        pytest.skip(f"cute_launcher: {avail.reason}")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the CuTe rows are written for sm_90 and newer")
    folder = tmp_path_factory.mktemp("cell")
    (folder / "scale_cell_gpu.py").write_text(SCALE)
    sys.path.insert(0, str(folder))
    try:
        import scale_cell_gpu
    finally:
        sys.path.remove(str(folder))
    from rapid_llm.kernels.toolchain.cute_cells import cute_launcher

    run = cute_launcher(scale_cell_gpu.scale_kernel, block=256, BLOCK=256)

    def scale_nb(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
        out = torch.empty_like(input) if out is None else out
        if input.numel():
            run((input.numel() + 255) // 256, input, out, input.numel(), factor)
        return out

    return run, scale_nb


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("n", [1, 255, 256, 4097, 1 << 20])
def test_a_cell_kernel_computes_what_torch_does(scale_cell, dtype, n):
    _, scale_nb = scale_cell
    x = torch.randn(n, device="cuda").to(dtype)
    torch.testing.assert_close(scale_nb(x, 0.7), (x.float() * 0.7).to(dtype), rtol=0, atol=0)


def test_a_cell_kernel_becomes_a_row_that_passes_verify(scale_cell):
    from rapid_llm.bench.harness import bench_host
    from rapid_llm.kernels.verification.golden import verify

    _, scale_nb = scale_cell
    with spec.isolated(discover=True):
        spec.register(KernelSpec(name=ROW, op="scale", target=scale_nb,
                                 available="rapid_llm.kernels.toolchain.cute_support:available",
                                 dtypes=("bf16", "fp16", "fp32"), devices=("cuda",), min_sm=90,
                                 golden=GoldenRecord(verified=False, baseline="native/scale")))
        report = verify(ROW, record=False)
        print(report)
        assert report.passed, str(report)
    x = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    for name, fn in (("cell row, out given", lambda _x: scale_nb(_x, 0.7, out)),
                     ("torch.mul, out given", lambda _x: torch.mul(_x, 0.7, out=out))):
        print(f"host cost per call, scale bf16 [1024], {name}: {bench_host(fn, x).median_us:.2f} us")
