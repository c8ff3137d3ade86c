"""The JIT build cache: content keys, the build lock, staging and publish, the manifest.

The on-disk build directory is named by a hash of everything that changes the
binary: the source text and the project headers it includes, the flags, the
builder, the torch and CUDA versions and the target arch. Editing a source or
a flag therefore builds afresh without a manual name bump, and an unchanged
source loads from disk in a new process.

A build is guarded by an ``flock`` on a file beside the build directory. The
kernel drops an ``flock`` when its holder dies, so a build killed half-way
(kernel restart, SIGKILL) never leaves a lock that hangs the next build, as
torch's own ``lock`` file does. Each build runs in a fresh staging directory
and is published by renaming it into place, manifest included: the cache
directory is complete or absent, and neither a dead build's files nor a
compiler it orphaned can reach the next build. The manifest holds the
binary's sha256; a cached binary that does not match it is rebuilt, never
loaded. Every builder (rapid_llm.kernels.toolchain.jit) goes through here.
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
from pathlib import Path
from types import ModuleType
from typing import Iterator, Protocol, Sequence

from rapid_llm.kernels import platform

__all__ = ["CUDA_INCLUDE", "MANIFEST", "BuildError", "BuildRequest", "BuildResult", "Builder", "module_name", "cache_root",
           "SOURCES_DIR", "cache_key", "build_binary", "fetch_binary", "import_binary", "resolve_source", "nvcc_path", "target_arch", "local_sources"]

CUDA_INCLUDE = platform.CUDA_INCLUDE
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
MANIFEST = "rapid_llm_manifest.json"
#: Beside each build, the sources it was built from (the source and the headers beside it that it includes), so
#: an earlier version of a cell stays reachable by its digest after the cell is edited (rapid_llm.bench.row_versions).
SOURCES_DIR = "sources"


class BuildError(RuntimeError):
    """A source failed to compile; the message carries the compiler's log."""

    def __init__(self, message: str, log: str, source: Path) -> None:
        super().__init__(message)
        self.log = log
        self.source = source


nvcc_path = platform.nvcc_path  # one owner; kept here for the builders that import it from the cache

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
    source: Path | None = None


class Builder(Protocol):
    """Compiles a request into ``request.build_dir`` and returns the shared object's path."""

    name: str

    def build(self, request: BuildRequest) -> Path: ...


def module_name(request: BuildRequest) -> str:
    """The import name of a build: unique per cache key, so an edited source never aliases."""
    return f"rapid_llm_jit_{request.name}_{request.key[:12]}"




def cache_root() -> Path:
    return platform.cache_dir("jit")


def local_sources(source: Path, seen: set[Path] | None = None) -> list[Path]:
    """The source plus every local header it includes, transitively (they change the binary too)."""
    seen = set() if seen is None else seen
    source = source.resolve()
    if source in seen:
        return []
    seen.add(source)
    out = [source]
    for inc in _INCLUDE_RE.findall(source.read_text(errors="replace")):
        for base in (source.parent, CUDA_INCLUDE):  # beside the source, then the project's shared headers
            path = base / inc
            if path.is_file():
                out.extend(local_sources(path, seen))
                break
    return out


@functools.cache
def _toolchain_fingerprint() -> str:
    import torch

    nvcc = nvcc_path()
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
    """The name of a build: everything that changes the binary (see the module docstring).

    Not the digest of a source (``jit_row.source_digest``, which names the code): the same code
    built with other headers, another toolchain or for another arch is another build.
    """
    h = hashlib.sha256()
    h.update(builder.encode())
    for path in local_sources(source):
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
        _keep_sources(request.source, staging / SOURCES_DIR)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final / so.name


def _keep_sources(source: Path, into: Path) -> None:
    """Copy the source and the local headers beside it (not the shared ones) into ``into``, paths kept."""
    into.mkdir()
    base = source.resolve().parent
    for path in local_sources(source):
        if path.is_relative_to(base):
            dest = into / path.relative_to(base)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)


def build_binary(request: BuildRequest, builder: Builder) -> Path:
    """The intact cached binary of ``request``, else build and publish it under the lock."""
    return fetch_binary(request, builder)[0]


def fetch_binary(request: BuildRequest, builder: Builder) -> tuple[Path, bool]:
    """:func:`build_binary`, and whether the binary came from the cache (no build in this call)."""
    so = _cached_binary(request.build_dir)
    if so is None:
        with _build_lock(request.build_dir):
            # Another process may have published it meanwhile; a broken one is removed here.
            so = _cached_binary(request.build_dir, repair=True)
            if so is None:
                return _build_and_publish(request, builder), False
    return so, True


def import_binary(request: BuildRequest, so: Path) -> ModuleType:
    mod_name = module_name(request)
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
        path = platform.OPS_DIR / path
    if not path.is_file():
        raise FileNotFoundError(f"JIT source {path} does not exist")
    return path
