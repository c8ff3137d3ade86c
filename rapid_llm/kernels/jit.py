"""Cached JIT compilation of CUDA sources, with a cache key that cannot go stale.

The on-disk build directory is named by a hash of everything that changes the
binary: the source text and the local headers it includes, the flags, the
torch and CUDA versions and the target arch. Editing a source or a flag
therefore builds afresh without a manual name bump, and an unchanged source
loads from disk in a new process.

A build is guarded by an ``flock`` on a file beside the build directory. The
kernel drops an ``flock`` when its holder dies, so a build killed half-way
(kernel restart, SIGKILL) never leaves a lock that hangs the next build, as
torch's own ``lock`` file does. Each build runs in a fresh staging directory
and is published by renaming it into place, manifest included: the cache
directory is complete or absent, and neither a dead build's files (torch's
``lock``, a half-written object) nor a compiler it orphaned can reach the next
build. The manifest holds the binary's sha256; a cached binary that does not
match it (truncated, corrupted) is rebuilt, never loaded.

Builders are pluggable (:class:`Builder`). A source that includes torch's
headers (or defines a ``PYBIND11_MODULE``) builds through torch's
``cpp_extension``, as the seed tutorial says; any other source builds through
the fast path (:mod:`rapid_llm.kernels.fastpath`), which compiles host and
device code separately without torch headers, in well under a second.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Protocol, Sequence

from rapid_llm.kernels.spec import Availability

__all__ = [
    "available",
    "load_jit",
    "build_jit",
    "BuildRequest",
    "BuildResult",
    "BuildError",
    "Builder",
    "TorchExtensionBuilder",
    "register_builder",
    "builders",
    "default_builder",
    "build_binary",
    "module_name",
    "target_arch",
    "cache_root",
    "CSRC",
]

CSRC = Path(__file__).parent / "csrc"
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
#: What marks a source for torch's loader: its headers, or a pybind11 module.
_TORCH_SOURCE_RE = re.compile(r'^\s*(?:#\s*include\s*[<"](?:torch|ATen|c10|pybind11)/|PYBIND11_MODULE\b)', re.M)
MANIFEST = "rapid_llm_manifest.json"


class BuildError(RuntimeError):
    """A source failed to compile; the message carries the compiler's log."""

    def __init__(self, message: str, log: str, source: Path) -> None:
        super().__init__(message)
        self.log = log
        self.source = source


def _nvcc_path() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
        return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


def available(device: Any = None) -> Availability:
    """Toolchain probe for JIT rows. Cheap: never compiles, never imports cpp_extension."""
    import torch

    if torch.version.cuda is None:
        return Availability(False, f"torch {torch.__version__} is a CPU-only build (no CUDA runtime)")
    if not torch.cuda.is_available():
        return Availability(False, "no CUDA device visible (torch.cuda.is_available() is False)")
    if _nvcc_path() is None:
        return Availability(False, "nvcc not found (put the CUDA toolkit's bin on PATH or set CUDA_HOME)")
    return Availability(True)


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """Everything a builder needs; ``key`` names the build directory."""

    name: str
    source: Path
    extra_cuda_cflags: tuple[str, ...]
    key: str
    build_dir: Path
    verbose: bool = False


@dataclasses.dataclass(frozen=True)
class BuildResult:
    module: ModuleType
    cached: bool
    seconds: float
    build_dir: Path
    builder: str


class Builder(Protocol):
    """Compiles a request into ``request.build_dir`` and returns the shared object's path."""

    name: str

    def build(self, request: BuildRequest) -> Path: ...


def module_name(request: BuildRequest) -> str:
    """The import name of a build: unique per cache key, so an edited source never aliases."""
    return f"rapid_llm_jit_{request.name}_{request.key[:12]}"


_module_name = module_name


class TorchExtensionBuilder:
    """torch.utils.cpp_extension with ninja: the reference path, torch headers and all."""

    name = "torch-cpp-extension"

    def build(self, request: BuildRequest) -> Path:
        from torch.utils.cpp_extension import CUDA_HOME, load

        if CUDA_HOME is None:
            raise RuntimeError("JIT kernels need a CUDA toolkit (CUDA_HOME unset and nvcc not on PATH)")
        if shutil.which("ninja") is None and importlib.util.find_spec("ninja") is None:
            raise RuntimeError("torch's extension loader needs ninja (pip install ninja)")
        mod_name = _module_name(request)
        try:
            # is_python_module=False: torch only dlopens the library; build_jit
            # imports it once, from the published directory (a second import
            # would run the module's init twice).
            load(
                name=mod_name,
                sources=[str(request.source)],
                extra_cuda_cflags=list(request.extra_cuda_cflags),
                extra_include_paths=[str(CSRC)],  # "common/checks.cuh" resolves from any source
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
    from rapid_llm.kernels.fastpath.builder import FastBuilder

    return FastBuilder()


_BUILDERS: dict[str, Builder] = {"torch": TorchExtensionBuilder()}
_LAZY_BUILDERS = {"fast": _fast_builder}
DEFAULT_BUILDER = "torch"  # for sources that include torch's headers; see default_builder()


def _builder(key: str) -> Builder:
    if key not in _BUILDERS and key in _LAZY_BUILDERS:
        _BUILDERS[key] = _LAZY_BUILDERS[key]()
    return _BUILDERS[key]


def default_builder(source: str | os.PathLike) -> str:
    """"torch" for a source (or local header) that includes torch's headers, else "fast"."""
    paths = _local_sources(resolve_source(source))
    return "torch" if any(_TORCH_SOURCE_RE.search(p.read_text(errors="replace")) for p in paths) else "fast"


def register_builder(key: str, builder: Builder) -> None:
    """Add a build path (for example a direct nvcc build without torch headers)."""
    _BUILDERS[key] = builder


def builders() -> tuple[str, ...]:
    """The registered build paths' keys (what ``build_jit(builder=...)`` accepts)."""
    return tuple(sorted({*_BUILDERS, *_LAZY_BUILDERS}))


def cache_root() -> Path:
    root = os.environ.get("RAPID_LLM_CACHE_DIR")
    if root:
        return Path(root) / "jit"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "rapid_llm" / "jit"


def _local_sources(source: Path, seen: set[Path] | None = None) -> list[Path]:
    """The source plus every local header it includes, transitively (they change the binary too)."""
    seen = set() if seen is None else seen
    source = source.resolve()
    if source in seen:
        return []
    seen.add(source)
    out = [source]
    for inc in _INCLUDE_RE.findall(source.read_text(errors="replace")):
        for base in (source.parent, CSRC):  # beside the source, then the project's shared headers
            path = base / inc
            if path.is_file():
                out.extend(_local_sources(path, seen))
                break
    return out


@functools.cache
def _toolchain_fingerprint() -> str:
    import torch

    nvcc = _nvcc_path()
    version = ""
    if nvcc:
        try:
            version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            version = "unknown"
    return f"torch={torch.__version__};cuda={torch.version.cuda};nvcc={version.strip().splitlines()[-1:] }"


def _arch_list() -> str:
    env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env:
        return env
    import torch

    if torch.cuda.is_available():
        caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
        return ";".join(f"{a}.{b}" for a, b in sorted(caps))
    return "none"


def target_arch() -> str:
    """The compute capability the fast path builds device code for, as "9.0".

    The current device's when there is one (the cubin must run there), else
    the first of TORCH_CUDA_ARCH_LIST, else 9.0 (a compile-only check).
    """
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}"
    match = re.search(r"(\d+)\.(\d+)", os.environ.get("TORCH_CUDA_ARCH_LIST", ""))
    return f"{match[1]}.{match[2]}" if match else "9.0"


def cache_key(source: Path, extra_cuda_cflags: Sequence[str], builder: str = "torch") -> str:
    h = hashlib.sha256()
    h.update(builder.encode())
    for path in _local_sources(source):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(repr(tuple(extra_cuda_cflags)).encode())
    h.update(_toolchain_fingerprint().encode())
    h.update(_arch_list().encode())
    h.update(sys.version.encode())
    return h.hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _build_lock(build_dir: Path) -> Iterator[None]:
    """Exclusive flock beside the build dir; the kernel releases it if we die."""
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(build_dir.parent / f"{build_dir.name}.flock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _cached_binary(build_dir: Path, repair: bool = False) -> Path | None:
    """The manifest's binary if it is intact, else None.

    ``repair`` (only under the build lock) also removes a directory that is
    there but not intact, so the fresh build can be published in its place.
    """
    manifest = build_dir / MANIFEST
    try:
        info = json.loads(manifest.read_text())
        so = build_dir / info["binary"]
        if so.exists() and _sha256(so) == info["sha256"]:
            return so
    except (ValueError, KeyError, TypeError, OSError):
        pass
    if repair and build_dir.exists():
        shutil.rmtree(build_dir, ignore_errors=True)
    return None


def _staging_dirs(build_dir: Path) -> list[Path]:
    return sorted(build_dir.parent.glob(f"{build_dir.name}.staging-*"))


def _build_and_publish(request: BuildRequest, builder: Builder) -> Path:
    """Build into a fresh staging directory, then rename it to ``request.build_dir``.

    Call with the build lock held. Staging directories left by dead builds
    of the same key are removed first: holding the lock means nobody alive
    is using them.
    """
    final = request.build_dir
    for stale in _staging_dirs(final):
        shutil.rmtree(stale, ignore_errors=True)
    staging = final.parent / f"{final.name}.staging-{os.getpid()}-{os.urandom(4).hex()}"
    staging.mkdir(parents=True)
    try:
        so = builder.build(dataclasses.replace(request, build_dir=staging))
        so = Path(so)
        if so.parent != staging:
            raise RuntimeError(f"builder {builder.name!r} wrote {so} outside its build directory {staging}")
        manifest = {"binary": so.name, "sha256": _sha256(so), "source": str(request.source),
                    "flags": list(request.extra_cuda_cflags), "builder": builder.name}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final / so.name


def build_binary(request: BuildRequest, builder: Builder) -> Path:
    """The intact cached binary of ``request``, else build and publish it under the lock."""
    so = _cached_binary(request.build_dir)
    if so is None:
        with _build_lock(request.build_dir):
            so = _cached_binary(request.build_dir, repair=True)
            if so is None:
                so = _build_and_publish(request, builder)
    return so


def _import_binary(request: BuildRequest, so: Path) -> ModuleType:
    mod_name = _module_name(request)
    existing = sys.modules.get(mod_name)
    if existing is not None and getattr(existing, "__file__", None) == str(so):
        return existing
    spec = importlib.util.spec_from_file_location(mod_name, so)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {so}")
    import torch  # noqa: F401  (the extension links against libtorch; it must be loaded first)

    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[mod_name] = module
    return module


def resolve_source(source: str | os.PathLike) -> Path:
    path = Path(source)
    if not path.is_absolute():
        path = CSRC / path
    if not path.is_file():
        raise FileNotFoundError(f"JIT source {path} does not exist")
    return path


def build_jit(name: str, source: str | os.PathLike, *, extra_cuda_cflags: Sequence[str] = ("-O3",),
              builder: str | None = None, verbose: bool = False) -> BuildResult:
    """Build (or load from the disk cache) ``source``; hashes the source on every call.

    Use this where the source may have changed since the last call (the
    notebook magic). The per-call path of a row uses :func:`load_jit`.
    """
    if not name.isidentifier():
        raise ValueError(f"JIT module name must be an identifier, got {name!r}")
    start = time.perf_counter()
    path = resolve_source(source)
    flags = tuple(extra_cuda_cflags)
    key_name = builder or default_builder(path)
    if key_name not in builders():
        raise ValueError(f"unknown JIT builder {builder!r}; registered: {', '.join(builders())}")
    chosen = _builder(key_name)
    key = cache_key(path, flags, key_name)
    build_dir = cache_root() / f"{name}_{key[:16]}"
    request = BuildRequest(name, path, flags, key, build_dir, verbose)
    so = _cached_binary(build_dir)
    cached = so is not None
    if so is None:
        with _build_lock(build_dir):
            # Another process may have published it meanwhile; a broken one is removed here.
            so = _cached_binary(build_dir, repair=True)
            cached = so is not None
            if so is None:
                so = _build_and_publish(request, chosen)
    loader = getattr(chosen, "load", None)
    module = loader(request, so) if loader is not None else _import_binary(request, so)
    return BuildResult(module, cached, time.perf_counter() - start, build_dir, chosen.name)


@functools.cache
def load_jit(name: str, source: str, *, extra_cuda_cflags: tuple[str, ...] = ("-O3",)) -> ModuleType:
    """Compile ``csrc/<source>`` on first use in this process; return the extension module.

    Memoised per process on (name, source, flags) so the per-call path costs
    one dict lookup; the disk cache under it is keyed by content, so a new
    process after an edit rebuilds. After editing a shipped source in a live
    process, call ``load_jit.cache_clear()`` (the notebook magic rebuilds by
    itself).
    """
    return build_jit(name, source, extra_cuda_cflags=extra_cuda_cflags).module
