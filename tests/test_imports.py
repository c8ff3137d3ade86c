"""Importing the package must stay cheap: no triton, no cpp_extension, no JIT loader."""
from __future__ import annotations

import subprocess
import sys

HEAVY = ("triton", "torch.utils.cpp_extension", "rapid_llm.kernels.toolchain.jit", "matplotlib", "ipywidgets")


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_package_is_light():
    assert _loaded_after("import rapid_llm") == set()


def test_import_kernels_is_light():
    assert _loaded_after("import rapid_llm.kernels") == set()
    assert "torch" not in _loaded_after("import rapid_llm.kernels")


def test_op_lookup_and_explain_on_cpu_stay_light():
    code = ("import os; os.environ.pop('TRITON_INTERPRET', None)\n"
            "import torch, rapid_llm.kernels as K\n"
            "K.scale\nK.explain('scale', torch.ones(8))")
    assert _loaded_after(code) <= {"rapid_llm.kernels.toolchain.jit"}


def test_load_ext_imports_no_inspection_profiling_or_sanitizer_code():
    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            "InteractiveShell.instance().run_line_magic('load_ext', 'rapid_llm')")
    probe = (f"{code}\nimport sys\nprint(' '.join(m for m in {LOOK_INSIDE!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []


#: What only inspect(), profile() and verify(sanitize=...) need: loaded when called, never by %load_ext.
LOOK_INSIDE = ("rapid_llm.kernels.inspection.inspector", "rapid_llm.kernels.inspection.profiling", "rapid_llm.kernels.inspection.occupancy_api",
               "rapid_llm.kernels.inspection.triton_facts", "rapid_llm.kernels.verification.isolate")
