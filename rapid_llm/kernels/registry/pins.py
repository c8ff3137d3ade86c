"""Pinned configs: the variant of a tunable row that runs on a GPU kind, one table per kind.

``tune`` picks a winner; timing noise would pick a different one on every rank and every run, so the winner
is written once to a table per GPU kind, keyed by the digest of the row's code (its search space included),
and every process (every rank) reads it from there rather than tuning again. The first pin of a key wins:
a second tune of the same code keeps the pinned config unless it asks to replace it, so eight ranks that tune
at once still run one config. Editing the source (the space included) changes the digest, and the old pin no
longer applies.

Where the table lives follows the row's source: a shipped ``.cu`` row's pins are committed beside the op's
figures, ``ops/<group>/<op>/tuned/<gpu kind>.json``; a notebook cell's go to the local store,
``<cache>/tuned/<gpu kind>.json`` (rapid_llm.kernels.platform.cache_dir), and promote() carries them into the
op folder with the row.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry.tune_space import config_label

__all__ = ["Pin", "pin", "pinned", "table_path", "TUNED", "PinError", "current_kind", "python_digest",
           "with_pinned_config", "carry"]

#: The folder of an op's committed pins, beside ``figures/``.
TUNED = "tuned"
#: Tests point this at a copy of the ops tree; None: the package's own.
COMMITTED_ROOT: Path | None = None


class PinError(ValueError):
    """A pin table that cannot be read or written, named with its path."""


@dataclass(frozen=True)
class Pin:
    """One pinned config and where it came from."""

    op: str
    row: str
    digest: str
    config: dict[str, Any]
    device: str
    path: Path
    figures: dict[str, Any] = field(default_factory=dict)  # what tune measured: untuned_us, tuned_us, candidates

    @property
    def label(self) -> str:
        return config_label(self.config)

    def describe(self) -> str:
        """``THREADS=256 VECS=2, pinned for NVIDIA H100 80GB HBM3 (ops/norm/rms_norm/tuned/...json)``."""
        where = self.path
        root = _ops_root()
        shown = where.relative_to(root.parent).as_posix() if where.is_relative_to(root) else str(where)
        gain = ""
        tuned, untuned = self.figures.get("tuned_us"), self.figures.get("untuned_us")
        if tuned and untuned:
            gain = f"; {untuned / tuned:.2f}x the untuned row's speed when tuned"
        return f"{self.label}, pinned for {self.device} ({shown}{gain})"


def _ops_root() -> Path:
    return platform.OPS_DIR if COMMITTED_ROOT is None else COMMITTED_ROOT


def table_path(source: Path, device: str) -> Path:
    """The pin table of a row whose source is ``source``: its op folder's for a shipped source
    (``ops/<group>/<op>/<file>.cu``), else the local store's."""
    # looked up on every resolution of a tunable row: worked out once per source, kind and roots
    key = (str(source), device, COMMITTED_ROOT, os.environ.get("RAPID_LLM_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME"))
    found = _paths.get(key)
    if found is None:
        name = f"{platform.slug(device)}.json"
        try:
            rel = Path(os.path.abspath(source)).relative_to(Path(os.path.abspath(platform.OPS_DIR)))
        except ValueError:
            rel = None
        if rel is not None and len(rel.parts) == 3:
            found = _ops_root() / rel.parts[0] / rel.parts[1] / TUNED / name
        else:
            found = platform.cache_dir(TUNED) / name
        _paths[key] = found
    return found


_paths: dict[tuple, Path] = {}


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise PinError(f"cannot read the pin table {path}: {exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PinError(f"the pin table {path} is not valid JSON ({exc}); remove it or restore it from git") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("pins", {}), dict):
        raise PinError(f"the pin table {path} has no 'pins' object")
    return doc


#: path -> (stat stamp, document): a lookup per dispatch resolution costs one stat.
_cache: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}


def _cached(path: Path) -> dict[str, Any]:
    try:
        st = path.stat()
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    doc = _read(path)
    _cache[path] = (stamp, doc)
    return doc


def _pin_of(path: Path, doc: Mapping[str, Any], digest: str) -> Pin | None:
    entry = doc.get("pins", {}).get(digest)
    if entry is None:
        return None
    return Pin(entry.get("op", ""), entry.get("row", ""), digest, dict(entry["config"]), str(doc.get("device", "")),
               path, {k: v for k, v in entry.items() if k not in ("config", "op", "row")})


def pinned(source: Path, digest: str, device: str) -> Pin | None:
    """The config pinned for this code (the digest of its source, space included) on this GPU kind, or None."""
    path = table_path(source, device)
    return _pin_of(path, _cached(path), digest)


def pin(source: Path, op: str, row: str, digest: str, device: str, config: Mapping[str, Any], *,
        replace: bool = False, path: Path | None = None, **figures: Any) -> Pin:
    """Pin ``config`` for this code on this GPU kind and return the pin that holds: the one already there
    (another process or rank pinned first) unless ``replace``. ``path`` overrides the table (promote)."""
    path = table_path(source, device) if path is None else path
    path.parent.mkdir(parents=True, exist_ok=True)
    with platform.locked(path, "pins"):
        doc = _read(path) or {"device": device, "pins": {}}
        if doc.get("device", device) != device:
            raise PinError(f"{path} holds pins for {doc.get('device')}, not {device}")
        existing = _pin_of(path, doc, digest)
        if existing is not None and not replace:
            return existing
        doc["pins"][digest] = {
            "op": op, "row": row, "config": dict(config), "pinned_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **figures}
        platform.write_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
        _cache.pop(path, None)
    found = _pin_of(path, doc, digest)
    assert found is not None
    return found


_kinds: dict[int, str] = {}


def current_kind() -> str:
    """What pins (and figures) are filed under here: the current CUDA device's name, or "cpu" without one."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    index = torch.cuda.current_device()
    if index not in _kinds:
        _kinds[index] = platform.device_label(torch.device("cuda", index))
    return _kinds[index]


def _python_source(target: Any, fn: Any) -> tuple[Path | None, str | None]:
    """(the file of a Python row's code, its text): a "module:attr" target's module file, else the function's
    own source (a notebook cell's, from IPython's line cache), or (None, None) where neither can be read."""
    if isinstance(target, str):
        import importlib.util

        spec = importlib.util.find_spec(target.split(":", 1)[0])
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            return Path(spec.origin), Path(spec.origin).read_text(errors="replace")
    try:
        return None, inspect.getsource(inspect.unwrap(fn))
    except (OSError, TypeError):
        return None, None


#: (target, the module file's stamp, space) -> (path, digest): a shipped row's load() reads one stat, not its file.
_python_memo: dict[tuple, tuple[Path, str]] = {}


def python_digest(target: Any, fn: Any, space: Any) -> tuple[Path, str] | None:
    """(where its pins live, the digest they are keyed by) for a tunable Python row (Triton): its code and its
    space; None where its code cannot be read."""
    space_text = json.dumps(space.to_json() if hasattr(space, "to_json") else space, sort_keys=True)
    key = None
    if isinstance(target, str):
        import importlib.util

        spec = importlib.util.find_spec(target.split(":", 1)[0])
        origin = spec.origin if spec is not None else None
        if origin and os.path.isfile(origin):
            st = os.stat(origin)
            key = (target, origin, st.st_mtime_ns, st.st_size, space_text)
            if key in _python_memo:
                return _python_memo[key]
    path, text = _python_source(target, fn)
    if text is None:
        return None
    digest = hashlib.sha256("\0".join((text, space_text)).encode()).hexdigest()
    found = (path if path is not None else Path("<notebook>")), digest
    if key is not None:
        _python_memo[key] = found
    return found


def with_pinned_config(spec: Any, fn: Any) -> Any:
    """``fn`` with the config pinned for it on this kind as keyword arguments, or ``fn`` where none is pinned."""
    where = python_digest(spec.target, fn, spec.tune_space)
    if where is None:
        return fn
    found = pinned(where[0], where[1], current_kind())
    if found is None:
        return fn
    bound = functools.partial(fn, **found.config)
    functools.update_wrapper(bound, fn)
    bound.pin = found  # type: ignore[attr-defined]
    return bound


def carry(old_digest: str, source: Path, new_digest: str, op: str, row: str) -> list[Pin]:
    """Copy every local pin of code ``old_digest`` (a cell's) to the table of ``source`` (its promoted file), keyed
    by ``new_digest``: a tuned cell ships with its pinned variants. An existing pin there holds."""
    held = []
    for path in sorted(platform.cache_dir(TUNED).glob("*.json")):
        doc = _read(path)
        entry = doc.get("pins", {}).get(old_digest)
        if entry is None:
            continue
        figures = {k: v for k, v in entry.items() if k not in ("config", "op", "row", "pinned_at")}
        device = str(doc["device"])
        table = source.parent / TUNED / f"{platform.slug(device)}.json"  # the op folder's, wherever the package is
        held.append(pin(source, op, row, new_digest, device, entry["config"], path=table, **figures))
    return held
