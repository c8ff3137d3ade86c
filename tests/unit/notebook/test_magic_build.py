"""%%cuda_jit end to end with a real build (gcc standing in for nvcc): bind, row, re-run, edit, errors."""
from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError

from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels.registry import spec
from rapid_llm.notebook.compile_errors import CellBuildError
from tests.jit_builders import module_source
from tests.unit.notebook.conftest import scale_vec_cell

LINE = "scale_vec --group elementwise --op scale"


def _builds(log) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_build_binds_every_function_and_registers_an_out_first_row(shell, gcc, capsys):
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    out = capsys.readouterr().out
    assert out.startswith("built in ")
    assert ("scale_vec(), version() bound; row jit/scale_vec registered for op 'scale' "
            "(golden unverified: verify it to let dispatch use it; available)") in out
    assert shell.user_ns["version"]() == 1

    row = spec.get_row("jit/scale_vec")
    assert (row.backend, row.golden.verified, row.golden.baseline) == ("jit", False, "native/scale")
    op = row.load()
    x = torch.arange(5, dtype=torch.float32)
    assert op(x, 3.0).tolist() == (x * 3.0).tolist()
    out_buf = torch.empty_like(x)
    assert op(x, 2.0, out=out_buf) is out_buf and out_buf.tolist() == (x * 2.0).tolist()


def test_unchanged_rerun_loads_from_cache_and_keeps_the_module(shell, gcc, magics, capsys):
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    first = magics.builds["scale_vec"].module
    capsys.readouterr()
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    assert capsys.readouterr().out.startswith("loaded from cache in ")
    assert magics.builds["scale_vec"].module is first
    assert _builds(gcc) == 1


def test_edited_cell_rebuilds_and_its_new_code_runs_everywhere(shell, gcc):
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    old_row_fn = spec.get_row("jit/scale_vec").target
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(2))
    assert _builds(gcc) == 2
    assert shell.user_ns["version"]() == 2
    assert spec.get_row("jit/scale_vec").target is not old_row_fn


def test_functions_an_edit_removes_are_unbound_but_user_values_stay(shell, gcc):
    shell.run_cell_magic("cuda_jit", "scale_vec", scale_vec_cell(1))
    shell.user_ns["scale_vec"] = "the user's own value"
    shell.run_cell_magic("cuda_jit", "scale_vec", module_source(
        "static PyObject* only(PyObject* s, PyObject* a) { Py_RETURN_NONE; }", '{"only", only, METH_NOARGS, NULL},'))
    assert "version" not in shell.user_ns
    assert shell.user_ns["scale_vec"] == "the user's own value"
    assert callable(shell.user_ns["only"])


def test_verification_survives_an_unchanged_rerun_but_not_an_edit(shell, gcc, capsys):
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    spec.update_golden("jit/scale_vec", spec.GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale"))
    capsys.readouterr()
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    assert "golden verified (kept: source unchanged)" in capsys.readouterr().out
    assert spec.get_row("jit/scale_vec").golden.verified is True
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(2))
    assert "golden unverified" in capsys.readouterr().out
    assert spec.get_row("jit/scale_vec").golden.verified is False


def test_a_verified_cell_stays_verified_after_a_kernel_restart(shell, gcc, capsys):
    """verify() remembers a passing record by the cell's digest; a new kernel re-running the cell gets it."""
    from rapid_llm.kernels.verification import remembered
    from rapid_llm.notebook import cell_rows

    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    record = spec.GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale")
    remembered.remember_verification(spec.get_row("jit/scale_vec").target.digest, record, "scale")  # as verify() does
    cell_rows._digests.clear()  # a kernel restart: this process forgot the cell
    spec.unregister("jit/scale_vec")
    capsys.readouterr()
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    assert "golden verified (kept: source unchanged)" in capsys.readouterr().out
    assert spec.get_row("jit/scale_vec").golden == record
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(2))
    assert spec.get_row("jit/scale_vec").golden.verified is False


def test_a_flag_change_also_needs_reverification(shell, gcc):
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    spec.update_golden("jit/scale_vec", spec.GoldenRecord(verified=True, baseline="native/scale"))
    shell.run_cell_magic("cuda_jit", LINE + ' --flags "-O1"', scale_vec_cell(1))
    assert spec.get_row("jit/scale_vec").golden.verified is False


def test_compile_error_shows_cell_lines_and_the_last_good_build_keeps_serving(shell, gcc, tmp_path):
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    good_row = spec.get_row("jit/scale_vec")
    lines = scale_vec_cell(2).splitlines()
    lines.insert(5, "int broken = undefined_name;")
    with pytest.raises(CellBuildError) as info:
        shell.run_cell_magic("cuda_jit", LINE, "\n".join(lines))
    message = str(info.value)
    assert message.startswith("scale_vec: compile failed (csrc/elementwise/scale_vec.cu), 1 error:")
    # inserted as line 6 of the body: line 7 of the cell, the %%cuda_jit line being line 1
    assert "cell line 7: error: 'undefined_name' undeclared" in message
    assert "keeps serving: scale_vec(), version() and row jit/scale_vec unchanged" in message
    assert "--verbose" in message and str(tmp_path) not in message
    assert isinstance(info.value, jit.BuildError)
    assert shell.user_ns["version"]() == 1
    assert spec.get_row("jit/scale_vec") is good_row
    assert (tmp_path / "csrc" / "elementwise" / "scale_vec.cu").read_text() == "\n".join(lines)


def test_compile_error_prints_no_python_traceback(shell, gcc, capsys):
    result = shell.run_cell("%%cuda_jit broken\nint x = ;\n")
    assert isinstance(result.error_in_exec, CellBuildError)
    text = capsys.readouterr().out
    assert "cell line 2: error" in text
    assert "broken has no earlier good build in this kernel: nothing was bound or registered." in text
    assert "Traceback" not in text and "magics.py" not in text


def test_compile_error_with_no_earlier_build_registers_nothing(shell, gcc):
    with pytest.raises(CellBuildError):
        shell.run_cell_magic("cuda_jit", "broken --op scale", "int x = ;\n")
    assert "jit/broken" not in [r.name for r in spec.rows_for("scale")]


def test_verbose_shows_the_build_plan(shell, gcc, capsys):
    shell.run_cell_magic("cuda_jit", LINE + " --verbose", scale_vec_cell(1))
    out = capsys.readouterr().out
    assert "builder test-gcc" in out and "cache  " in out and "scale_vec.cu" in out


TWO_FUNCTIONS = module_source(
    "static PyObject* a(PyObject* s, PyObject* x) { Py_RETURN_NONE; }\n"
    "static PyObject* b(PyObject* s, PyObject* x) { Py_RETURN_NONE; }",
    '{"a", a, METH_VARARGS, NULL}, {"b", b, METH_VARARGS, NULL},',
)


def test_an_ambiguous_launcher_is_a_usage_error_listing_the_choices(shell, gcc):
    with pytest.raises(UsageError, match=r"exports a, b, none named 'two'; pass --fn FUNCTION"):
        shell.run_cell_magic("cuda_jit", "two --op scale", TWO_FUNCTIONS)
    assert "jit/two" not in [r.name for r in spec.rows_for("scale")]
    assert "a" not in shell.user_ns


def test_fn_picks_the_launcher(shell, gcc):
    shell.run_cell_magic("cuda_jit", "two --op scale --fn b", TWO_FUNCTIONS)
    assert "launcher b()" in spec.get_row("jit/two").description
    with pytest.raises(UsageError, match=r"--fn c: the module exports no function 'c' \(it exports: a, b\)"):
        shell.run_cell_magic("cuda_jit", "two --op scale --fn c", TWO_FUNCTIONS)


def test_the_status_line_says_what_is_notable_about_the_build(shell, gcc, capsys, monkeypatch):
    """Spills or occupancy below 50 % (rapid_llm.kernels.toolchain.buildfacts.notable) are said in the cell's one line."""
    from rapid_llm.kernels.toolchain import buildfacts

    monkeypatch.setattr(buildfacts, "notable", lambda facts, threads=256: ["k: 80 B spill stores, 96 B spill loads "
                                                                            "per thread", "k2: 25% occupancy", "k3"])
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(7))
    line = capsys.readouterr().out.splitlines()[0]
    assert "bound [k: 80 B spill stores, 96 B spill loads per thread; k2: 25% occupancy; +1 more]" in line


def test_a_cell_saved_over_during_its_build_is_built_as_written_and_says_so(shell, gcc, magics, monkeypatch, capsys):
    """Another process saves its cell of the same name while this one builds: this cell's text is what runs."""
    real_build = jit.build_jit

    def build_while_another_process_saves(name, source, **kwargs):
        source.write_text(scale_vec_cell(9))  # the other kernel's cell, landing mid-build
        return real_build(name, source, **kwargs)

    monkeypatch.setattr(jit, "build_jit", build_while_another_process_saves)
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    out = capsys.readouterr().out
    assert shell.user_ns["version"]() == 1
    assert ("csrc/elementwise/scale_vec.cu changed during the build (another process saved other content there): "
            "built this cell's content, kept at ") in out
    kept = magics.builds["scale_vec"].compiled_source
    assert kept.read_text() == scale_vec_cell(1) and spec.get_row("jit/scale_vec").target.built_from == kept


def test_a_build_bench_refused_stays_refused_in_the_next_kernel(shell, gcc, capsys):
    """A refusal is kept by the build's digest: a new kernel re-running the same cell gets the row refused (not
    recalled as verified), and an edited cell starts clean."""
    from rapid_llm.kernels.verification import remembered
    from rapid_llm.notebook import cell_rows

    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    digest = spec.get_row("jit/scale_vec").target.digest
    remembered.remember_verification(digest, spec.GoldenRecord(verified=True, baseline="native/scale"), "scale")
    why = "bench (fp32, numel=4097): timed_output_wrong: 3 of 29 checked calls wrong"
    spec.refuse("jit/scale_vec", why)
    remembered.remember_refusal(digest, "scale", why)  # what bench_op does when its bench refuses the row
    cell_rows._digests.clear()  # a kernel restart
    spec.unregister("jit/scale_vec")
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(1))
    row = spec.get_row("jit/scale_vec")
    assert not row.golden.verified and row.golden.refused == why
    shell.run_cell_magic("cuda_jit", LINE, scale_vec_cell(2))
    assert spec.get_row("jit/scale_vec").golden.refused is None
