"""%%cuda_jit on a machine without CUDA: options, help, config, saving, rows, usage errors."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from IPython.core.error import UsageError

from rapid_llm.kernels.dispatch import dispatcher as dispatch
from rapid_llm.kernels.registry import spec
from tests.unit.notebook.conftest import NO_GPU, NO_NVCC

CELL = "// scale_vec: out = input * factor\n__global__ void k() {}\n"


def test_load_ext_imports_nothing_heavy():
    code = ("import sys\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "InteractiveShell.instance().run_line_magic('load_ext', 'rapid_llm')\n"
            "print(sorted(m for m in ('torch', 'triton', 'torch.utils.cpp_extension', 'rapid_llm.kernels.toolchain.jit')"
            " if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_documents_every_option(shell):
    doc = shell.find_cell_magic("cuda_jit").__doc__
    assert "%%cuda_jit" in doc
    for option in ("NAME", "--group", "--op", "--fn", "--dtypes", "--flags", "--not-graph-safe", "--builder",
                   "--verbose"):
        assert option in doc


def test_defaults_are_configurable_with_percent_config(shell, magics, capsys):
    shell.run_line_magic("config", "CudaJitMagics.default_flags = ['-O2', '-lineinfo']")
    shell.run_line_magic("config", "CudaJitMagics.default_group = 'scratch'")
    assert magics.default_flags == ["-O2", "-lineinfo"]
    shell.run_line_magic("config", "CudaJitMagics")
    listing = capsys.readouterr().out
    for trait in ("csrc_dir", "default_group", "default_flags", "default_dtypes", "builder"):
        assert trait in listing


def test_unload_removes_the_magic(shell):
    shell.extension_manager.unload_extension("rapid_llm")
    assert shell.find_cell_magic("cuda_jit") is None
    assert not any(type(c).__name__ == "CudaJitMagics" for c in shell.configurables)
    shell.extension_manager.load_extension("rapid_llm")  # the fixture unloads it again


def test_cell_is_saved_unchanged_under_its_group(shell, magics, tmp_path, no_gpu, capsys):
    shell.run_cell_magic("cuda_jit", "scale_vec --group elementwise", CELL)
    assert (tmp_path / "csrc" / "elementwise" / "scale_vec.cu").read_text() == CELL
    assert capsys.readouterr().out == f"saved csrc/elementwise/scale_vec.cu; not built: {NO_GPU}; {NO_NVCC}\n"


def test_default_group_and_csrc_come_from_traits(shell, magics, tmp_path, no_gpu):
    magics.default_group = "scratch"
    magics.csrc_dir = str(tmp_path / "kernels_src")
    shell.run_cell_magic("cuda_jit", "k", CELL)
    assert (tmp_path / "kernels_src" / "scratch" / "k.cu").read_text() == CELL


def test_csrc_defaults_to_the_project_root(shell, magics, tmp_path, monkeypatch, no_gpu):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    magics.csrc_dir = ""
    shell.run_cell_magic("cuda_jit", "k --group g", CELL)
    assert (tmp_path / "csrc" / "g" / "k.cu").read_text() == CELL


def test_without_a_toolchain_the_row_is_registered_unavailable_with_the_reason(shell, no_gpu, capsys):
    shell.run_cell_magic("cuda_jit", "scale_vec --group elementwise --op scale --dtypes bf16,fp16", CELL)
    out = capsys.readouterr().out
    assert "row jit/scale_vec registered for op 'scale' (unavailable" in out
    row = spec.get_row("jit/scale_vec")
    assert (row.op, row.backend, row.dtypes, row.devices) == ("scale", "jit", ("bf16", "fp16"), ("cuda",))
    assert row.golden.verified is False and row.golden.baseline == "native/scale"
    assert row.graph_safe is True and row.priority is None
    probe = row.probe("cuda")
    assert not probe and NO_GPU in probe.reason
    with pytest.raises(RuntimeError, match=re.escape(f"scale_vec.cu cannot run on this machine: not built: {NO_GPU}")):
        row.load()(torch.ones(2), 2.0)
    verdict = dispatch.explain("scale", dtype="bf16", device="cpu").verdict("jit/scale_vec")
    assert verdict.verdict == "filtered" and NO_GPU in verdict.reason
    assert dispatch.get_op("scale")(torch.ones(3), 2.0).tolist() == [2.0, 2.0, 2.0]


def test_not_graph_safe_reaches_the_row(shell, no_gpu):
    shell.run_cell_magic("cuda_jit", "scale_vec --op scale --not-graph-safe", CELL)
    assert spec.get_row("jit/scale_vec").graph_safe is False


def test_an_undeclared_op_is_an_error_with_the_close_matches(shell, tmp_path, no_gpu):
    with pytest.raises(UsageError, match=re.escape("--op rms_nrom: no op 'rms_nrom' is declared. did you mean "
                                                   "'rms_norm'")) as err:
        shell.run_cell_magic("cuda_jit", "k --op rms_nrom", CELL)
    assert "K.declare_op('rms_nrom', native=" in str(err.value)
    assert not (tmp_path / "csrc").exists() and "jit/k" not in [r.name for r in spec.rows_for("rms_norm")]


def test_a_row_of_an_op_the_notebook_declared_goes_under_the_op_name(shell, tmp_path, no_gpu, capsys):
    from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference, declare_op

    declare_op("relu_sq", native=lambda x: torch.relu(x) ** 2,
               reference=Reference(make_inputs=lambda *a: (torch.ones(2),), oracle=lambda x: x.double()),
               bench=lambda n, dtype, device: CaseArgs((torch.ones(n),)))
    shell.run_cell_magic("cuda_jit", "relu_vec --op relu_sq", CELL)
    assert "saved csrc/relu_sq/relu_vec.cu" in capsys.readouterr().out
    assert spec.get_row("jit/relu_vec").golden.baseline == "native/relu_sq"
    shell.run_cell_magic("cuda_jit", "norm_vec --op rms_norm", CELL)  # a library op: its own group
    shell.run_cell_magic("cuda_jit", "loose", CELL)  # no op: scratch
    assert (tmp_path / "csrc" / "norm" / "norm_vec.cu").exists() and (tmp_path / "csrc" / "scratch" / "loose.cu").exists()


def test_rerun_without_op_removes_the_row_it_made(shell, no_gpu, capsys):
    shell.run_cell_magic("cuda_jit", "scale_vec --op scale", CELL)
    shell.run_cell_magic("cuda_jit", "scale_vec", CELL)
    assert "row jit/scale_vec removed (this run has no --op)" in capsys.readouterr().out
    assert "jit/scale_vec" not in [r.name for r in spec.rows_for("scale")]


@pytest.mark.parametrize("line, message", [
    ("../evil", "NAME must be a plain identifier"),
    ("a/b", "NAME must be a plain identifier"),
    ("k --group ../..", "--group must be a plain identifier"),
    ("k --group a/b", "--group must be a plain identifier"),
    ("k --op not-an-op", "--op must be a plain identifier"),
    ("k --dtypes fp7", "unknown dtype 'fp7'"),
    ("k --fn k", "--fn picks the launcher of the --op row"),
    ("k --flags -lineinfo", 'put nvcc flags in quotes: --flags "-lineinfo --use_fast_math"'),
    ("k --flags=-lineinfo --use_fast_math", 'put nvcc flags in quotes'),
    ('k --flags "-DX', "No closing quotation"),
    ("k --builder nope", "unknown builder 'nope'"),
    ("k --bogus", "unrecognized arguments: --bogus"),
    ("k --gruop norm", "unrecognized arguments: --gruop norm (did you mean --group?"),
    ("k --fags -O3", "did you mean --flags?"),
    ("k -lineinfo", 'unrecognized arguments: -lineinfo (put nvcc flags in quotes'),
    ("", "the following arguments are required: NAME"),
    ("scale --op scale", "row jit/scale is already registered (not by %%cuda_jit)"),
])
def test_usage_errors_name_the_problem_and_write_nothing(shell, tmp_path, no_gpu, line, message):
    rows_before = {op: [r.name for r in spec.rows_for(op)] for op in spec.all_ops()}
    with pytest.raises(UsageError, match=re.escape(message)):
        shell.run_cell_magic("cuda_jit", line, CELL)
    assert not (tmp_path / "csrc").exists()
    assert {op: [r.name for r in spec.rows_for(op)] for op in spec.all_ops()} == rows_before


def test_an_empty_cell_is_a_usage_error(shell, tmp_path, no_gpu):
    with pytest.raises(UsageError, match="the cell is empty"):
        shell.run_cell_magic("cuda_jit", "k", "  \n")
    assert not (tmp_path / "csrc").exists()


def test_a_row_cannot_be_moved_to_another_op(shell, no_gpu, new_op_rows):
    shell.run_cell_magic("cuda_jit", "scale_vec --op scale", CELL)
    with pytest.raises(UsageError, match="row jit/scale_vec serves op 'scale'"):
        shell.run_cell_magic("cuda_jit", "scale_vec --op rms_norm", CELL)
    assert spec.get_row("jit/scale_vec").op == "scale"


def test_usage_errors_show_as_one_line_not_a_traceback(shell, no_gpu, capsys):
    result = shell.run_cell("%%cuda_jit ../evil\n// x\n")
    assert isinstance(result.error_in_exec, UsageError)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "UsageError: NAME must be a plain identifier" in text and "Traceback" not in text


def test_load_ext_binds_the_notebook_verbs_lazily(shell):
    import sys

    from rapid_llm.notebook.extension import VERBS

    for name in VERBS:
        assert callable(shell.user_ns[name]), name
    assert "rapid_llm.kernels.inspection.inspector" not in sys.modules or True  # imported by other tests maybe
    shell.user_ns["inspect"] = "the user's own"
    shell.extension_manager.unload_extension("rapid_llm")
    assert "verify" not in shell.user_ns and shell.user_ns["inspect"] == "the user's own"
    shell.extension_manager.load_extension("rapid_llm")
    assert shell.user_ns["inspect"] == "the user's own"  # a name the notebook has is never replaced
    del shell.user_ns["inspect"]
