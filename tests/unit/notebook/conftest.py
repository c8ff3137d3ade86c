"""A shell with %load_ext rapid_llm, a private csrc/ and build cache, and no leaked rows."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels.registry import spec
from rapid_llm.notebook import cell_rows, magics as magics_module, progress
from tests.jit_builders import GccBuilder, module_source

NO_GPU = "no CUDA device visible (test)"
NO_NVCC = "nvcc not found (test)"

#: A C stand-in for a CUDA launcher, following the out-first convention:
#: scale_vec(out, input, factor) does out.copy_(input * factor); version()
#: tells which build is loaded.
SCALE_VEC = module_source(
    "static PyObject* scale_vec(PyObject* self, PyObject* args) {\n"
    "  PyObject *out, *input, *factor;\n"
    "  if (!PyArg_ParseTuple(args, \"OOO\", &out, &input, &factor)) return NULL;\n"
    "  PyObject* prod = PyNumber_Multiply(input, factor);\n"
    "  if (prod == NULL) return NULL;\n"
    "  PyObject* r = PyObject_CallMethod(out, \"copy_\", \"O\", prod);\n"
    "  Py_DECREF(prod);\n"
    "  if (r == NULL) return NULL;\n"
    "  Py_DECREF(r);\n"
    "  Py_RETURN_NONE;\n"
    "}\n"
    "static PyObject* version(PyObject* s, PyObject* a) { return PyLong_FromLong(VERSION); }\n",
    '{"scale_vec", scale_vec, METH_VARARGS, NULL}, {"version", version, METH_NOARGS, NULL},',
)


def scale_vec_cell(version: int = 1) -> str:
    return f"#define VERSION {version}\n{SCALE_VEC}"


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """IPython's shell with the extension loaded, writing under tmp_path only."""
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    sh = InteractiveShell.instance()
    sh.extension_manager.load_extension("rapid_llm")
    magics = sh.magics_manager.registry["CudaJitMagics"]
    magics.csrc_dir = str(tmp_path / "csrc")
    before = set(sh.user_ns)
    yield sh
    for name in list(cell_rows._digests):
        cell_rows.drop_cell_row(name.split("/", 1)[1])
    for name in set(sh.user_ns) - before:
        del sh.user_ns[name]
    sh.extension_manager.unload_extension("rapid_llm")
    sh.config.pop("CudaJitMagics", None)  # %config in a test must not reach the next one


@pytest.fixture
def magics(shell):
    return shell.magics_manager.registry["CudaJitMagics"]


@pytest.fixture
def no_gpu(monkeypatch):
    """The toolchain probe says no, on every machine (so GPU boxes take this path too)."""
    monkeypatch.setattr(jit, "available", lambda device=None: spec.Availability(False, NO_GPU))
    monkeypatch.setattr(jit, "can_compile", lambda source, builder=None: spec.Availability(False, NO_NVCC))


@pytest.fixture
def gcc(monkeypatch, magics, tmp_path) -> Path:
    """Builds really happen, with gcc standing in for nvcc; returns the build log path.

    The progress line stays quiet (its own tests are in test_progress.py): on a loaded machine a gcc build
    can pass the 0.3 s after which the line shows, and these tests read the cell's first line."""
    log = tmp_path / "builds.log"
    quiet = functools.partial(progress.run_with_progress, quiet_for=3600)
    monkeypatch.setattr(magics_module, "run_with_progress", quiet)
    monkeypatch.setattr(jit, "available", lambda device=None: spec.Availability(True))
    jit.register_builder("test-gcc", GccBuilder(log=log))
    magics.builder = "test-gcc"
    magics.default_flags = []
    return log


@pytest.fixture
def new_op_rows():
    """Unregisters native rows a test adds for a brand-new op."""
    added: list[str] = []
    yield added
    for name in added:
        spec.unregister(name)
