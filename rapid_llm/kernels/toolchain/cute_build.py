"""CuTe DSL kernels as fast-path modules: compiled once, kept in the content-keyed cache, loaded without the DSL.

The CuTe DSL has no disk cache of its own: ``cute.compile`` traces and compiles again in every process (about
0.2-1 s per specialisation here, far more for large kernels), and its own call paths cost Python time on every
call. A CuTe row here instead compiles its kernels to a cubin (``cute.compile(..., options="--gpu-arch
sm_90a --keep-cubin")``, which needs no GPU), and links that cubin with a small C++ launcher (fast-path host
code, ``rapid_llm.cuh``) into one shared object, published in the build cache (rapid_llm.kernels.toolchain.cache)
under a key of everything that changes it: the kernel module's bytes, the launcher and the headers it includes,
the specialisation, the DSL's version, the target arch and the host compiler. A later process finds the entry by
that key and loads it in milliseconds without importing the DSL; a call is the launcher's checks and one
``cuLaunchKernel`` through the project's call binding.

Each build keeps the facts of its kernels (registers, stack frame, static shared memory, block size), read from
the cubin (rapid_llm.kernels.toolchain.cubin_facts), as ``build_facts.json``: the module's ``__build_facts__``.

The kernels' parameters must be plain (pointers, integers, floats): the launcher declares them ``extern "C"``
with the cubin's symbols and passes them as a CUDA C++ kernel's, and the build checks each kernel's PTX
parameters against the types the kernel module declares, so a launcher and kernel that disagree fail the
build, not a call.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import os
import re
import shutil
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

from rapid_llm.kernels.toolchain import buildfacts, cubin_facts, cute_support
from rapid_llm.kernels.toolchain.cache import (BuildError, BuildRequest, cache_root, fetch_binary, local_sources,
                                               target_arch)

__all__ = ["CuteBuild", "CuteBuilder", "build_key", "load", "kernel_entries", "block_sizes", "REVISION"]

#: Part of every key: a build of an older revision of this module may lack what this one writes.
REVISION = "2"

_LOADED: dict[str, ModuleType] = {}
_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class CuteBuild:
    """One specialisation of a CuTe row: what to compile, what to link it with, and how to check the two agree.

    ``compile`` is (or names, as ``module:function``) a function taking (``specialisation``, arch such as
    "sm_90a", a folder for the DSL's own copies) and returning the cubin and its PTX; it is imported only to
    build. ``defines`` is (or names) a function taking the specialisation and the kernels' symbols in launch
    order and returning the launcher's -D macros. ``params`` are the PTX types (``u64``, ``u32``, ``f32``...)
    every kernel takes, in order.
    """

    name: str
    kernel_source: Path
    host_source: Path
    specialisation: Mapping[str, Any]
    compile: str | Callable[..., tuple[bytes, str]]
    defines: str | Callable[..., dict[str, str]]
    params: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"CuteBuild: name must be an identifier, got {self.name!r}")


@functools.cache
def _cxx_identity() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or "g++"
    try:
        st = os.stat(os.path.realpath(cxx))
        return f"{os.path.realpath(cxx)}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return cxx


def build_key(build: CuteBuild, arch: str) -> str:
    """The cache key of ``build`` for ``arch``: the bytes of the kernel module, the launcher and the headers it
    includes, the specialisation, the DSL's version, the host compiler and Python. Reads files only."""
    h = hashlib.sha256()
    for part in (f"cute-{REVISION}", build.name, arch, json.dumps(dict(build.specialisation), sort_keys=True),
                 str(cute_support.dsl_version()), _cxx_identity(), sys.version, repr(build.params)):
        h.update(part.encode())
        h.update(b"\0")
    for path in (build.kernel_source, *local_sources(build.host_source)):
        h.update(path.name.encode())
        h.update(b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def _resolve(ref: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(ref):  # a notebook's (rapid_llm.kernels.toolchain.cute_cells)
        return ref
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the DSL colours its diagnostics for a terminal
_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(([^)]*)\)", re.S)
_REQNTID = re.compile(r"\)\s*\.reqntid\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?")
_PARAM = re.compile(r"\.param\s+\.(\w+)")


def block_sizes(ptx: str) -> dict[str, int]:
    """Each kernel's fixed block size (threads), from its ``.reqntid``, where the PTX states one."""
    found = {}
    for m in _ENTRY.finditer(ptx):
        req = _REQNTID.match(ptx, m.end() - 1)
        if req:
            found[m[1]] = int(req[1]) * int(req[2] or 1) * int(req[3] or 1)
    return found


def kernel_entries(ptx: str) -> list[tuple[str, tuple[str, ...]]]:
    """Each kernel of ``ptx`` with its parameters' types, in launch order (the DSL numbers its kernels ``_0``,
    ``_1``... by the order the traced function launches them)."""
    entries = [(m[1], tuple(_PARAM.findall(m[2]))) for m in _ENTRY.finditer(ptx)]
    return sorted(entries, key=lambda e: int(re.search(r"_(\d+)$", e[0])[1]) if re.search(r"_(\d+)$", e[0]) else 0)


class CuteBuilder:
    """Compiles a :class:`CuteBuild` with the DSL and links it as a fast-path module (a cache Builder)."""

    name = "cute"

    def __init__(self, build: CuteBuild, arch: str) -> None:
        self.cute = build
        self.arch = arch

    def build(self, request: BuildRequest) -> Path:
        from rapid_llm.kernels.toolchain.fastpath import builder as fast
        from rapid_llm.kernels.toolchain.fastpath.device import DeviceCode

        out_dir = request.build_dir
        try:
            dump = out_dir / "dsl"  # the DSL writes the cubin and PTX it keeps into a folder: this build's, not the cwd
            dump.mkdir()
            cubin, ptx = _resolve(self.cute.compile)(dict(self.cute.specialisation), self.arch, str(dump))
        except BuildError:
            raise
        except Exception as exc:  # the DSL's own diagnostics name the kernel's file and line; keep them whole
            log = _ANSI.sub("", str(exc)).strip()
            raise BuildError(f"compiling {self.cute.name} (CuTe DSL) for {self.arch} failed; the DSL says, at the "
                             f"kernel's own file and line (a notebook cell's, for a cell):\n{log}", log=log,
                             source=self.cute.kernel_source) from exc
        (out_dir / "kernels.ptx").write_text(ptx)
        entries = kernel_entries(ptx)
        wrong = [f"{name} takes ({', '.join(params)})" for name, params in entries if params != self.cute.params]
        if not entries or wrong:
            log = "\n".join(wrong) or "the PTX defines no kernel"
            raise BuildError(f"building {self.cute.name}: the launcher passes ({', '.join(self.cute.params)}), but\n"
                             f"{log}", log=log, source=self.cute.kernel_source)
        defines = _resolve(self.cute.defines)(dict(self.cute.specialisation), [name for name, _ in entries])
        flags = [f"-D{k}={v}" for k, v in defines.items()]
        host_obj, kernels = fast.host_pass(self.cute.host_source, out_dir, flags, request.verbose)
        code = DeviceCode(cubin, {k.name_expression: k.symbol for k in kernels}, "CuTe DSL", "", ptx)
        missing = [k.symbol for k in kernels if k.symbol not in {name for name, _ in entries}]
        if missing:
            log = "\n".join(f"{self.cute.host_source}: error: launches {s}, which the cubin does not define"
                            for s in missing)
            raise BuildError(f"building {self.cute.name}: launcher and kernels disagree:\n{log}", log=log,
                             source=self.cute.host_source)
        facts = cubin_facts.kernel_facts(cubin, self.arch, block_sizes(ptx))
        buildfacts.write_facts(out_dir / buildfacts.FACTS_FILE, facts)  # what inspect and FastBuilder.load read
        (out_dir / "cute_build.json").write_text(json.dumps(
            {"specialisation": dict(self.cute.specialisation), "arch": self.arch, "kernels": dict(entries),
             "dsl": cute_support.dsl_version(), "defines": defines}, indent=1))
        return fast.link(request.name, self.cute.host_source, out_dir, host_obj, code, kernels, request.verbose)


def request_for(build: CuteBuild, arch: str, verbose: bool = False) -> BuildRequest:
    """The cache request of ``build`` for ``arch``: its key and the folder it is published in."""
    key = build_key(build, arch)
    return BuildRequest(build.name, build.host_source, (), key, cache_root() / f"{build.name}_{key[:16]}", verbose)


def load(build: CuteBuild, arch: str | None = None, verbose: bool = False) -> tuple[ModuleType, bool]:
    """The fast-path module of ``build`` for ``arch`` (default: the current device's, e.g. "sm_90a"), and whether
    it came from the cache. Compiles with the DSL only when the cache has no intact entry for its key."""
    from rapid_llm.kernels.toolchain.fastpath.builder import FastBuilder
    from rapid_llm.kernels.toolchain.fastpath.device import arch_name

    arch = arch or arch_name(target_arch())
    request = request_for(build, arch, verbose)
    with _LOCK:
        module = _LOADED.get(request.key)
        if module is not None:
            return module, True
        so, cached = fetch_binary(request, CuteBuilder(build, arch))
        module = FastBuilder.load(request, so)
        _LOADED[request.key] = module
    return module, cached


def defines_of(values: Mapping[str, Any], symbols: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    """``values`` as -D macros, with ``names[i]`` bound to ``symbols[i]`` (a helper for a row's ``defines``)."""
    if len(symbols) != len(names):
        raise BuildError(f"expected {len(names)} kernels ({', '.join(names)}), the cubin has {len(symbols)}",
                         log="", source=Path("<cute>"))
    return {**{k: str(v) for k, v in values.items()}, **dict(zip(names, symbols))}
