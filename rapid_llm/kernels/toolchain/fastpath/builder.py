"""FastBuilder: host pass, kernel discovery, device pass, one link; see the package docstring."""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path
from types import ModuleType
from typing import Sequence

from rapid_llm.kernels.toolchain import buildfacts
from rapid_llm.kernels.toolchain.cache import (CUDA_INCLUDE, BuildError, BuildRequest, build_binary, cache_root, module_name,
                                           target_arch)
from rapid_llm.kernels.toolchain.fastpath import device, symbols

__all__ = ["FastBuilder", "HOST_FLAGS", "host_pass", "device_pass", "link", "host_support", "warm"]

#: -O1: a launcher is a few checks and a launch; -O2 doubles the host pass for nothing measurable.
HOST_FLAGS = ("-std=c++17", "-O1", "-fPIC", "-fvisibility=hidden", "-fvisibility-inlines-hidden")
_SHARED_FLAG_PREFIXES = ("-D", "-U", "-I")  # flags both passes must see


def _stub_source(cubin: Path, kernels: list[str]) -> str:
    """The table that ties host symbols to device kernels (same mangled names), and the cubin as data.

    Only the kernels and the cubin's path are filled in here: the table's symbols are
    rapid_llm_abi.h's (its kernel table), the one place the binding's names are spelled.
    """
    return "\n".join([
        "#define RL_TABLE_KERNELS(K) " + " ".join(f"K({s})" for s in kernels),
        f'#define RL_TABLE_CUBIN "{cubin}"',
        '#include "rapid_llm_abi.h"',
    ]) + "\n"


def warm(cxx: str | None = None) -> None:
    """Make the one-off, machine-wide builds now (host support, call binding), not inside a timed build."""
    from rapid_llm.kernels.toolchain.fastpath.binding import fastcall

    host_support(cxx or os.environ.get("CXX", _tool("g++")))
    fastcall()


def _warm_binding() -> None:
    from rapid_llm.kernels.toolchain.fastpath.binding import fastcall

    try:
        fastcall()
    except Exception:  # noqa: BLE001 - load_module raises it again, in the caller's thread
        pass


def host_support(cxx: str) -> tuple[tuple[str, ...], Path]:
    """The host pass's precompiled light header (as flags) and the runtime object every module links.

    Parsing the C++ standard headers and compiling the header's non-template
    code would be most of every host pass; both are done once per machine
    (cached like any build) instead. Without a usable PCH the source simply
    includes the header itself.
    """

    return _host_support(cxx, cache_root())


@functools.cache
def _host_support(cxx: str, root: Path) -> tuple[tuple[str, ...], Path]:

    common = CUDA_INCLUDE / "common"
    h = hashlib.sha256()
    for name in ("rapid_llm.cuh", "rapid_llm_abi.h", "rapid_llm_runtime.cpp"):
        h.update((common / name).read_bytes())
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    h.update(f"{cxx}\0{version}\0{HOST_FLAGS}".encode())
    key = h.hexdigest()
    request = BuildRequest("host_support", common / "rapid_llm_runtime.cpp", (), key, root / f"host_support_{key[:16]}")
    runtime = build_binary(request, _HostSupportBuilder(cxx))
    pch = runtime.parent / "rapid_llm_pch.h.gch"
    flags = ("-Winvalid-pch", f"-I{runtime.parent}", "-include", "rapid_llm_pch.h") if pch.is_file() else ()
    return flags, runtime


class _HostSupportBuilder:
    name = "host-support"

    def __init__(self, cxx: str) -> None:
        self.cxx = cxx

    def build(self, request) -> Path:  # noqa: ANN001 - a jit.BuildRequest

        common = CUDA_INCLUDE / "common"
        runtime = request.build_dir / "rapid_llm_runtime.o"
        cmd = [self.cxx, *HOST_FLAGS, f"-I{common}", "-c", str(common / "rapid_llm_runtime.cpp"), "-o", str(runtime)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"building the fast path's host runtime failed:\n{proc.stderr}", log=proc.stderr,
                             source=common / "rapid_llm_runtime.cpp")
        wrapper = request.build_dir / "rapid_llm_pch.h"
        wrapper.write_text('#include "common/rapid_llm.cuh"\n')
        subprocess.run([self.cxx, *HOST_FLAGS, f"-I{CUDA_INCLUDE}", f"-I{common}", "-x", "c++-header", str(wrapper),
                        "-o", str(wrapper) + ".gch"], capture_output=True, text=True)  # optional: a speed-up only
        return runtime


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"the fast build path needs {name} (binutils / the host C++ compiler) on PATH")
    return path


def _runner(src: Path, verbose: bool):
    """Run one compiler command; a failure is a BuildError carrying the compiler's own log (file:line kept)."""

    env = dict(os.environ, LC_ALL="C")

    def run(cmd: list[str], what: str) -> str:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        log = proc.stdout + proc.stderr
        if verbose:
            print("$ " + " ".join(cmd) + ("\n" + log if log.strip() else ""))
        if proc.returncode != 0:
            raise BuildError(f"building {src.name} failed in the {what}:\n{log}", log=log, source=src)
        return log

    return run


def host_pass(src: Path, out_dir: Path, flags: Sequence[str] = (),
              verbose: bool = False) -> tuple[Path, list[symbols.KernelRef]]:
    """Compile ``src``'s host code to ``out_dir/host.o``; return it and the kernels it launches.

    The host pass is the same for every GPU architecture: one pass serves them all.
    """

    includes = [f"-I{CUDA_INCLUDE}", f"-I{CUDA_INCLUDE / 'common'}", f"-I{src.parent}"]
    shared = [f for f in flags if f.startswith(_SHARED_FLAG_PREFIXES)]
    cxx = os.environ.get("CXX", _tool("g++"))
    host_obj = out_dir / "host.o"
    pch_flags, _ = host_support(cxx)
    _runner(src, verbose)([cxx, *HOST_FLAGS, *pch_flags, *includes, *shared, "-c", "-x", "c++", str(src),
                           "-o", str(host_obj)], "host pass")
    return host_obj, symbols.launched_kernels(host_obj)


def device_pass(src: Path, kernels: list[symbols.KernelRef], capability: str, out_dir: Path,
                flags: Sequence[str] = (), compiler: str | None = None, verbose: bool = False) -> device.DeviceCode:
    """``src``'s device code for one architecture ("9.0"), checked against the kernels the host code launches."""

    arch = device.arch_name(capability)
    try:
        code = device.compile_device(src, kernels, arch, flags, [CUDA_INCLUDE, CUDA_INCLUDE / "common"], work_dir=out_dir,
                                     compiler=compiler)
    except device.DeviceCompileError as exc:
        raise BuildError(f"building {src.name} failed in the device pass for {arch}: {exc}\n{exc.log}",
                         log=exc.log or str(exc), source=src) from None
    if verbose and code.log.strip():
        print(code.log)
    _check_agreement(kernels, code, src, arch)
    return code


def link(name: str, src: Path, out_dir: Path, host_obj: Path, code: device.DeviceCode,
         kernels: list[symbols.KernelRef], verbose: bool = False) -> Path:
    """The module's shared object: host code, host runtime, and the kernel table with the cubin embedded."""

    _, runtime = host_support(os.environ.get("CXX", _tool("g++")))
    cubin = out_dir / "kernels.cubin"
    cubin.write_bytes(code.cubin)
    stub = out_dir / "kernel_table.c"
    stub.write_text(_stub_source(cubin, [k.symbol for k in kernels]))
    so = out_dir / f"{name}.so"
    _runner(src, verbose)([os.environ.get("CC", _tool("gcc")), "-shared", "-fPIC", f"-I{CUDA_INCLUDE / 'common'}",
                           str(host_obj), str(runtime), str(stub), "-lstdc++", "-Wl,--no-undefined", "-o", str(so)],
                          "link")
    return so


class FastBuilder:
    """Builds a source that includes ``common/rapid_llm.cuh`` (and no torch header)."""

    name = "fast"
    #: Part of the cache key: a build of an older revision lacks what this one keeps (build_facts.json).
    revision = "3"

    def __init__(self, device_compiler: str | None = None) -> None:
        self.device_compiler = device_compiler  # "nvrtc", "nvcc" or None (NVRTC when found)

    def build(self, request) -> Path:  # noqa: ANN001 - a jit.BuildRequest

        src, out_dir, flags, verbose = request.source, request.build_dir, request.extra_cuda_cflags, request.verbose
        binding = threading.Thread(target=_warm_binding, daemon=True)
        binding.start()  # built once per Python; overlaps the host pass on a fresh machine
        host_obj, kernels = host_pass(src, out_dir, flags, verbose)
        code = device_pass(src, kernels, target_arch(), out_dir, flags, self.device_compiler, verbose)
        names = {code.lowered.get(k.name_expression, k.symbol): k.demangled for k in kernels}
        buildfacts.write_facts(out_dir / buildfacts.FACTS_FILE, buildfacts.parse_ptxas(code.log, names))
        if code.ptx:
            (out_dir / "kernels.ptx").write_text(code.ptx)
        binding.join()
        return link(request.name, src, out_dir, host_obj, code, kernels, verbose)

    @staticmethod
    def load(request, so: Path) -> ModuleType:  # noqa: ANN001 - a jit.BuildRequest
        from rapid_llm.kernels.toolchain.fastpath.binding import load_module

        module = load_module(so, module_name(request))
        module.__build_facts__ = buildfacts.read_facts(so.parent / buildfacts.FACTS_FILE) or {}
        return module


def _check_agreement(kernels: list[symbols.KernelRef], code: device.DeviceCode, src: Path, arch: str) -> None:

    problems = []
    for k in kernels:
        lowered = code.lowered.get(k.name_expression)
        if lowered is None:  # nvcc's pass: look for a kernel of that name with another signature
            same_name = [r for r in symbols.demangle(sorted(symbols.cubin_functions(code.cubin)))
                         if r.name_expression == k.name_expression]
            lowered = same_name[0].symbol if same_name else None
        if lowered is None:
            problems.append(f"the host code launches {k.demangled}, which the device code does not define")
        elif lowered != k.symbol:
            problems.append(f"the host code declares {k.demangled}, but the device code defines "
                            f"{_demangle(lowered)}: make the declaration match the definition")
    if problems:
        log = "\n".join(f"{src}: error: {p}" for p in problems)
        raise BuildError(f"building {src.name} for {arch} failed: host and device code disagree:\n{log}", log=log,
                         source=src)


def _demangle(symbol: str) -> str:
    proc = subprocess.run(["c++filt", symbol], capture_output=True, text=True)
    return proc.stdout.strip() or symbol
