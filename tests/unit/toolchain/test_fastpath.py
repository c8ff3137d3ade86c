"""The JIT fast path, for real, without a GPU: host pass, device pass, link, binding, errors.

A fast-path module's launchers run on the host, so a launcher that works on
CPU tensors exercises everything but the kernel launch itself: argument
conversion through torch's DLPack exchange API, checks raised as Python
errors, dtype dispatch over exactly the listed dtypes, scalar results. The
device pass compiles for real too (NVRTC where found, else nvcc), to a cubin
whose kernel symbols are checked. What the fast path does on a GPU is in
tests/gpu/unit/toolchain/test_fastpath.py; per-call cost is a benchmark (benchmarks/jit/bench_call.py).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.toolchain import jit, cache as jit_cache
from rapid_llm.kernels.toolchain.fastpath import device, symbols
from rapid_llm.kernels.toolchain.fastpath.builder import FastBuilder
from rapid_llm.notebook.compile_errors import cell_diagnostics
from tests.reference import assert_close_to_ref, scale_ref

needs_toolchain = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                     reason="the fast path needs g++ and the CUDA toolkit's headers (nvcc)")
pytestmark = needs_toolchain

#: Kernels that the host code launches on CUDA tensors, plus a CPU path that makes the module testable here.
CELL = r"""
#include "common/rapid_llm.cuh"

#if RL_DEVICE
template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<T>(static_cast<float>(in[i]) * factor);
}
__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value; }
#endif

#if RL_HOST
template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);
__global__ void fill_kernel(float* out, float value);

void scale(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_same("scale", out, input);
  rl::check_contiguous("scale", {out, input});
  const int64_t n = input.numel();
  if (!input.is_cuda()) {  // a host loop: what lets this module be tested without a GPU
    rl::dispatch<float, double>(input, "scale", [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < n; ++i) out.data<T>()[i] = static_cast<T>(static_cast<float>(input.data<T>()[i]) * static_cast<float>(factor));
    });
    return;
  }
  if (n == 0) return;
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_kernel<T>, rl::cdiv(n, 256), 256, 0, out.data<T>(), input.data<T>(), float(factor), n);
  });
}
RL_EXPORT(scale, "out = input * factor")

int64_t version() { return VERSION; }
RL_EXPORT(version)

double half_of(double x) { return x / 2; }
RL_EXPORT(half_of)

bool positive(int64_t x, bool strict) { return strict ? x > 0 : x >= 0; }
RL_EXPORT(positive)

void empty_launch(rl::Tensor out) { rl::launch(fill_kernel, 0, 32, 0, out.data<float>(), 1.0f); }
RL_EXPORT(empty_launch)

void launch_one(rl::Tensor out) { rl::launch(fill_kernel, 1, 32, 0, out.data<float>(), 1.0f); }
RL_EXPORT(launch_one)
#endif
"""


def write_cell(path: Path, version: int = 1, text: str = CELL) -> Path:
    path.write_text(text.replace("VERSION", str(version)))
    return path


def device_compilers() -> list[str]:
    found = []
    if device.nvrtc_library() is not None:
        found.append("nvrtc")
    if shutil.which("nvcc") is not None:
        found.append("nvcc")
    return found


@pytest.fixture(scope="module")
def cell_module(tmp_path_factory):
    src = write_cell(tmp_path_factory.mktemp("cell") / "cell.cu")
    return jit.build_jit("cell", src, builder="fast").module


def test_builder_is_chosen_by_the_source(tmp_path):
    fast = write_cell(tmp_path / "fast.cu")
    seed = tmp_path / "seed.cu"
    seed.write_text("#include <torch/extension.h>\nvoid f() {}\n")
    assert jit.default_builder(fast) == "fast"
    assert jit.default_builder(seed) == "torch"
    assert jit.default_builder("elementwise/scale/scale.cu") == "fast"  # the shipped row is a fast-path source


def test_cache_key_covers_the_projects_headers(tmp_path):
    names = {p.name for p in jit_cache.local_sources(write_cell(tmp_path / "cell.cu"))}
    assert {"cell.cu", "rapid_llm.cuh", "rapid_llm_abi.h"} <= names


def test_launcher_computes_and_converts_arguments(cell_module):
    for dtype in (torch.float32, torch.float64):
        for numel in (0, 1, 4097):
            x = torch.randn(numel, dtype=dtype)
            out = torch.empty_like(x)
            assert cell_module.scale(out, x, 1.7) is None
            # the cell computes in fp32 (fp64 too): two fp32 roundings, the factor and the product
            assert_close_to_ref(out, scale_ref(x.double(), 1.7), f"cell scale {dtype} numel={numel}", ulps=2,
                                dtype=torch.float32)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    out = torch.empty_like(x)
    cell_module.scale(out, x, 2)  # an int where a float is declared converts
    assert out.tolist() == [[0, 2, 4], [6, 8, 10]]
    assert cell_module.version() == 1
    assert cell_module.half_of(3) == 1.5
    assert cell_module.positive(0, False) is True and cell_module.positive(0, True) is False
    assert cell_module.scale.__doc__ == "out = input * factor"
    assert cell_module.__signatures__["scale"].kinds == "ttf"


@pytest.mark.parametrize("args, error, match", [
    (("x",), TypeError, r"scale\(\) takes 3 positional arguments \(ttf\) but 1 were given"),
    (("out", "x", "2"), TypeError, r"argument 3 must be a float, not str"),
    (("out", [1.0], 2.0), TypeError, r"argument 2 must be a torch.Tensor, not list"),
    (("out", "x64", 2.0), ValueError, r"^scale: shapes/dtypes differ: \[8\] fp32 on cpu vs \[8\] fp64 on cpu$"),
    (("out", "x_short", 2.0), ValueError, r"scale: shapes/dtypes differ: \[8\] fp32 on cpu vs \[4\] fp32"),
    (("h", "h", 2.0), ValueError, r"^scale: dtype fp16 is not supported \(supported: fp32, fp64\)$"),
    (("out2d_t", "x2d_t", 2.0), ValueError, r"scale: contiguous tensors only, got a strided view \[4, 2\]"),
])
def test_bad_arguments_raise_and_name_the_problem(cell_module, args, error, match):
    values = {"x": torch.ones(8), "out": torch.empty(8), "x64": torch.ones(8, dtype=torch.float64),
              "x_short": torch.ones(4), "h": torch.ones(8, dtype=torch.float16),
              "out2d_t": torch.empty(2, 4).t(), "x2d_t": torch.ones(2, 4).t()}
    resolved = [values.get(a, a) if isinstance(a, str) else a for a in args]
    with pytest.raises(error, match=match):
        cell_module.scale(*resolved)
    out, x = torch.empty(8), torch.ones(8)
    cell_module.scale(out, x, 3.0)  # nothing is left broken by the failed call
    assert out.tolist() == [3.0] * 8


def test_an_empty_grid_is_refused_before_launching(cell_module):
    with pytest.raises(RuntimeError, match=r"launching fill_kernel\(float\*, float\): empty grid or block"):
        cell_module.empty_launch(torch.empty(32))


@pytest.mark.parametrize("compiler", device_compilers())
def test_device_pass_instantiates_what_the_host_launches(tmp_path, compiler):
    src = write_cell(tmp_path / "cell.cu")
    obj = tmp_path / "host.o"
    import subprocess

    from rapid_llm.kernels.toolchain.fastpath.builder import HOST_FLAGS

    subprocess.run(["g++", *HOST_FLAGS, f"-I{jit.CUDA_INCLUDE}", f"-I{jit.CUDA_INCLUDE / 'common'}", "-c", "-x", "c++", str(src),
                    "-o", str(obj)], check=True)
    kernels = symbols.launched_kernels(obj)
    assert sorted(k.name_expression for k in kernels) == [
        "fill_kernel", "scale_kernel<__half>", "scale_kernel<__nv_bfloat16>", "scale_kernel<float>"]
    code = device.compile_device(src, kernels, "sm_90a", ["-O3"], [jit.CUDA_INCLUDE, jit.CUDA_INCLUDE / "common"],
                                 work_dir=tmp_path, compiler=compiler)
    defined = symbols.cubin_functions(code.cubin)
    assert {k.symbol for k in kernels} <= defined
    assert all(code.lowered[k.name_expression] == k.symbol for k in kernels)


def test_rebuild_after_edit_runs_the_new_code_and_unchanged_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))  # no earlier run has built the edited cell
    src = write_cell(tmp_path / "edited.cu", version=1)
    first = jit.build_jit("edited", src, builder="fast")
    again = jit.build_jit("edited", src, builder="fast")
    assert again.cached and again.module.version() == 1
    write_cell(src, version=2)
    second = jit.build_jit("edited", src, builder="fast")
    assert not second.cached and second.module.version() == 2
    assert first.module.version() == 1  # a module already bound keeps its own code


def test_host_and_device_must_agree_on_signatures(tmp_path):
    text = CELL.replace("__global__ void fill_kernel(float* out, float value);",
                        "__global__ void fill_kernel(float* out, double value);")
    text = text.replace("rl::launch(fill_kernel, 0, 32, 0, out.data<float>(), 1.0f)",
                        "rl::launch(fill_kernel, 0, 32, 0, out.data<float>(), 1.0)")
    src = write_cell(tmp_path / "disagree.cu", text=text)
    with pytest.raises(jit.BuildError, match=r"host code declares fill_kernel\(float\*, double\), but the device "
                                             r"code defines fill_kernel\(float\*, float\)"):
        jit.build_jit("disagree", src, builder="fast")


@pytest.mark.parametrize("where, broken", [
    ("host", ("int64_t version() { return VERSION; }", "int64_t version() { return VERSION }")),
    ("device", ("__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value; }",
                "__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value }")),
    # NVRTC has no C++ standard library; without libnvrtc, the nvcc fallback refuses it too (nvcc would accept it)
    ("device", ("__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value; }",
                "__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = std::max(value, 0.f); }")),
], ids=["host", "device", "device-std"])
def test_compile_errors_point_at_the_cell_line(tmp_path, where, broken):
    text = CELL.replace(*broken)
    src = write_cell(tmp_path / "broken.cu", text=text)
    line = next(i for i, ln in enumerate(src.read_text().splitlines(), 1) if broken[1].split("{")[0] in ln)
    with pytest.raises(jit.BuildError) as info:
        jit.build_jit("broken", src, builder="fast")
    assert f"in the {where} pass" in str(info.value)
    diagnostics, count = cell_diagnostics(info.value.log, src)
    assert count >= 1
    assert diagnostics[0].startswith(f"cell line {line + 1}: error"), diagnostics  # the magic line is line 1
    assert not list((jit.cache_root()).glob("broken_*/")), "a failed build must publish nothing"


def _has_cuda_driver() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_cuda_driver(), reason="checks what a machine without a CUDA driver says")
def test_launch_without_a_driver_raises(cell_module):
    with pytest.raises(RuntimeError, match=r"^CUDA error: the kernels of this module are not loaded"):
        cell_module.launch_one(torch.empty(32))
