"""%%cuda_jit on a GPU, end to end: a fast-path cell, and a seed-style cell through torch's loader.

The fast-path test walks the author's loop in order: cold build, unchanged
re-run, edit, a syntax error in device code and in host code. The seed test
builds a cell that includes torch/extension.h (about a minute), kills one
build half-way and rebuilds. Both print wall-clock build times (run with
``-s``); they are reported, never asserted.

    python -m pytest tests/gpu/unit/notebook/test_magic_end_to_end.py -s
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels.registry import spec
from rapid_llm.notebook.compile_errors import CellBuildError
from tests.hang_guard import with_hang_guard
from tests.unit.notebook.conftest import magics, shell  # noqa: F401 - the notebook tests' fixtures

pytestmark = pytest.mark.gpu  # tests/conftest.py skips it, with the reason, where no CUDA device is visible

ROOT = Path(__file__).resolve().parents[4]
LINE = "scale_vec --group elementwise --op scale"
KILL_AFTER_S = 5.0
HANG_GUARD_S = 400

#: The tutorial's kernel on the fast path, launcher scale_vec (the cell's NAME), plus
#: version() so a test can tell which build is loaded.
FAST_CELL = """\
// scale_vec: out = input * factor, fp16 / bf16 / fp32. {marker}
#include "common/rapid_llm.cuh"

#if RL_DEVICE
template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {{
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < n) {{
    out[idx] = static_cast<T>(static_cast<float>(in[idx]) * factor);
  }}
}}
#endif

#if RL_HOST
template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_vec(rl::Tensor out, rl::Tensor input, double factor) {{
  rl::check_cuda("scale_vec", {{out, input}});
  rl::check_contiguous("scale_vec", {{out, input}});
  rl::check_same("scale_vec", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_vec", [&](auto tag) {{
    using T = typename decltype(tag)::type;
    rl::launch(scale_kernel<T>, rl::cdiv(n, 256), 256, 0, out.data<T>(), input.data<T>(), float(factor), n);
  }});
}}
RL_EXPORT(scale_vec)

int64_t version() {{ return {version}; }}
RL_EXPORT(version)
#endif
"""

#: 1-based lines of FAST_CELL where a syntax error is planted: in a kernel, in the launcher.
DEVICE_ERROR_LINE = 9
HOST_ERROR_LINE = 21

#: The seed tutorial's cell, through torch's loader.
SCALE_CELL = """\
// scale_vec: out = input * factor, fp16 / bf16 / fp32. {marker}
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

namespace {{

template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in,
                             float factor, int64_t n) {{
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < n) {{
    out[idx] = static_cast<T>(static_cast<float>(in[idx]) * factor);
  }}
}}

}}  // namespace

void scale_vec(at::Tensor& out, const at::Tensor& input, double factor) {{
  TORCH_CHECK(input.is_cuda() && out.is_cuda(), "scale_vec: CUDA tensors only");
  TORCH_CHECK(input.is_contiguous() && out.is_contiguous(), "scale_vec: contiguous only");
  TORCH_CHECK(out.sizes() == input.sizes() && out.scalar_type() == input.scalar_type(),
              "scale_vec: out must match input shape/dtype");
  const int64_t n = input.numel();
  if (n == 0) return;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  const at::cuda::OptionalCUDAGuard guard(at::device_of(input));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "scale_vec", [&] {{
    scale_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
        out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), static_cast<float>(factor), n);
  }});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}}

int64_t version() {{ return {version}; }}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
  m.def("scale_vec", &scale_vec);
  m.def("version", &version);
}}
"""

def scale_cell(version: int, marker: str = "") -> str:
    return SCALE_CELL.format(version=version, marker=marker)


def fast_cell(version: int, marker: str = "") -> str:
    return FAST_CELL.format(version=version, marker=marker)


def broken_fast_cell(line: int) -> str:
    lines = fast_cell(3).splitlines()
    lines.insert(line - 1, "  this is not C++;")
    return "\n".join(lines) + "\n"


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _check_scale(shell) -> None:
    row_op = spec.get_row("jit/scale_vec").load()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(4097, device="cuda", dtype=dtype)
        torch.testing.assert_close(row_op(x, 1.5), x * 1.5, rtol=0, atol=0)
        out = torch.empty_like(x)
        shell.user_ns["scale_vec"](out, x, 2.0)
        torch.testing.assert_close(out, x * 2.0, rtol=0, atol=0)


def _start_victim(cell_file: Path, csrc: Path, cache: Path) -> subprocess.Popen:
    """A separate kernel process building ``cell_file`` through the magic."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from IPython.core.interactiveshell import InteractiveShell
        sh = InteractiveShell.instance()
        sh.extension_manager.load_extension("rapid_llm")
        sh.magics_manager.registry["CudaJitMagics"].csrc_dir = {str(csrc)!r}
        sh.run_cell_magic("cuda_jit", "scale_kill --group elementwise", open({str(cell_file)!r}).read())
    """)
    env = dict(os.environ, RAPID_LLM_CACHE_DIR=str(cache))
    # Its own session, so the compilers it leaves orphaned can be cleaned up afterwards.
    return subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _toolchain() -> None:
    reason = jit.available()
    if not reason:
        pytest.skip(f"JIT toolchain unavailable: {reason.reason}")


def test_fast_cell_build_rerun_edit_errors(shell, magics, capsys):
    _toolchain()
    times: dict[str, float] = {}

    def report(text: str) -> None:
        with capsys.disabled():
            print(text.rstrip("\n"))

    from rapid_llm.kernels.toolchain.fastpath.builder import warm

    times["one-off machine set-up (host support, call binding)"] = _timed(warm)
    marker = f"run {uuid.uuid4().hex}"  # a source no cache has seen: the build is cold
    times["cold build"] = _timed(lambda: shell.run_cell_magic("cuda_jit", LINE, fast_cell(1, marker)))
    assert magics.builds["scale_vec"].cached is False
    assert magics.builds["scale_vec"].builder == "fast"
    assert shell.user_ns["version"]() == 1
    _check_scale(shell)
    first = magics.builds["scale_vec"].module

    times["unchanged re-run"] = _timed(lambda: shell.run_cell_magic("cuda_jit", LINE, fast_cell(1, marker)))
    assert magics.builds["scale_vec"].cached is True
    assert magics.builds["scale_vec"].module is first

    times["edit, rebuild"] = _timed(lambda: shell.run_cell_magic("cuda_jit", LINE, fast_cell(2, marker)))
    assert magics.builds["scale_vec"].cached is False
    assert shell.user_ns["version"]() == 2
    _check_scale(shell)
    report("\n" + capsys.readouterr().out)

    for where, line in (("device", DEVICE_ERROR_LINE), ("host", HOST_ERROR_LINE)):
        start = time.perf_counter()
        with pytest.raises(CellBuildError) as info:
            shell.run_cell_magic("cuda_jit", LINE, broken_fast_cell(line))
        times[f"syntax error ({where} code)"] = time.perf_counter() - start
        message = str(info.value)
        report(message)
        assert f"cell line {line + 1}: error" in message  # the %%cuda_jit line is cell line 1
        assert "keeps serving" in message
        assert shell.user_ns["version"]() == 2  # the last good build still answers
        _check_scale(shell)

    with pytest.raises(CellBuildError) as info:  # --verbose: every command and the compiler's log
        shell.run_cell_magic("cuda_jit", LINE + " --verbose", broken_fast_cell(HOST_ERROR_LINE))
    assert f"cell line {HOST_ERROR_LINE + 1}: error" in str(info.value)
    verbose_out = capsys.readouterr().out
    assert "builder fast" in verbose_out and "flags  -O3" in verbose_out and "-std=c++17" in verbose_out
    report(capsys.readouterr().out)
    report("build times (wall clock, fast path): " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()))


def test_seed_cell_builds_through_torch_and_survives_a_kill(shell, magics, tmp_path, capsys):
    _toolchain()
    times: dict[str, float] = {}

    def report(text: str) -> None:
        with capsys.disabled():
            print(text.rstrip("\n"))

    cell_file = tmp_path / "kill_cell.cu"
    cell_file.write_text(scale_cell(4, marker=f"kill test {uuid.uuid4().hex}"))
    cache = tmp_path / "cache"
    victim = _start_victim(cell_file, tmp_path / "csrc", cache)
    try:
        deadline = time.monotonic() + 120
        while not list((cache / "jit").glob("scale_kill_*.staging-*")):
            assert victim.poll() is None, "the victim build exited before it started building"
            assert time.monotonic() < deadline, "the victim build never started"
            time.sleep(0.1)
        time.sleep(KILL_AFTER_S)
        assert victim.poll() is None, "the victim build finished before it could be killed"
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        stale = [p for p in (cache / "jit").glob("scale_kill_*.staging-*/lock")]
        report(f"killed the build after {KILL_AFTER_S:.0f} s; torch lock files left behind: {len(stale)}")

        times["kill, then rebuild (torch loader)"] = with_hang_guard(
            lambda: _timed(lambda: shell.run_cell_magic("cuda_jit", "scale_kill --group elementwise",
                                                        cell_file.read_text())),
            HANG_GUARD_S, "the rebuild after the kill")
    finally:
        try:
            os.killpg(victim.pid, signal.SIGKILL)  # compilers the dead build left running
        except ProcessLookupError:
            pass
    assert magics.builds["scale_kill"].cached is False
    assert magics.builds["scale_kill"].builder == "torch-cpp-extension"
    assert shell.user_ns["version"]() == 4
    x = torch.randn(4097, device="cuda")
    out = torch.empty_like(x)
    shell.user_ns["scale_vec"](out, x, 2.0)
    torch.testing.assert_close(out, x * 2.0, rtol=0, atol=0)

    report(capsys.readouterr().out)
    report("build times (wall clock): " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()))
