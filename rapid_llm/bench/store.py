"""Benchmark results that outlive the process, one JSON file per device name.

Dispatch reads measured latency from here to rank rows, so a figure measured
once in a notebook orders the rows in every later session on the same GPU.
Keys are (op, row, dtype, size bucket); the bucket is the power-of-two size
class that dispatch uses (``numel.bit_length()``).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = [
    "results_dir",
    "results_path",
    "record",
    "record_meta",
    "make_entry",
    "meta",
    "lookup_latency",
    "entries",
    "load",
    "load_file",
    "export",
    "merge_file",
    "clear",
    "committed_results",
]

_lock = threading.Lock()
_loaded: dict[Path, tuple[float, dict[str, Any]]] = {}

#: How many power-of-two buckets away a measurement may be and still rank a row.
NEAREST_BUCKETS = 1


def results_dir() -> Path:
    """``$RAPID_LLM_CACHE_DIR/results``, else ``$XDG_CACHE_HOME/rapid_llm/results`` (created on first write)."""
    root = os.environ.get("RAPID_LLM_CACHE_DIR")
    if root:
        return Path(root) / "results"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "rapid_llm" / "results"


def _slug(device_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", device_name).strip("_").lower() or "unknown"


def results_path(device_name: str) -> Path:
    return results_dir() / f"{_slug(device_name)}.json"


def _key(op: str, row: str, dtype: str, bucket: int) -> str:
    return f"{op}|{row}|{dtype}|{bucket}"


def load(device_name: str) -> dict[str, Any]:
    """The stored document for a device (empty when nothing was measured there)."""
    path = results_path(device_name)
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return {"device": device_name, "entries": {}}
    with _lock:
        cached = _loaded.get(path)
        if cached and cached[0] == mtime:
            return cached[1]
        doc = load_file(path)
        _loaded[path] = (mtime, doc)
        return doc


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


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    with _lock:
        _loaded.pop(path, None)
    _notify()


def _notify() -> None:
    import sys

    dispatch = sys.modules.get("rapid_llm.kernels.dispatch")
    if dispatch is not None:
        dispatch.clear_cache()


def record(op: str, row: str, device_name: str, dtype: str, numel: int, median_us: float,
           **figures: Any) -> None:
    """Store one measurement (median latency plus any other figures: p20_us, gbps, ...)."""
    key, entry = make_entry(op, row, dtype, numel, median_us, **figures)
    doc = dict(load(device_name))
    doc["device"] = device_name
    doc["entries"] = {**doc.get("entries", {}), key: entry}
    _write(results_path(device_name), doc)


def make_entry(op: str, row: str, dtype: str, numel: int, median_us: float, **figures: Any) -> tuple[str, dict]:
    """The key and stored form of one measurement (for writing a results document directly)."""
    if not median_us > 0:
        raise ValueError(f"{op}/{row}: median latency must be positive, got {median_us!r}")
    bucket = int(numel).bit_length()
    return _key(op, row, dtype, bucket), {
        "op": op, "row": row, "dtype": dtype, "bucket": bucket, "numel": int(numel),
        "median_us": float(median_us), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **figures,
    }


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


def lookup_latency(op: str, row: str, device_name: str, dtype: str, bucket: int) -> float | None:
    """Median latency (us) of ``row`` at the nearest measured bucket, or None when unmeasured."""
    entries = load(device_name)["entries"]
    for distance in range(NEAREST_BUCKETS + 1):
        for b in {bucket - distance, bucket + distance}:
            hit = entries.get(_key(op, row, dtype, b))
            if hit is not None:
                return float(hit["median_us"])
    return None


def entries(device_name: str, op: str | None = None) -> list[dict[str, Any]]:
    """Every stored measurement for a device (optionally one op), sorted for plotting."""
    out = [e for e in load(device_name)["entries"].values() if op is None or e["op"] == op]
    return sorted(out, key=lambda e: (e["op"], e["row"], e["dtype"], e["numel"]))


def merge_file(path: str | os.PathLike) -> str:
    """Merge a results file (such as a committed benchmarks/results copy) into the store; returns its device."""
    doc = load_file(path)
    device_name = doc["device"]
    mine = dict(load(device_name))
    merged = dict(mine.get("entries", {}))
    merged.update(doc["entries"])
    mine.update(device=device_name, entries=merged, meta={**mine.get("meta", {}), **doc.get("meta", {})})
    _write(results_path(device_name), mine)
    return device_name


def export(device_name: str, path: str | os.PathLike, op: str | None = None) -> Path:
    """Write a device's measurements (optionally one op's) to ``path``, in the store's own format."""
    doc = load(device_name)
    chosen = {k: e for k, e in doc["entries"].items() if op is None or e["op"] == op}
    out = {"device": device_name, "entries": chosen, "meta": doc.get("meta", {})}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return path


#: Where a checkout's benchmarks/ is looked for when the working directory is outside it.
_PACKAGE_DIR = Path(__file__).resolve().parent


def _project_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    return None


def committed_results(start: str | os.PathLike | None = None) -> list[Path]:
    """Results files committed under ``benchmarks/results/`` of the project.

    The project root is found by walking up from ``start`` (default: the
    working directory) to a ``pyproject.toml``, then from the package's own
    location, so a notebook opened anywhere inside a checkout finds them.
    """
    candidates = [Path(start) if start is not None else Path.cwd(), _PACKAGE_DIR]
    for origin in candidates:
        root = _project_root(origin.resolve())
        if root is not None and (root / "benchmarks" / "results").is_dir():
            return sorted((root / "benchmarks" / "results").glob("*.json"))
    return []


def clear(device_name: str) -> None:
    """Forget a device's measurements (dispatch falls back to static priority)."""
    path = results_path(device_name)
    path.unlink(missing_ok=True)
    with _lock:
        _loaded.pop(path, None)
    _notify()
