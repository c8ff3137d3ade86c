"""JIT builds of CUDA sources: the toolchain probe, the build paths, and the loader rows call.

Builders are pluggable (:class:`Builder`). A source that includes torch's
headers (or defines a ``PYBIND11_MODULE``) builds through torch's
``cpp_extension``, as the seed tutorial says; any other source builds through
the fast path (:mod:`rapid_llm.kernels.toolchain.fastpath`), which compiles host and
device code separately without torch headers, in well under a second. Every
build goes through the content-keyed, kill-safe cache of
:mod:`rapid_llm.kernels.toolchain.cache`.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Sequence

from rapid_llm.kernels.toolchain.cache import (
    CUDA_INCLUDE,
    BuildError,
    Builder,
    BuildRequest,
    BuildResult,
    build_binary,
    fetch_binary,
    import_binary,
    cache_key,
    cache_root,
    module_name,
    nvcc_path,
    resolve_source,
    sources_root,
    target_arch,
)
from rapid_llm.kernels.toolchain import snapshot
from rapid_llm.kernels.toolchain.cache_safety import CacheError, disk_fault
from rapid_llm.kernels.registry.spec import Availability

if TYPE_CHECKING:
    from rapid_llm.kernels.toolchain.fastpath.compile_check import CompileReport

__all__ = [
    "available",
    "can_compile",
    "target_arch_name",
    "load_jit",
    "build_jit",
    "compile_check",
    "BuildRequest",
    "BuildResult",
    "BuildError",
    "CacheError",
    "Builder",
    "TorchExtensionBuilder",
    "register_builder",
    "builders",
    "default_builder",
    "build_binary",
    "module_name",
    "target_arch",
    "cache_root",
    "CUDA_INCLUDE",
]

#: What marks a source for torch's loader: its headers, or a pybind11 module.
_TORCH_SOURCE_RE = re.compile(r'^\s*(?:#\s*include\s*[<"](?:torch|ATen|c10|pybind11)/|PYBIND11_MODULE\b)', re.M)


def available(device: Any = None) -> Availability:
    """Toolchain probe for JIT rows. Cheap: never compiles, never imports cpp_extension."""
    import torch

    if torch.version.cuda is None:
        return Availability(False, f"torch {torch.__version__} is a CPU-only build (no CUDA runtime)")
    if not torch.cuda.is_available():
        return Availability(False, "no CUDA device visible (torch.cuda.is_available() is False)")
    if nvcc_path() is None:
        return Availability(False, "nvcc not found (put the CUDA toolkit's bin on PATH or set CUDA_HOME)")
    return Availability(True)


class TorchExtensionBuilder:
    """torch.utils.cpp_extension with ninja: the reference path, torch headers and all."""

    name = "torch-cpp-extension"

    def build(self, request: BuildRequest) -> Path:
        from torch.utils.cpp_extension import CUDA_HOME, load

        if CUDA_HOME is None:
            raise RuntimeError("JIT kernels need a CUDA toolkit (CUDA_HOME unset and nvcc not on PATH)")
        if shutil.which("ninja") is None and importlib.util.find_spec("ninja") is None:
            raise RuntimeError("torch's extension loader needs ninja (pip install ninja)")
        mod_name = module_name(request)
        try:
            # is_python_module=False: torch only dlopens the library; build_jit
            # imports it once, from the published directory (a second import
            # would run the module's init twice).
            load(
                name=mod_name,
                sources=[str(request.source)],
                extra_cuda_cflags=list(request.extra_cuda_cflags),
                extra_include_paths=[str(CUDA_INCLUDE)],  # "common/checks.cuh" resolves from any source
                build_directory=str(request.build_dir),
                verbose=request.verbose,
                is_python_module=False,
            )
        except RuntimeError as exc:
            raise BuildError(
                f"building {request.source.name} failed:\n{exc}", log=str(exc), source=request.source
            ) from None
        so = request.build_dir / f"{mod_name}.so"
        if not so.exists():
            found = sorted(request.build_dir.glob(f"{mod_name}*.so"))
            if not found:
                raise RuntimeError(f"build of {mod_name} produced no shared object in {request.build_dir}")
            so = found[0]
        return so


def _fast_builder() -> Builder:
    from rapid_llm.kernels.toolchain.fastpath.builder import FastBuilder

    return FastBuilder()


_BUILDERS: dict[str, Builder] = {"torch": TorchExtensionBuilder()}
_LAZY_BUILDERS = {"fast": _fast_builder}


def _builder(key: str) -> Builder:
    if key not in _BUILDERS and key in _LAZY_BUILDERS:
        _BUILDERS[key] = _LAZY_BUILDERS[key]()
    return _BUILDERS[key]


def default_builder(source: str | os.PathLike | snapshot.Snapshot) -> str:
    """"torch" for a source (or local header) that includes torch's headers, else "fast"."""
    snap = source if isinstance(source, snapshot.Snapshot) else snapshot.take(resolve_source(source))
    texts = [data for _, data in snap.files] + [path.read_bytes() for path, _ in snap.shared]
    return "torch" if any(_TORCH_SOURCE_RE.search(t.decode(errors="replace")) for t in texts) else "fast"


def register_builder(key: str, builder: Builder) -> None:
    """Add a build path (for example a direct nvcc build without torch headers)."""
    _BUILDERS[key] = builder


def builders() -> tuple[str, ...]:
    """The registered build paths' keys (what ``build_jit(builder=...)`` accepts)."""
    return tuple(sorted({*_BUILDERS, *_LAZY_BUILDERS}))


def build_jit(name: str, source: str | os.PathLike, *, extra_cuda_cflags: Sequence[str] = ("-O3",),
              builder: str | None = None, verbose: bool = False, text: str | None = None) -> BuildResult:
    """Build (or load from the disk cache) ``source``; hashes the source on every call.

    Use this where the source may have changed since the last call (the
    notebook magic). The per-call path of a row uses :func:`load_jit`.
    The source and the headers it includes are read once (``text``, when
    given, is the source's content, as a cell saved it: another process may
    save another cell to the same path meanwhile); that snapshot is what is
    hashed and compiled (rapid_llm.kernels.toolchain.snapshot).
    """
    if not name.isidentifier():
        raise ValueError(f"JIT module name must be an identifier, got {name!r}")
    start = time.perf_counter()
    path = resolve_source(source)
    flags = tuple(extra_cuda_cflags)
    snap = snapshot.take(path, text)
    key_name = builder or default_builder(snap)
    if key_name not in builders():
        raise ValueError(f"unknown JIT builder {builder!r}; registered: {', '.join(builders())}")
    chosen = _builder(key_name)
    key = cache_key(snap, flags, key_name + getattr(chosen, "revision", ""))
    build_dir = cache_root() / f"{name}_{key[:16]}"
    try:
        copy = snapshot.materialize(snap, sources_root())
    except OSError as exc:
        raise (disk_fault(exc, sources_root()) or exc) from None
    request = BuildRequest(name, copy, flags, key, build_dir, verbose, snap)
    try:
        so, cached = fetch_binary(request, chosen)
    except BuildError as exc:
        raise _told_at_origin(exc, copy, snap) from None
    loader = getattr(chosen, "load", None)
    module = loader(request, so) if loader is not None else import_binary(request, so)
    return BuildResult(module, cached, time.perf_counter() - start, build_dir, chosen.name, path, snap, copy)


def _told_at_origin(exc: BuildError, copy: Path, snap: snapshot.Snapshot) -> BuildError:
    """The compiler named the cached copy's paths: name the user's files instead."""
    copy_root = copy
    for _ in Path(snap.source_relpath).parts:
        copy_root = copy_root.parent
    told = str(copy_root), str(snap.root)
    return BuildError(str(exc).replace(*told), exc.log.replace(*told), snap.origin)


def compile_check(source: str | os.PathLike, archs: Sequence[str] | None = None, *,
                  extra_cuda_cflags: Sequence[str] = ("-O3",), device_compiler: str | None = None) -> CompileReport:
    """Compile ``source`` for each of ``archs`` ("9.0"; default: the supported ones nvcc can target), load nothing.

    Needs no GPU: it is how CPU CI keeps a source that does not compile for one
    of the supported architectures from landing. Raises :class:`BuildError`
    (naming the pass and the arch; ``log`` keeps the compiler's file:line) at
    the first failure. A source with torch's headers is refused (ValueError):
    only torch's ``cpp_extension`` builds it, a minute a build, against a CUDA torch.
    """
    from rapid_llm.kernels import platform
    from rapid_llm.kernels.toolchain.fastpath.compile_check import check_fast_source

    path = resolve_source(source)
    if default_builder(path) != "fast":
        raise ValueError(f"{path.name} includes torch's headers (or defines a PYBIND11_MODULE), so only torch's "
                         "cpp_extension builds it, and compile_check covers fast-path sources only: build it with "
                         "build_jit on a machine with CUDA, or include \"common/rapid_llm.cuh\" instead of torch's "
                         "headers")
    if archs is None:
        archs = platform.supported_archs()
        if not archs:
            raise RuntimeError("compile_check: nvcc not found, or it targets none of "
                               f"{', '.join(platform.SUPPORTED_ARCHS)} (put the CUDA toolkit's bin on PATH or set "
                               "CUDA_HOME)")
    return check_fast_source(path, tuple(archs), tuple(extra_cuda_cflags), device_compiler)


def load_jit(name: str, source: str, *, extra_cuda_cflags: tuple[str, ...] = ("-O3",)) -> ModuleType:
    """Compile ``source`` (relative to the ops, ``kernels/ops/``: ``norm/rms_norm/rms_norm.cu``) on first use in this
    process; return the extension module.

    Memoised per process on (name, source, flags) and the file as it stands
    (its inode, size and modification time: one stat), so the per-row first
    call costs one lookup, and a file rewritten since (a cell saved again,
    atomically) is built anew. A process that lives across edits (the verify
    worker) therefore never runs an older build of a path. The disk cache
    under it is keyed by content.
    """
    return _load_jit(name, source, tuple(extra_cuda_cflags), _file_stamp(source))


def _file_stamp(source: str | os.PathLike) -> tuple[int, int, int]:
    try:
        st = resolve_source(source).stat()
    except OSError:  # build_jit says what is missing, in its own words
        return (0, 0, 0)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@functools.cache
def _load_jit(name: str, source: str, flags: tuple[str, ...], stamp: tuple[int, int, int]) -> ModuleType:
    return build_jit(name, source, extra_cuda_cflags=flags).module


load_jit.cache_clear = _load_jit.cache_clear  # type: ignore[attr-defined]


def can_compile(source: str | os.PathLike, builder: str | None = None) -> Availability:
    """Whether ``source`` can be built here though it cannot run (no CUDA device, or a CPU build of torch).

    The fast path needs no GPU and no CUDA runtime: a host compiler and nvcc (or NVRTC) compile both
    halves, so compiler errors show on a laptop exactly as on the GPU box. torch's extension loader
    needs a CUDA build of torch.
    """
    key = builder or default_builder(source)
    if key != "fast":
        return Availability(False, "a cell that includes torch's headers builds only with a CUDA build of torch "
                                   "(a cell on the fast path, with common/rapid_llm.cuh, compiles here)")
    if nvcc_path() is None:
        return Availability(False, "nvcc not found, so the cell is not compiled either (put the CUDA "
                                   "toolkit's bin on PATH or set CUDA_HOME)")
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        return Availability(False, "no host C++ compiler (g++ or $CXX) to compile the cell's host code")
    return Availability(True)


def target_arch_name() -> str:
    """The GPU architecture builds here target, as ``sm_90a`` (the device's, else TORCH_CUDA_ARCH_LIST's)."""
    from rapid_llm.kernels.toolchain.fastpath.device import arch_name

    return arch_name(target_arch())
