"""A real JIT builder for CPU-only machines: gcc compiles a tiny CPython extension.

It lets the cache, the lock and the notebook magic be tested end to end
(compile, publish, import, call) without CUDA. The source names its module
through the ``MODNAME`` macro, the way torch's ``TORCH_EXTENSION_NAME`` does,
because the module name carries the cache key and so cannot be written into
the source itself.
"""
from __future__ import annotations

import os
import subprocess
import sysconfig
import time
from pathlib import Path

from rapid_llm.kernels.toolchain import jit

#: Module boilerplate; a test source supplies ``METHODS``, the method table entries.
PRELUDE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define RL_CAT2(a, b) a##b
#define RL_CAT(a, b) RL_CAT2(a, b)
#define RL_STR2(a) #a
#define RL_STR(a) RL_STR2(a)
"""

EPILOGUE = r"""
static PyMethodDef rl_methods[] = { METHODS {NULL, NULL, 0, NULL} };
static struct PyModuleDef rl_module = {PyModuleDef_HEAD_INIT, RL_STR(MODNAME), NULL, -1, rl_methods};
PyMODINIT_FUNC RL_CAT(PyInit_, MODNAME)(void) { return PyModule_Create(&rl_module); }
"""


def module_source(body: str, methods: str) -> str:
    """A complete extension source: C functions in ``body``, their table entries in ``methods``."""
    return f"{PRELUDE}\n{body}\n#define METHODS {methods}\n{EPILOGUE}"


def answer_source(value: int, comment: str = "") -> str:
    """A module whose ``answer()`` returns ``value``: what runs shows which build is loaded."""
    body = f"/* {comment} */\nstatic PyObject* answer(PyObject* s, PyObject* a) {{ return PyLong_FromLong({value}); }}"
    return module_source(body, '{"answer", answer, METH_NOARGS, NULL},')


class GccBuilder:
    """Builds ``request.source`` as C with gcc; records each real build in ``log``.

    ``delay`` seconds are slept mid-build (after torch-style ``lock`` and a
    partial object are written), so a test can kill a build half-way.
    """

    name = "test-gcc"

    def __init__(self, log: Path | None = None, delay: float = 0.0, started: Path | None = None) -> None:
        self.log = log
        self.delay = delay
        self.started = started

    def build(self, request: jit.BuildRequest) -> Path:
        mod_name = f"rapid_llm_jit_{request.name}_{request.key[:12]}"
        out = request.build_dir / f"{mod_name}{sysconfig.get_config_var('EXT_SUFFIX')}"
        (request.build_dir / "lock").write_text("")  # what torch's FileBaton leaves if killed
        (request.build_dir / "partial.o").write_bytes(b"\0" * 64)
        if self.started is not None:
            self.started.write_text(str(os.getpid()))
        if self.delay:
            time.sleep(self.delay)
        cmd = ["gcc", "-x", "c", "-shared", "-fPIC", "-O0", f"-DMODNAME={mod_name}",
               f"-I{sysconfig.get_paths()['include']}", *request.extra_cuda_cflags,
               str(request.source), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
        if proc.returncode != 0:
            log = proc.stdout + proc.stderr
            raise jit.BuildError(f"building {request.source.name} failed:\n{log}", log=log, source=request.source)
        (request.build_dir / "lock").unlink()
        if self.log is not None:
            with open(self.log, "a") as fh:
                fh.write(f"{os.getpid()} {request.key[:12]}\n")
        return out

