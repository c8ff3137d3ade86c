"""Compiler logs become the cell's own line numbers, without the build tool's chatter."""
from __future__ import annotations

from pathlib import Path

from rapid_llm.notebook.compile_errors import MAX_LINES, CellBuildError, cell_diagnostics

CELL = Path("/proj/csrc/elementwise/scale_vec.cu")

#: The shape of a torch extension build failure: ninja's progress and command
#: lines, nvcc's diagnostics with context, a warning, the closing count.
NVCC_LOG = f"""Error building extension 'rapid_llm_jit_scale_vec_0123456789ab': [1/2] /usr/local/cuda/bin/nvcc -c {CELL} -o scale_vec.cuda.o
FAILED: scale_vec.cuda.o
/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c {CELL} -o scale_vec.cuda.o
{CELL}(12): error: identifier "fator" is undefined
      out[i] = in[i] * fator;
                       ^

{CELL}(20): warning #177-D: variable "unused" was declared but never referenced
      int unused;
          ^

{CELL}(14): error: no suitable conversion function from "at::Tensor" to "float *" exists
          detected during instantiation of "void launch<T>(T *) [with T=float]" at line 30 of {CELL}

/usr/include/torch/csrc/api.h(7): error: expected a ";"

3 errors detected in the compilation of "{CELL}".
ninja: build stopped: subcommand failed.
"""


def test_nvcc_errors_are_told_at_cell_lines_with_their_context():
    lines, count = cell_diagnostics(NVCC_LOG, CELL)
    assert count == 3
    assert lines[:3] == [
        'cell line 13: error: identifier "fator" is undefined',
        "      out[i] = in[i] * fator;",
        "                       ^",
    ]
    assert 'cell line 15: error: no suitable conversion function from "at::Tensor" to "float *" exists' in lines
    assert any(line.endswith("at cell line 31") for line in lines)
    assert '/usr/include/torch/csrc/api.h(7): error: expected a ";"' in lines


def test_warnings_and_build_chatter_are_left_out():
    text = "\n".join(cell_diagnostics(NVCC_LOG, CELL)[0])
    for chatter in ("warning", "unused", "FAILED", "ninja", "[1/2]", "--generate-dependencies", "detected in the"):
        assert chatter not in text


def test_host_compiler_errors_are_mapped_too():
    log = (f"{CELL}: In function 'void f()':\n"
           f"{CELL}:7:3: error: 'y' was not declared in this scope\n"
           "    7 |   y = 1;\n"
           "      |   ^\n"
           "ptxas error   : Entry function 'k' uses too much shared data (0x10000 bytes, 0xc000 max)\n")
    lines, count = cell_diagnostics(log, CELL)
    assert count == 2
    # one line down: the %%cuda_jit line is cell line 1 in the editor
    assert lines == ["cell line 8: error: 'y' was not declared in this scope", "    8 |   y = 1;", "      |   ^",
                     "ptxas error   : Entry function 'k' uses too much shared data (0x10000 bytes, 0xc000 max)"]


def test_an_unrecognised_log_comes_back_as_its_tail():
    log = "\n".join(f"line {i}" for i in range(50)) + "\nninja: build stopped: subcommand failed.\n"
    lines, count = cell_diagnostics(log, CELL)
    assert count == 0
    assert lines == [f"line {i}" for i in range(30, 50)]


def test_a_flood_of_errors_is_cut_short_with_a_pointer_to_verbose():
    log = "\n".join(f"{CELL}({i}): error: bad" for i in range(1, 100))
    lines, count = cell_diagnostics(log, CELL)
    assert count == 99
    assert len(lines) == MAX_LINES + 1 and "--verbose" in lines[-1]


def test_the_error_renders_as_its_message_alone():
    err = CellBuildError("scale_vec: compile failed\ncell line 3: error: x", log="raw", source=CELL)
    assert err._render_traceback_() == ["scale_vec: compile failed", "cell line 3: error: x"]
    assert err.log == "raw" and err.source == CELL


def test_the_first_error_comes_with_a_hint_and_notes_use_cell_lines():
    from rapid_llm.notebook.compile_errors import first_error

    log = (f'{CELL}(9): error: expected a ";"\n      int y = 2;\n      ^\n\n'
           f'{CELL}(14): error: identifier "y" is undefined\n'
           f'          detected during instantiation of "void k<T>(T *) [with T=float]" at line 30\n')
    lines, count = cell_diagnostics(log, CELL)
    assert count == 2
    assert any(line.endswith("at cell line 31") for line in lines)  # a note without "of FILE" is mapped too
    block, hint = first_error(lines)
    assert block[0] == 'cell line 10: error: expected a ";"'
    assert "';' is missing" in hint and "above cell line 10" in hint
    block, hint = first_error(lines[3:])
    assert block[0] == 'cell line 15: error: identifier "y" is undefined' and "not declared" in hint
