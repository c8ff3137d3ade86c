"""%%cuda_jit where a cell cannot run (no CUDA device): it still compiles, for real, through the fast path.

These run the real compilers (g++ and nvcc); the GPU is switched off by the probe, so a GPU box takes
the same path.
"""
from __future__ import annotations

import re
import shutil

import pytest
from IPython.core.error import UsageError

from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels.registry import spec
from rapid_llm.notebook.compile_errors import CellBuildError
from tests.unit.notebook.conftest import NO_GPU

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                reason="compiling a cell needs g++ and nvcc")

#: The %%cuda_jit line is cell line 1, so this source's line N is cell line N + 1.
GOOD = r"""// twice: out = 2 * input, fp32.
#include "common/rapid_llm.cuh"
#if RL_DEVICE
__global__ void twice_kernel(float* __restrict__ out, const float* __restrict__ in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i];
}
#endif
#if RL_HOST
__global__ void twice_kernel(float* __restrict__ out, const float* __restrict__ in, int64_t n);
void twice(rl::Tensor out, rl::Tensor input) {
  rl::check_cuda("twice", {out, input});
  const int64_t n = input.numel();
  if (n == 0) return;
  rl::launch(twice_kernel, rl::cdiv(n, 256), 256, 0, out.data<float>(), input.data<float>(), n);
}
RL_EXPORT(twice)
#endif
"""
#: Cell line 7 (source line 6) uses a name that does not exist: the device pass says so at that line.
BAD = GOOD.replace("  if (i < n) out[i] = 2.0f * in[i];", "  if (i < n) out[i] = 2.0f * in[i] * undefined_scale;")
#: A syntax error on cell line 7: an operator with nothing after it.
SYNTAX = GOOD.replace("  if (i < n) out[i] = 2.0f * in[i];", "  if (i < n) out[i] = 2.0f * ;")


@pytest.fixture
def no_device(monkeypatch):
    monkeypatch.setattr(jit, "available", lambda device=None: spec.Availability(False, NO_GPU))


def test_a_good_cell_is_compiled_and_its_row_registered_unable_to_run(shell, no_device, tmp_path, capsys):
    shell.run_cell_magic("cuda_jit", "twice --op scale --dtypes fp32", GOOD)
    out = capsys.readouterr().out
    assert re.search(r"built in [\d.]+ s for sm_\d+a? \(a compile check: " + re.escape(NO_GPU), out), out
    assert "row jit/twice registered for op 'scale' (unavailable here; golden unverified)" in out
    assert "twice" not in shell.user_ns  # nothing that cannot run is bound
    probe = spec.get_row("jit/twice").probe("cuda")
    assert not probe and "compiled here for sm_" in probe.reason and NO_GPU in probe.reason
    shell.run_cell_magic("cuda_jit", "twice --op scale --dtypes fp32", GOOD)
    assert capsys.readouterr().out.startswith("loaded from cache for sm_")


def test_a_syntax_error_is_reported_at_its_cell_line(shell, no_device, capsys):
    with pytest.raises(CellBuildError) as err:
        shell.run_cell_magic("cuda_jit", "twice_bad --op scale --dtypes fp32", BAD)
    message = str(err.value)
    assert "cell line 7: error" in message and "undefined_scale" in message, message
    assert "nothing was bound or registered" in message
    with pytest.raises(spec.RegistryError):
        spec.get_row("jit/twice_bad")


def test_a_syntax_error_on_the_seventh_line_is_reported_there(shell, no_device):
    with pytest.raises(CellBuildError) as err:
        shell.run_cell_magic("cuda_jit", "twice_syntax --op scale --dtypes fp32", SYNTAX)
    assert "cell line 7: error: expected an expression" in str(err.value), str(err.value)


def test_a_failed_edit_keeps_the_last_compiled_row(shell, no_device, capsys):
    shell.run_cell_magic("cuda_jit", "twice --op scale --dtypes fp32", GOOD)
    with pytest.raises(CellBuildError, match="keeps serving"):
        shell.run_cell_magic("cuda_jit", "twice --op scale --dtypes fp32", BAD)
    assert spec.get_row("jit/twice").op == "scale"


def test_a_torch_header_cell_without_bindings_is_refused_before_compiling(shell, tmp_path):
    cell = "#include <torch/extension.h>\nvoid twice(torch::Tensor out, torch::Tensor x) { out.copy_(x * 2); }\n"
    with pytest.raises(UsageError, match=re.escape("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)")) as err:
        shell.run_cell_magic("cuda_jit", "twice_torch", cell)
    assert 'm.def("twice_torch"' in str(err.value) and "RL_EXPORT(twice_torch)" in str(err.value)
    assert not (tmp_path / "csrc").exists()
