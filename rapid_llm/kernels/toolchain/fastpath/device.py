"""The device pass: a fast-path source's kernels to a cubin, through NVRTC or nvcc.

NVRTC compiles in-process in tens of milliseconds and instantiates exactly the
name expressions it is given; ``nvcc -cubin`` is the fallback where libnvrtc
is not found (it gets explicit instantiations appended instead). Both see the
source with ``__CUDACC__`` defined, so only its ``#if RL_DEVICE`` part.
"""
from __future__ import annotations

import ctypes
import re
import functools
import glob
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain.fastpath.symbols import KernelRef, cubin_functions

__all__ = ["DeviceCode", "DeviceCompileError", "compile_device", "nvrtc_library", "nvrtc_identity", "nvrtc_only_errors",
           "arch_name"]


class DeviceCompileError(RuntimeError):
    """The device pass failed; ``log`` is the compiler's own output."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


class DeviceCode:
    """A compiled cubin and the device symbol of each launched kernel."""

    def __init__(self, cubin: bytes, lowered: dict[str, str], compiler: str, log: str, ptx: str | None = None) -> None:
        self.cubin = cubin
        self.lowered = lowered  # name expression -> device symbol
        self.compiler = compiler
        self.log = log
        self.ptx = ptx  # NVRTC's PTX of the program (the nvcc pass keeps none)


def arch_name(capability: str) -> str:
    """``"9.0"`` -> ``"sm_90a"``: the arch-specific target, so Hopper-only instructions compile."""
    major, _, minor = capability.partition(".")
    suffix = "a" if int(major) >= 9 else ""
    return f"sm_{major}{minor or '0'}{suffix}"


def _nvrtc_folders() -> list[Path]:
    """Where libnvrtc may be: the CUDA toolkit, then the NVIDIA wheels torch installs."""
    dirs = []
    home = platform.cuda_home()
    if home is not None:
        dirs += [home / "lib64", home / "lib", home / "targets" / "x86_64-linux" / "lib"]
    for base in sys.path:
        dirs += [Path(p) for p in glob.glob(os.path.join(base, "nvidia", "*", "lib"))]
    return dirs


def _nvrtc_in(folder: Path) -> str | None:
    libs = [p for p in sorted(glob.glob(str(folder / "libnvrtc.so*"))) if "alt" not in Path(p).name]
    return libs[0] if libs else None


@functools.cache
def nvrtc_identity() -> str:
    """Which libnvrtc a build would use (path, size, mtime), without loading it: part of the build key."""
    for folder in _nvrtc_folders():
        lib = _nvrtc_in(folder)
        if lib is not None:
            st = os.stat(lib)
            return f"{os.path.realpath(lib)}:{st.st_size}:{st.st_mtime_ns}"
    return "none"


@functools.cache
def nvrtc_library() -> tuple[ctypes.CDLL, str] | None:
    """libnvrtc from the CUDA toolkit, else from the NVIDIA wheels torch installs; None if neither."""
    for d in _nvrtc_folders():
        lib_path = _nvrtc_in(d)
        if lib_path is None:
            continue
        try:
            # NVRTC dlopens its builtins by soname: load them first, from the same folder.
            for builtin in sorted(glob.glob(str(d / "libnvrtc-builtins.so*"))):
                if "alt" not in Path(builtin).name:
                    ctypes.CDLL(builtin, mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(lib_path)
        except OSError:
            continue
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return lib, f"NVRTC {major.value}.{minor.value}"
    return None


_FLAG_MAP = {"--use_fast_math": "--use_fast_math", "-use_fast_math": "--use_fast_math",
             "-lineinfo": "-lineinfo", "--generate-line-info": "-lineinfo"}


def _nvrtc_options(flags: Sequence[str]) -> list[str]:
    out = []
    for flag in flags:
        if flag.startswith("-O"):
            continue  # NVRTC always optimises device code
        out.append(_FLAG_MAP.get(flag, flag))
    return out


def _include_dirs(source: Path, include_dirs: Sequence[Path]) -> list[str]:
    home = platform.cuda_home()
    dirs = [str(source.parent), *map(str, include_dirs)]
    if home is not None:
        dirs += [str(home / "include"), str(home / "include" / "cccl")]
    return [d for d in dirs if os.path.isdir(d)]


def _compile_nvrtc(lib: ctypes.CDLL, version: str, source: Path, kernels: Sequence[KernelRef], arch: str,
                   flags: Sequence[str], include_dirs: Sequence[Path]) -> DeviceCode:
    prog = ctypes.c_void_p()
    text = source.read_bytes()
    check = _nvrtc_checker(lib)
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), text, str(source).encode(), 0, None, None), "create")
    try:
        for k in kernels:
            check(lib.nvrtcAddNameExpression(prog, k.name_expression.encode()), f"name {k.name_expression}")
        options = [f"--gpu-architecture={arch}", "-std=c++17", "--ptxas-options=-v",  # -v: build facts
                   *_no_nvrtc_cache(version),
                   *(f"-I{d}" for d in _include_dirs(source, include_dirs)), *_nvrtc_options(flags)]
        argv = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        result = lib.nvrtcCompileProgram(prog, len(options), argv)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log_buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log_buf)
        log = log_buf.value.decode(errors="replace")
        if result != 0:
            raise DeviceCompileError(f"device pass ({version}) failed", log)
        lowered = {}
        for k in kernels:
            name = ctypes.c_char_p()
            check(lib.nvrtcGetLoweredName(prog, k.name_expression.encode(), ctypes.byref(name)), "lowered name")
            lowered[k.name_expression] = name.value.decode()
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetCUBIN(prog, cubin), "cubin")
        ptx = None
        if lib.nvrtcGetPTXSize(prog, ctypes.byref(size)) == 0:
            buf = ctypes.create_string_buffer(size.value)
            ptx = buf.value.decode(errors="replace") if lib.nvrtcGetPTX(prog, buf) == 0 else None
        return DeviceCode(cubin.raw, lowered, version, log, ptx)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _no_nvrtc_cache(version: str) -> list[str]:
    """NVRTC 12.9 on keeps a cache of its own, and a program it finds there gets no ptxas report in its log
    (so no build facts); rapid_llm's build cache already keeps each build, so NVRTC's is turned off."""
    found = re.match(r"NVRTC (\d+)\.(\d+)", version)
    return ["--no-cache"] if found and (int(found[1]), int(found[2])) >= (12, 9) else []


def _nvrtc_checker(lib: ctypes.CDLL):
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def check(result: int, what: str) -> None:
        if result != 0:
            raise DeviceCompileError(f"NVRTC {what}: {lib.nvrtcGetErrorString(result).decode()}", "")

    return check


_STD_NAME = re.compile(r"(?<![\w:])std::\w+")


def nvrtc_only_errors(source: Path) -> list[str]:
    """What NVRTC would reject in ``source``'s ``#if RL_DEVICE`` part though nvcc accepts it: names of the C++
    standard library (``std::conditional_t``), which nvcc's device pass reaches through the host compiler's headers
    and NVRTC does not have (its few built-in headers, such as <cassert>, declare no ``std::`` names). The nvcc
    fallback refuses these too, in the compilers' ``file(line): error`` form, so a machine without libnvrtc (CPU CI)
    accepts only what a GPU machine's build accepts."""
    errors, depth = [], 0
    for number, line in enumerate(source.read_text(errors="replace").splitlines(), 1):
        code = line.split("//", 1)[0]
        directive = code.strip()
        if depth == 0:
            depth = 1 if re.match(r"#\s*if\s+RL_DEVICE\b", directive) else 0
            continue
        if re.match(r"#\s*if", directive):
            depth += 1
        elif re.match(r"#\s*endif", directive):
            depth -= 1
        found = _STD_NAME.search(code)
        if depth and found:
            errors.append(f"{source}({number}): error: {found[0]!r} in device code: NVRTC (the device pass of "
                          "a GPU machine's build) has no C++ standard library; use a CUDA builtin, cuda::std:: "
                          "(<cuda/std/...>) or a small template of your own")
    return errors


def _compile_nvcc(source: Path, kernels: Sequence[KernelRef], arch: str, flags: Sequence[str],
                  include_dirs: Sequence[Path], work_dir: Path) -> DeviceCode:
    nvcc = platform.nvcc_path()
    if nvcc is None:
        raise DeviceCompileError("device pass: neither libnvrtc nor nvcc was found", "")
    portability = nvrtc_only_errors(source)
    if portability:
        raise DeviceCompileError("device pass (nvcc -cubin) refused what NVRTC cannot compile",
                                 "\n".join(portability) + "\n")
    wrapper = work_dir / "device_pass.cu"
    lines = [f'#include "{source}"']
    lines += [k.instantiation for k in kernels if k.is_template]
    wrapper.write_text("\n".join(lines) + "\n")
    out = work_dir / "device_pass.cubin"
    virtual = arch.replace("sm_", "compute_")
    cmd = [nvcc, "-cubin", f"-gencode=arch={virtual},code={arch}", "-std=c++17", "-Xptxas=-v",  # -v: build facts
           *(f"-I{d}" for d in _include_dirs(source, include_dirs)), *flags, str(wrapper), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise DeviceCompileError("device pass (nvcc -cubin) failed", log)
    cubin = out.read_bytes()
    defined = cubin_functions(cubin)
    return DeviceCode(cubin, {k.name_expression: k.symbol for k in kernels if k.symbol in defined}, "nvcc", log)


def compile_device(source: Path, kernels: Sequence[KernelRef], arch: str, flags: Sequence[str] = (),
                   include_dirs: Sequence[Path] = (), work_dir: Path | None = None,
                   compiler: str | None = None) -> DeviceCode:
    """Compile ``source``'s device code for ``arch``, instantiating ``kernels``.

    ``compiler`` forces "nvrtc" or "nvcc" (default: NVRTC when found).
    """
    nvrtc = nvrtc_library() if compiler in (None, "nvrtc") else None
    if compiler == "nvrtc" and nvrtc is None:
        raise DeviceCompileError("device pass: libnvrtc not found (install the CUDA toolkit or nvidia-cuda-nvrtc)", "")
    if nvrtc is not None:
        return _compile_nvrtc(nvrtc[0], nvrtc[1], source, kernels, arch, flags, include_dirs)
    if work_dir is None:
        raise ValueError("the nvcc device pass needs a work_dir")
    return _compile_nvcc(source, kernels, arch, flags, include_dirs, work_dir)
