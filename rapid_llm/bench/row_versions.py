"""A row as it was: at an earlier git commit, or in a saved build, so it can be compared with the row as it is.

Names say which version, and ``compare`` takes them wherever it takes a row:

* ``"jit/scale"``: the row as registered now (its source file as it is);
* ``"jit/scale@HEAD~2"`` (any git revision): the row's source file at that
  commit (``git show``), with the headers beside it that it includes; a
  Triton or native row's module file likewise;
* ``"jit/scale_vec@build:3fa9c1"``: a JIT row's source as the build cache
  kept it, by a prefix of its source digest. Every build keeps the sources it
  was built from (rapid_llm.kernels.toolchain.cache), so the versions of a
  ``%%cuda_jit`` cell that were never committed stay reachable:
  :func:`saved_builds` lists them, newest first.

An earlier version is written under the cache folder (never into the
checkout), keyed by its digest, so its build is cached like any other, and it
is registered only while it is being compared (:func:`registered`), never
verified into dispatch. Headers the project shares (``common/``) come from
the working tree: the runtime they declare is built once per machine.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain import cache as build_cache
from rapid_llm.kernels.toolchain.digests import module_file
from rapid_llm.kernels.toolchain.jit_row import JitRow, source_digest
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

__all__ = ["RowVersion", "SavedBuild", "VersionError", "version", "at_commit", "from_saved_build", "saved_builds",
           "digest_of", "registered", "BUILD_PREFIX"]

#: ``row@build:<digest prefix>`` names a saved build; anything else after ``@`` is a git revision.
BUILD_PREFIX = "build:"
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


class VersionError(ValueError):
    """The version asked for cannot be had (no such commit, file or build); the message says why."""


@dataclasses.dataclass(frozen=True)
class RowVersion:
    """A row at one version: the spec to run, where it came from, and its source digest."""

    spec: KernelSpec
    origin: str          # "working tree", "commit 1a2b3c4", "saved build 3fa9c1d2e4 of 2025-12-01 14:28"
    digest: str | None   # the source's digest (a JIT row: without its row line), None where there is no source
    temporary: bool = False  # registered only while compared

    @property
    def name(self) -> str:
        return self.spec.name


@dataclasses.dataclass(frozen=True)
class SavedBuild:
    """A build the JIT cache kept, with the sources it was built from."""

    digest: str
    built_at: float
    flags: tuple[str, ...]
    build_dir: Path
    source_name: str

    def __str__(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.built_at))
        return f"{self.digest[:12]}  {when}  {self.source_name}  {' '.join(self.flags)}"


# ---------------------------------------------------------------- digests


def digest_of(row: KernelSpec) -> str | None:
    """The digest of the code a row runs: a JIT row's source (row line excluded), else its module's file."""
    target = row.target
    if isinstance(target, JitRow):
        return source_digest(target.source.read_text()) if target.source.is_file() else None
    path = _module_file(target)
    return None if path is None else source_digest(path.read_text())


def _module_file(target: Any) -> Path | None:
    return module_file(target.split(":", 1)[0]) if isinstance(target, str) else None


# ---------------------------------------------------------------- resolving a name


def version(side: str | KernelSpec | RowVersion) -> RowVersion:
    """``side`` (a row name, with ``@revision`` or ``@build:digest`` for an earlier version) as a RowVersion."""
    if isinstance(side, RowVersion):
        return side
    if isinstance(side, KernelSpec):
        return RowVersion(side, "working tree", digest_of(side))
    if not isinstance(side, str) or not side:
        raise VersionError(f"a row is named by a string such as 'jit/scale' or 'jit/scale@HEAD~1', got {side!r}")
    name, at, ref = side.partition("@")
    row = _spec.get_row(name)
    if not at:
        return RowVersion(row, "working tree", digest_of(row))
    if not ref:
        raise VersionError(f"{side!r}: say which version after '@' (a git revision such as HEAD~1, or "
                           f"{BUILD_PREFIX}<digest> for a saved build)")
    if ref.startswith(BUILD_PREFIX):
        return from_saved_build(row, ref[len(BUILD_PREFIX):])
    return at_commit(row, ref)


@contextlib.contextmanager
def registered(*versions: RowVersion) -> Iterator[None]:
    """Register the temporary versions for the duration (verify and inspect look rows up by name)."""
    added: list[str] = []
    try:
        for v in versions:
            if v.temporary and v.name not in added:
                _spec.register(v.spec, replace=True)
                added.append(v.name)
        yield
    finally:
        for name in added:
            with contextlib.suppress(_spec.RegistryError):
                _spec.unregister(name)


def _versioned_spec(row: KernelSpec, label: str, target: Any) -> KernelSpec:
    """The row under the name ``row@label``, unverified (so dispatch never picks it), with the same baseline."""
    native = _spec.native_row(row.op)
    baseline = row.golden.baseline or (native.name if native is not None else None)
    golden = GoldenRecord(verified=row.is_native, max_abs_diff=None, baseline=baseline)
    return dataclasses.replace(row, name=f"{row.name}@{label}", target=target, golden=golden,
                               description=f"{row.name} at {label}")


def _scratch(digest: str) -> Path:
    return platform.cache_dir("versions") / digest[:16]


# ---------------------------------------------------------------- git


def _git(cwd: Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise VersionError("git is not installed here, so no earlier commit can be read") from None
    if proc.returncode != 0:
        raise VersionError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"git {args[0]} failed")
    return proc.stdout


def _show(root: Path, commit: str, rel: str) -> str | None:
    try:
        return _git(root, "show", f"{commit}:{rel}")
    except VersionError:
        return None


def at_commit(row: KernelSpec | str, commit: str, *, path: str | Path | None = None) -> RowVersion:
    """``row`` as it was at git revision ``commit``; ``path`` names its file there if it has moved since."""
    row = _spec.get_row(row) if isinstance(row, str) else row
    target = row.target
    current = target.source if isinstance(target, JitRow) else _module_file(target)
    if current is None:
        raise VersionError(f"{row.name}: its code is not a file in a git checkout (a function defined in this "
                           "process), so it has no earlier commit")
    current = current.resolve()
    try:
        root = Path(_git(current.parent, "rev-parse", "--show-toplevel").strip())
    except VersionError as exc:
        raise VersionError(f"{row.name}: {current} is not in a git checkout ({exc})") from None
    try:
        sha = _git(root, "rev-parse", "--verify", "--short", f"{commit}^{{commit}}").strip()
    except VersionError:
        raise VersionError(f"{row.name}: no commit {commit!r} in {root}") from None
    rel = Path(path).as_posix() if path is not None else current.relative_to(root).as_posix()
    text = _show(root, sha, rel)
    if text is None:
        raise VersionError(f"{row.name}: {rel} does not exist at commit {sha} ({commit}); if the file has moved "
                           "since, give its path then: at_commit(row, commit, path='old/path.cu')")
    if isinstance(target, JitRow):
        digest = source_digest(text)
        folder = _scratch(digest) / Path(rel).parent.name
        _write(folder / Path(rel).name, text)
        _write_sibling_headers(text, folder, lambda inc: _show(root, sha, (Path(rel).parent / inc).as_posix()))
        jit = JitRow(folder / Path(rel).name, target.fn, out=target.out, flags=target.flags)
        return RowVersion(_versioned_spec(row, sha, jit), f"commit {sha}", digest, temporary=True)
    return _module_version(row, text, sha, f"commit {sha}")


def _write(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        platform.write_atomic(path, text)


def _write_sibling_headers(text: str, folder: Path, read: Any, depth: int = 0) -> None:
    """Headers the source includes from its own folder, as ``read(include)`` gives them (None: not there)."""
    if depth > 8:
        return
    for inc in _INCLUDE.findall(text):
        if inc.startswith("common/"):
            continue
        header = read(inc)
        if header is not None:
            _write(folder / inc, header)
            _write_sibling_headers(header, folder, read, depth + 1)


def _module_version(row: KernelSpec, text: str, label: str, origin: str) -> RowVersion:
    """A Triton or native row's module at an earlier version, imported under a name of its own."""
    module, attr = row.target.split(":", 1)  # type: ignore[union-attr]
    if re.search(r"^\s*from\s+\.", text, re.M):
        raise VersionError(f"{row.name}: {module} at {label} uses relative imports, so it cannot be loaded outside "
                           "its package")
    digest = source_digest(text)
    name = f"rapid_llm_version_{digest[:16]}"
    path = _scratch(digest) / f"{module.rsplit('.', 1)[-1]}.py"
    _write(path, text)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise VersionError(f"{row.name}: cannot load {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as exc:
            del sys.modules[name]
            raise VersionError(f"{row.name}: {module} at {label} does not import: "
                               f"{type(exc).__name__}: {exc}") from None
    if not hasattr(sys.modules[name], attr):
        raise VersionError(f"{row.name}: {module} at {label} has no {attr!r}")
    return RowVersion(_versioned_spec(row, label, f"{name}:{attr}"), origin, digest, temporary=True)


# ---------------------------------------------------------------- saved builds


def saved_builds(row: KernelSpec | str) -> list[SavedBuild]:
    """The builds of a JIT row's source file that the cache kept with their sources, newest first, one per
    source digest (the same source built with other flags or toolchains is listed once)."""
    row = _spec.get_row(row) if isinstance(row, str) else row
    if not isinstance(row.target, JitRow):
        raise VersionError(f"{row.name} is a {row.backend} row: saved builds exist for JIT rows (the build cache "
                           f"keeps their sources); an earlier version of it comes from a commit, '{row.name}@HEAD~1'")
    name = row.target.source.name
    found: dict[str, SavedBuild] = {}
    root = build_cache.cache_root()
    for manifest in root.glob(f"*/{build_cache.MANIFEST}") if root.is_dir() else ():
        try:
            info = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        kept = manifest.parent / build_cache.SOURCES_DIR / name
        if Path(str(info.get("source", ""))).name != name or not kept.is_file():
            continue
        build = SavedBuild(source_digest(kept.read_text(errors="replace")), manifest.stat().st_mtime,
                           tuple(info.get("flags", ())), manifest.parent, name)
        if build.digest not in found or found[build.digest].built_at < build.built_at:
            found[build.digest] = build
    return sorted(found.values(), key=lambda b: -b.built_at)


def from_saved_build(row: KernelSpec | str, digest: str) -> RowVersion:
    """A JIT row's source as the build cache kept it, by a prefix (6+ hex digits) of its source digest."""
    row = _spec.get_row(row) if isinstance(row, str) else row
    if not re.fullmatch(r"[0-9a-f]{6,64}", digest):
        raise VersionError(f"{row.name}: a saved build is named by 6 to 64 hex digits of its source digest, "
                           f"got {digest!r}")
    builds = saved_builds(row)
    matches = [b for b in builds if b.digest.startswith(digest)]
    if not matches:
        listed = "; ".join(str(b) for b in builds[:5]) or "none"
        raise VersionError(f"{row.name}: no saved build of {row.target.source.name} has source digest {digest}... "
                           f"(saved builds, newest first: {listed})")
    if len(matches) > 1:
        raise VersionError(f"{row.name}: {digest} matches {len(matches)} saved builds; give more digits: "
                           + ", ".join(b.digest[:16] for b in matches))
    build = matches[0]
    kept = build.build_dir / build_cache.SOURCES_DIR
    text = (kept / build.source_name).read_text()
    folder = _scratch(build.digest) / row.target.source.parent.name
    _write(folder / build.source_name, text)
    _write_sibling_headers(text, folder, lambda inc: (kept / inc).read_text() if (kept / inc).is_file() else None)
    jit = JitRow(folder / build.source_name, row.target.fn, out=row.target.out, flags=build.flags or row.target.flags)
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(build.built_at))
    return RowVersion(_versioned_spec(row, f"{BUILD_PREFIX}{build.digest[:10]}", jit),
                      f"saved build {build.digest[:10]} of {when}", build.digest, temporary=True)
