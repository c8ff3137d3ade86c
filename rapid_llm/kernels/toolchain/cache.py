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
sha256 of every file of the entry; an entry whose files do not match it is
rebuilt, never loaded, and what the cache may load at all (whose entries, no
symlinks) is :mod:`.cache_safety`'s rule. A user's source is read once
(:mod:`.snapshot`): the key hashes those bytes and the compilers read a copy
of them, so what is published under a key is built from the bytes it names.
Every builder (rapid_llm.kernels.toolchain.jit) goes through here.
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
import warnings
from pathlib import Path
from types import ModuleType
from typing import Iterator, Protocol, Sequence

from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain import snapshot as _snapshot
from rapid_llm.kernels.toolchain.cache_safety import (CacheError, check_folder, disk_fault, entry_problem,
                                                      low_on_space, open_lock, remove_obstacle)

__all__ = ["CUDA_INCLUDE", "MANIFEST", "BuildError", "CacheError", "CacheRepaired", "sources_root", "BuildRequest", "BuildResult", "Builder", "module_name", "cache_root",
           "SOURCES_DIR", "cache_key", "build_binary", "fetch_binary", "import_binary", "resolve_source", "nvcc_path", "target_arch", "local_sources"]

CUDA_INCLUDE = platform.CUDA_INCLUDE
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
MANIFEST = "rapid_llm_manifest.json"
#: Beside each build, the sources it was built from (the source and the headers beside it that it includes), so
#: an earlier version of a cell stays reachable by its digest after the cell is edited (rapid_llm.bench.row_versions).
SOURCES_DIR = "sources"


class CacheRepaired(UserWarning):
    """A cache entry was damaged or unsafe and is being rebuilt; the message names it and why."""


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
    #: The bytes a user's source was built from (``source`` is then their copy in the cache): kept beside the
    #: build, and the project headers it includes are checked unchanged before the build is published.
    snapshot: _snapshot.Snapshot | None = None


@dataclasses.dataclass(frozen=True)
class BuildResult:
    module: ModuleType
    cached: bool
    seconds: float
    build_dir: Path
    builder: str
    source: Path | None = None
    #: What was built: the source's bytes as read for this build (the file may have changed since), and the
    #: copy of them the compilers read (it stays: a child process rebuilds a row from it, not from the file).
    snapshot: _snapshot.Snapshot | None = None
    compiled_source: Path | None = None


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


#: Flags nvcc reads from the environment and adds to every command line it is given. Read at each key, not
#: with the fingerprint once a process: a notebook may set them between two builds.
NVCC_ENV_FLAGS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")


@functools.cache
def _toolchain_fingerprint() -> str:
    """What the process's toolchain is (torch's version, CUDA tag and C++ ABI, nvcc, NVRTC, the host compiler,
    Python), asked once a process: a toolchain swapped under a running process is not seen."""
    import torch

    from rapid_llm.kernels.toolchain.fastpath.device import nvrtc_identity

    parts = [f"torch={torch.__version__}", f"cuda={torch.version.cuda}",
             f"cxx11abi={getattr(torch._C, '_GLIBCXX_USE_CXX11_ABI', None)}", f"python={sys.version}",
             f"nvrtc={nvrtc_identity()}"]
    for tool in (nvcc_path(), os.environ.get("CXX") or shutil.which("g++")):
        parts.append(f"{tool}={_tool_version(tool)}")
    return ";".join(parts)


def _tool_version(tool: str | None) -> str:
    if not tool:
        return "absent"
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return " ".join(out.split())


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


def cache_key(source: Path | _snapshot.Snapshot, extra_cuda_cflags: Sequence[str], builder: str = "torch") -> str:
    """The name of a build: everything that changes the binary (see the module docstring).

    Not the digest of a source (``jit_row.source_digest``, which names the code): the same code
    built with other headers, another toolchain or for another arch is another build.
    """
    snap = source if isinstance(source, _snapshot.Snapshot) else _snapshot.take(source)
    h = hashlib.sha256()
    for part in (builder, Path(snap.source_relpath).name, snap.digest, repr(tuple(extra_cuda_cflags)),
                 _toolchain_fingerprint(), _arch_list(), target_arch(),
                 *(f"{name}={os.environ.get(name, '')}" for name in NVCC_ENV_FLAGS)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def sources_root() -> Path:
    """Where user sources are copied to be compiled (snapshot.materialize), one folder per content."""
    return platform.cache_dir("jit-sources")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _build_lock(build_dir: Path) -> Iterator[None]:
    """Exclusive flock beside the build dir (never through a symlink); the kernel releases it if we die."""
    fd = open_lock(build_dir.parent / f"{build_dir.name}.flock")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the flock too


def _cached_binary(build_dir: Path, repair: bool = False) -> Path | None:
    """The manifest's binary if the entry is intact and ours to load, else None.

    Raises CacheError for an entry that is not ours to rebuild (cache_safety). ``repair`` (only under the
    build lock) removes an entry that is there but damaged or unsafe, saying so in one line, so the fresh
    build can be published in its place.
    """
    if not (build_dir.exists() or build_dir.is_symlink()):
        return None
    try:
        problem = entry_problem(build_dir) or _entry_files_problem(build_dir)
    except (ValueError, KeyError, TypeError, AttributeError):
        problem = "its manifest is unreadable"
    except OSError as exc:
        problem = f"it cannot be read ({exc.strerror})"
    if problem is None:
        return build_dir / json.loads((build_dir / MANIFEST).read_text())["binary"]
    if repair:
        warnings.warn(f"rapid_llm: rebuilding {build_dir}: {problem}", CacheRepaired, stacklevel=2)
        remove_obstacle(build_dir)
    return None


def _entry_files_problem(build_dir: Path) -> str | None:
    """Check every file the manifest lists (plain, ours, matching its sha256); why not, or None."""
    manifest = build_dir / MANIFEST
    problem = entry_problem(manifest)
    if problem is not None:
        return problem
    info = json.loads(manifest.read_text())
    files, binary = info["files"], info["binary"]
    if binary not in files or Path(binary).name != binary:
        return f"its manifest names a binary outside the entry ({binary!r})"
    for name, sha in files.items():
        parts = Path(name).parts
        if Path(name).is_absolute() or ".." in parts or name == MANIFEST:
            return f"its manifest names a file outside the entry ({name!r})"
        for depth in range(1, len(parts) + 1):
            problem = entry_problem(build_dir.joinpath(*parts[:depth]))
            if problem is not None:
                return problem
        if _sha256(build_dir / name) != sha:
            return f"{name} does not match its manifest (damaged)"
    return None


def _staging_dirs(build_dir: Path) -> list[Path]:
    return sorted(build_dir.parent.glob(f"{build_dir.name}.staging-*"))


def _phase(name: str) -> None:
    """A point between two steps of a build; the tests kill a build at each (what it leaves must heal)."""


def _build_and_publish(request: BuildRequest, builder: Builder) -> Path:
    """Build into a fresh staging directory, then rename it to ``request.build_dir``.

    Call with the build lock held. Staging directories left by dead builds
    of the same key are removed first: holding the lock means nobody alive
    is using them.
    """
    final = request.build_dir
    for stale in _staging_dirs(final):
        remove_obstacle(stale)
    staging = final.parent / f"{final.name}.staging-{os.getpid()}-{os.urandom(4).hex()}"
    staging.mkdir(mode=0o755)
    _phase("staged")
    try:
        so = Path(builder.build(dataclasses.replace(request, build_dir=staging)))
        _phase("built")
        if so.parent != staging:
            raise RuntimeError(f"builder {builder.name!r} wrote {so} outside its build directory {staging}")
        if request.snapshot is not None:
            _keep_sources(request.snapshot, staging / SOURCES_DIR)
            if not request.snapshot.shared_unchanged():
                raise BuildError(f"building {request.snapshot.origin.name}: a project header it includes changed "
                                 "during the build; nothing was kept, build it again", log="",
                                 source=request.snapshot.origin)
        origin = request.snapshot.origin if request.snapshot is not None else request.source
        files = _seal(staging)
        manifest = {"binary": so.name, "sha256": files[so.name], "source": str(origin),
                    "flags": list(request.extra_cuda_cflags), "builder": builder.name, "files": files}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        _phase("sealed")
        os.rename(staging, final)
        _phase("published")
    except BuildError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if low_on_space(final.parent):
            said = exc.log.strip().splitlines()[-1] if exc.log.strip() else str(exc).splitlines()[0]
            raise CacheError(f"rapid_llm: cannot build into {final.parent}: the disk is full (the compiler said: "
                             f"{said}); free space there or point RAPID_LLM_CACHE_DIR at another disk",
                             final.parent) from None
        raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final / so.name


def _seal(folder: Path) -> dict[str, str]:
    """Make every file of a finished build writable by its owner only; each file's sha256, by relative path."""
    sealed = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            continue
        os.chmod(path, path.stat().st_mode & 0o7755)
        if path.is_file():
            sealed[path.relative_to(folder).as_posix()] = _sha256(path)
    return sealed


def _keep_sources(snap: _snapshot.Snapshot, into: Path) -> None:
    """The bytes the build read: the source and the local headers beside it (not the shared ones), paths kept
    relative to the source's folder (rapid_llm.bench.row_versions reads them back)."""
    into.mkdir()
    base = (snap.root / snap.source_relpath).parent
    for rel, data in snap.files:
        path = snap.root / rel
        if path.is_relative_to(base):
            dest = into / path.relative_to(base)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)


def build_binary(request: BuildRequest, builder: Builder) -> Path:
    """The intact cached binary of ``request``, else build and publish it under the lock."""
    return fetch_binary(request, builder)[0]


def fetch_binary(request: BuildRequest, builder: Builder) -> tuple[Path, bool]:
    """:func:`build_binary`, and whether the binary came from the cache (no build in this call).

    A disk fault while writing the cache (read-only, full, no permission) raises CacheError: one line with
    the path and the fix; nothing half-written is left behind.
    """
    folder = request.build_dir.parent
    check_folder(folder)
    so = _cached_binary(request.build_dir)
    if so is not None:
        return so, True
    try:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        with _build_lock(request.build_dir):
            # Another process may have published it meanwhile; a broken one is removed here.
            so = _cached_binary(request.build_dir, repair=True)
            if so is None:
                return _build_and_publish(request, builder), False
    except OSError as exc:
        fault = disk_fault(exc, folder)
        if fault is None:
            raise
        raise fault from None
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
