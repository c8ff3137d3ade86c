"""The call binding (``fastcall.c``), built once per Python, and loading modules through it."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Iterator

from rapid_llm.kernels.toolchain import cache
from rapid_llm.kernels.toolchain.cache import CUDA_INCLUDE, BuildError

__all__ = ["fastcall", "load_module", "set_dependent_launch", "plain_launches", "BINDING_SOURCE", "SOURCES",
           "DEPENDENT_LAUNCH_ENV"]

BINDING_SOURCE = Path(__file__).with_name("fastcall.c")
#: How its C kernels raise (C++, linked in).
RAISE_SOURCE = BINDING_SOURCE.with_name("fastcall_raise.cc")
#: The C half of dispatch (the per-call row cache, the C kernels torch's dispatcher calls): dispatch's own
#: sources, which fastcall.c includes; compiled into this one extension so a call never crosses two modules.
DISPATCH_C = Path(__file__).resolve().parents[2] / "dispatch"
#: Every source of the binding: what its build key covers and the package must carry.
SOURCES = (BINDING_SOURCE, DISPATCH_C / "fastcall_checked.inc", DISPATCH_C / "fastcall_dispatch.inc",
           DISPATCH_C / "fastcall_torch.inc", RAISE_SOURCE)
_MODULE = "_rapid_llm_fastcall"
#: ``=0``: rl::launch_dependent launches plainly from the start of the process (programmatically by default: see
#: set_dependent_launch).
DEPENDENT_LAUNCH_ENV = "RAPID_LLM_DEPENDENT_LAUNCH"
_plain_blocks = 0  # plain_launches blocks open now: a binding loaded inside one starts plain


class _BindingBuilder:
    """gcc, the Python headers and the ABI header: a CPython extension in a few hundred ms.

    The C is built with ``-fexceptions``: a C kernel called by torch's dispatcher raises by throwing through it
    (fastcall_raise.cc, compiled as C++)."""

    name = "fastcall-gcc"

    def build(self, request):  # noqa: ANN001 - a cache.BuildRequest

        out = request.build_dir / f"{_MODULE}{sysconfig.get_config_var('EXT_SUFFIX')}"
        cc = os.environ.get("CC", "gcc")
        raise_obj = request.build_dir / "fastcall_raise.o"
        steps = [[cc, "-x", "c++", "-std=c++17", "-c", "-fPIC", "-O2", str(RAISE_SOURCE), "-o", str(raise_obj)],
                 [cc, "-shared", "-fPIC", "-O2", "-std=gnu11", "-fexceptions", f"-I{sysconfig.get_paths()['include']}",
                  f"-I{CUDA_INCLUDE / 'common'}", f"-I{DISPATCH_C}", str(request.source), str(raise_obj), "-o", str(out), "-ldl",
                  "-lstdc++"]]
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
            if proc.returncode != 0:
                log = proc.stdout + proc.stderr
                raise BuildError(f"building the fast-path call binding failed:\n{log}", log=log, source=request.source)
        return out


@functools.cache
def fastcall() -> ModuleType:
    """The binding module, built on first use and cached on disk like any JIT build."""
    import torch

    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if api is None:
        raise RuntimeError(f"torch {torch.__version__} lacks the DLPack C exchange API that the fast path "
                           "calls through (torch >= 2.10); build with builder='torch' instead")
    h = hashlib.sha256()
    for path in (*SOURCES, cache.CUDA_INCLUDE / "common" / "rapid_llm_abi.h"):
        h.update(path.read_bytes())
    h.update(sys.version.encode())
    h.update(str(sysconfig.get_config_var("EXT_SUFFIX")).encode())
    key = h.hexdigest()
    request = cache.BuildRequest("fastcall", BINDING_SOURCE, (), key, cache.cache_root() / f"fastcall_{key[:16]}")
    so = cache.build_binary(request, _BindingBuilder())
    spec = importlib.util.spec_from_file_location(_MODULE, so)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {so}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.init(torch.Tensor, api, torch.nn.Parameter)
    module.set_dependent_launch(_default_setting())
    return module


def _default_setting() -> bool:
    return os.environ.get(DEPENDENT_LAUNCH_ENV, "1") != "0" and _plain_blocks == 0


def set_dependent_launch(on: bool) -> bool:
    """Whether kernels launched with ``rl::launch_dependent`` start as programmatic dependent launches (sm_90 and
    newer; see rapid_llm.cuh); returns the setting before. On unless DEPENDENT_LAUNCH_ENV=0.

    On an H200 a CUDA graph of rapid_llm ops back to back replays 6-7 % faster with them, and an eager call costs
    the host 0.3-0.8 us less (benchmarks/models/bench_dependent_launch.py). Timed alone between CUDA events, a
    call measures the same either way: the overlap is with the kernel before."""
    return bool(fastcall().set_dependent_launch(bool(on)))


@contextlib.contextmanager
def plain_launches() -> Iterator[None]:
    """Within it, ``rl::launch_dependent`` launches plainly. A binding first loaded inside it (a process that had
    not built it yet, and may have no compiler to) starts plain, and takes the default when the block ends."""
    global _plain_blocks
    loaded = fastcall.cache_info().currsize > 0
    before = set_dependent_launch(False) if loaded else None
    _plain_blocks += 1
    try:
        yield
    finally:
        _plain_blocks -= 1
        if before is not None:
            set_dependent_launch(before)
        elif fastcall.cache_info().currsize > 0:
            set_dependent_launch(_default_setting())


@dataclasses.dataclass(frozen=True)
class Signature:
    """A launcher's parameter kinds: t tensor, f float, i int, b bool."""

    name: str
    kinds: str


_LOADED: dict[str, ModuleType] = {}


def load_module(so: Path, name: str) -> ModuleType:
    """A module object whose attributes are the launchers ``so`` exports; loaded once per process.

    Builds are content-keyed, so one path is one build: an unchanged re-run
    gets the module it already has, an edited source a new path and module.
    """
    loaded = _LOADED.get(str(so))
    if loaded is not None:
        return loaded
    module = ModuleType(name, f"fast-path module built at {so}")
    module.__file__ = str(so)
    signatures = {}
    for fname, kinds, launcher in fastcall().load(str(so), module):
        setattr(module, fname, launcher)
        signatures[fname] = Signature(fname, kinds)
    module.__signatures__ = signatures
    _LOADED[str(so)] = module
    return module
