"""Measured latencies that rank rows: where they come from, and the one path that invalidates dispatch.

Three sources, each named in ``explain``:

- **committed**: ``rapid_llm/kernels/ops/<group>/<op>/figures/<gpu kind>.json``, shipped with the package.
  Dispatch ranks by these by default, so every machine of one GPU kind picks
  the same row whatever its user benchmarked.
- **session**: figures ``bench_op(..., record=True)`` measured in this process.
  Measuring in a session is asking to rank by what was measured.
- **local**: the per-user store under the cache directory, where recorded
  figures persist. Ranked by only when opted in: ``RAPID_LLM_LOCAL_MEASUREMENTS=1``
  or :func:`use_local`.

Each figure names the digest of the code it measured (``source_digest``); dispatch ranks a row only by
figures of the code it runs now, and explain names the ones it passed over.

Keys are (op, row, dtype, size bucket), the bucket being
:func:`rapid_llm.kernels.platform.size_bucket`. Any change is said on the registry's one change bus
(``spec.touch``), where dispatch clears its cache.
"""
from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec as _spec

__all__ = [
    "Figure", "lookup", "record", "record_meta", "make_entry", "meta", "entries", "load", "load_file",
    "export", "merge_file", "clear", "committed_results", "committed_label", "figures_path", "COMMITTED_ROOT", "results_dir", "results_path", "use_local",
    "uses_local", "ranked_entries", "NEAREST_BUCKETS", "DIGEST_FIELD", "StaleFigure", "stale",
]

#: How many power-of-two buckets away a measurement may be and still rank a row.
NEAREST_BUCKETS = 1
#: The field of a figure that names the code it measured (``digests.code_digest`` of the row then).
DIGEST_FIELD = "source_digest"

_lock = threading.RLock()
_loaded: dict[Path, tuple[float, dict[str, Any]]] = {}
#: (local store folder, device label) -> key -> entry; keyed by folder so a new cache dir starts clean.
_session: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
_use_local: bool | None = None


@dataclasses.dataclass(frozen=True)
class Figure:
    """A row's measured cost and where it came from (what explain prints beside it).

    ``median_us`` is the time between CUDA events around one call; ``host_us``
    what a caller pays per call back to back (bench_host: Python, dispatch,
    allocation, launch). An eager call costs the larger of the two, so that
    is what eager calls rank by: where host time dominates, a cheap wrapper
    beats a fast kernel. ``graph_us`` is the call replayed from a CUDA graph,
    the device's time alone: the events' figure includes any wait for a slow
    launch, so that is what captures and compiled graphs rank by where it
    was measured (``device_us``).
    """

    median_us: float
    source: str  # "committed <file>", "this session", "local store <file>"
    host_us: float | None = None
    graph_us: float | None = None

    @property
    def caller_us(self) -> float:
        return max(self.median_us, self.host_us or 0.0)

    @property
    def device_us(self) -> float:
        return self.median_us if self.graph_us is None else self.graph_us


def _changed() -> None:
    """A figure was recorded or cleared, or the policy changed: dispatch re-resolves."""
    _spec.touch()


def use_local(enabled: bool | None = True) -> None:
    """Rank by the local store too (None: back to the environment's choice)."""
    global _use_local
    _use_local = enabled
    _changed()


def uses_local() -> bool:
    if _use_local is not None:
        return _use_local
    return os.environ.get("RAPID_LLM_LOCAL_MEASUREMENTS", "").lower() in ("1", "true", "yes", "on")


# ------------------------------------------------------------------ files


def results_dir() -> Path:
    return platform.cache_dir("results")


def results_path(device_name: str) -> Path:
    return results_dir() / f"{platform.slug(device_name)}.json"


def _key(op: str, row: str, dtype: str, bucket: int) -> str:
    return f"{op}|{row}|{dtype}|{bucket}"


def load_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a results document (the store's own files, or a committed copy)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
            raise ValueError("no 'entries' table")
        if not isinstance(doc.get("device"), str):
            raise ValueError("no 'device' name")
    except (ValueError, OSError) as exc:
        raise RuntimeError(f"benchmark results file {path} is unreadable ({exc}); delete it to start over") from exc
    return doc


def _cached_file(path: Path) -> dict[str, Any] | None:
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return None
    with _lock:
        cached = _loaded.get(path)
        if cached and cached[0] == mtime:
            return cached[1]
        doc = load_file(path)
        _loaded[path] = (mtime, doc)
        return doc


def load(device_name: str) -> dict[str, Any]:
    """The local store's document for a device (empty when nothing was recorded there)."""
    return _cached_file(results_path(device_name)) or {"device": device_name, "entries": {}}


def committed_for(op: str) -> Path | None:
    """The first committed results file that holds figures of ``op``, or None."""
    for path in committed_results():
        if any(e.get("op") == op for e in load_file(path)["entries"].values()):
            return path
    return None


#: Where committed figures are read from (None: the package's ops, ``platform.OPS_DIR``); a test points it
#: at a folder of its own.
COMMITTED_ROOT: Path | None = None


def _committed_root() -> Path:
    return platform.OPS_DIR if COMMITTED_ROOT is None else COMMITTED_ROOT


def committed_results() -> list[Path]:
    """The figures files the package ships, ``ops/<group>/<op>/figures/<gpu kind>.json``: the same in a checkout
    and in an installed wheel, whatever the working directory."""
    return sorted(_committed_root().glob(f"*/*/{platform.FIGURES}/*.json"))


def figures_path(op: str, device_name: str) -> Path:
    """Where the package keeps ``op``'s figures for a GPU kind: ``ops/<group>/<op>/figures/<gpu kind>.json``."""
    folder = next((f for f in platform.op_folders() if f.name == op), None)
    if folder is None:
        raise ValueError(f"{op}: no op folder under {platform.OPS_DIR} to keep its figures in (a notebook's op "
                         "ships with promote() first; or give the file to write)")
    return folder / platform.FIGURES / f"{platform.slug(device_name)}.json"


def committed_label(path: Path) -> str:
    """How explain and the plots name a committed file: ``committed norm/rms_norm/figures/nvidia_h200.json``."""
    root = _committed_root()
    return "committed " + (path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path))


def _committed_for(device_name: str) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in committed_results():
        doc = _cached_file(path)
        if doc is not None and doc.get("device") == device_name:
            out.append((path, doc))
    return out


def _write(path: Path, doc: dict[str, Any]) -> None:
    platform.write_atomic(path, json.dumps(doc, indent=1, sort_keys=True))
    with _lock:
        _loaded.pop(path, None)
    _changed()


# ------------------------------------------------------------------ writing


def make_entry(op: str, row: str, dtype: str, numel: int, median_us: float, **figures: Any) -> tuple[str, dict]:
    """The key and stored form of one measurement."""
    if not median_us > 0:
        raise ValueError(f"{op}/{row}: median latency must be positive, got {median_us!r}")
    bucket = platform.size_bucket(numel)
    return _key(op, row, dtype, bucket), {
        "op": op, "row": row, "dtype": dtype, "bucket": bucket, "numel": int(numel),
        "median_us": float(median_us), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **figures,
    }


def record(op: str, row: str, device_name: str, dtype: str, numel: int, median_us: float,
           **figures: Any) -> None:
    """Keep one measurement for this session (it ranks rows now) and in the local store (it persists)."""
    key, entry = make_entry(op, row, dtype, numel, median_us, **figures)
    with _lock:
        _session.setdefault((str(results_dir()), device_name), {})[key] = entry
    doc = dict(load(device_name))
    doc["device"] = device_name
    doc["entries"] = {**doc.get("entries", {}), key: entry}
    _write(results_path(device_name), doc)


def record_meta(device_name: str, **fields: Any) -> None:
    """Store facts about the device's measurements (copy roofline, versions, date) beside them."""
    doc = dict(load(device_name))
    doc["device"] = device_name
    doc.setdefault("entries", {})
    doc["meta"] = {**doc.get("meta", {}), **fields}
    _write(results_path(device_name), doc)


def meta(device_name: str) -> dict[str, Any]:
    """The facts recorded with :func:`record_meta` (empty when none)."""
    return dict(load(device_name).get("meta", {}))


def clear(device_name: str) -> None:
    """Forget a device's local and session measurements (committed files stay)."""
    path = results_path(device_name)
    path.unlink(missing_ok=True)
    with _lock:
        _loaded.pop(path, None)
        _session.pop((str(results_dir()), device_name), None)
    _changed()


def merge_file(path: str | os.PathLike) -> str:
    """Merge a results file into the local store; returns its device."""
    doc = load_file(path)
    device_name = doc["device"]
    mine = dict(load(device_name))
    merged = dict(mine.get("entries", {}))
    merged.update(doc["entries"])
    mine.update(device=device_name, entries=merged, meta={**mine.get("meta", {}), **doc.get("meta", {})})
    _write(results_path(device_name), mine)
    return device_name


def export(device_name: str, path: str | os.PathLike, op: str | None = None) -> Path:
    """Write a device's local measurements (optionally one op's) to ``path``, in the store's format."""
    doc = load(device_name)
    chosen = {k: e for k, e in doc["entries"].items() if op is None or e["op"] == op}
    out = {"device": device_name, "entries": chosen, "meta": doc.get("meta", {})}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return path


# ------------------------------------------------------------------ reading


def _sources(device_name: str) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """(source name, entries) in the order they are consulted."""
    out: list[tuple[str, dict[str, dict[str, Any]]]] = []
    with _lock:
        session = dict(_session.get((str(results_dir()), device_name), {}))
    if session:
        out.append(("this session", session))
    if uses_local():
        path = results_path(device_name)
        local = load(device_name)["entries"]
        if local:
            out.append((f"local store {path}", local))
    for path, doc in _committed_for(device_name):
        out.append((committed_label(path), doc["entries"]))
    return out


def _of_code(entry: dict[str, Any], digest: str | None) -> bool:
    """Whether a figure measured the code the row runs now (``digest``; None: a row with no source to name)."""
    return digest is None or entry.get(DIGEST_FIELD) == digest


def _find(sources: list[tuple[str, dict[str, dict[str, Any]]]], op: str, row: str, dtype: str,
          bucket: int, digest: str | None = None,
          passed_over: list[tuple[str, dict[str, Any]]] | None = None) -> tuple[str, dict[str, Any]] | None:
    """The rule: the first source with a figure of the row's code within NEAREST_BUCKETS, the nearest bucket in
    it. A figure of other code (another digest, or none recorded) is passed over, into ``passed_over``."""
    for source, table in sources:
        for distance in range(NEAREST_BUCKETS + 1):
            for b in sorted({bucket - distance, bucket + distance}):
                hit = table.get(_key(op, row, dtype, b))
                if hit is None:
                    continue
                if _of_code(hit, digest):
                    return source, hit
                if passed_over is not None:
                    passed_over.append((source, hit))
    return None


def form_key(op: str, form: str | None) -> str:
    """The name figures of one of an op's forms are stored under (``op`` itself for its declared form)."""
    return op if form is None else f"{op}[{form}]"


@dataclasses.dataclass(frozen=True)
class StaleFigure:
    """A figure dispatch does not rank by: it measured other code than the row runs now."""

    source: str
    measured: str | None  # the digest the figure names (None: it names none)
    current: str

    def __str__(self) -> str:
        was = f"source {self.measured[:10]}" if self.measured else "no source digest"
        return f"figures of other code ignored ({self.source}: {was}, the row's source is {self.current[:10]})"


def stale(op: str, row: str, device_name: str, dtype: str, bucket: int, digest: str | None) -> StaleFigure | None:
    """The figure :func:`lookup` passed over for ``row`` because its code changed since, or None."""
    passed: list[tuple[str, dict[str, Any]]] = []
    _find(_sources(device_name), op, row, dtype, bucket, digest, passed)
    if not passed or digest is None:
        return None
    source, entry = passed[0]
    return StaleFigure(source, entry.get(DIGEST_FIELD), digest)


def lookup(op: str, row: str, device_name: str, dtype: str, bucket: int, digest: str | None = None) -> Figure | None:
    """The median latency of ``row`` at the nearest measured bucket and its source, or None. With ``digest`` (the
    row's code now: rapid_llm.kernels.toolchain.digests), only figures that measured that code count."""
    found = _find(_sources(device_name), op, row, dtype, bucket, digest)
    if found is None:
        return None
    source, hit = found
    host, graph = hit.get("host_us"), hit.get("graph_us")
    return Figure(float(hit["median_us"]), source, None if host is None else float(host),
                  None if graph is None else float(graph))


def ranked_entries(device_name: str, op: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(source, entry) for each figure that ranks rows on ``device_name`` now, as :func:`lookup` picks them.

    What a plot or table shows so that it agrees with dispatch: an entry
    that an earlier source shadows (a figure of the same row within
    NEAREST_BUCKETS) is left out, and the local store counts only when
    opted in.
    """
    sources = _sources(device_name)
    out = []
    for source, table in sources:
        for entry in table.values():
            if op is not None and entry.get("op") != op:
                continue
            bucket = entry.get("bucket", platform.size_bucket(entry["numel"]))
            found = _find(sources, entry["op"], entry["row"], entry["dtype"], bucket)
            if found is not None and found[0] == source and found[1] is entry:
                out.append((source, entry))
    return sorted(out, key=lambda se: (se[1]["op"], se[1]["row"], se[1]["dtype"], se[1]["numel"]))


def entries(device_name: str, op: str | None = None) -> list[dict[str, Any]]:
    """Every locally stored measurement for a device (optionally one op), sorted for plotting."""
    out = [e for e in load(device_name)["entries"].values() if op is None or e["op"] == op]
    return sorted(out, key=lambda e: (e["op"], e["row"], e["dtype"], e["numel"]))
