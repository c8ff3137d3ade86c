"""Sweeps: rows x sizes x dtypes x GPU kinds on an executor, merged into the figures files dispatch reads.

    from rapid_llm.bench.sweeps import sweep
    result = sweep(["rms_norm", "silu_and_mul"], tokens=(1, 128, 4096))   # one worker per visible GPU
    print(result.table()); result.merge()      # ops/<group>/<op>/figures/<gpu kind>.json, one per kind

``executor="ray"`` runs the same tasks on a Ray cluster (``pip install -e .[ray]``).
Names load on first use: importing this package imports neither torch nor ray.
"""
from __future__ import annotations

from rapid_llm.kernels.platform import lazy_exports

_EXPORTS: dict[str, tuple[str, str]] = {
    "sweep": ("rapid_llm.bench.sweeps.run", "sweep"),
    "Executor": ("rapid_llm.bench.sweeps.run", "Executor"),
    "SweepResult": ("rapid_llm.bench.sweeps.records", "SweepResult"),
    "Record": ("rapid_llm.bench.sweeps.records", "Record"),
    "Environment": ("rapid_llm.bench.sweeps.records", "Environment"),
    "merge_records": ("rapid_llm.bench.sweeps.records", "merge_records"),
    "Task": ("rapid_llm.bench.sweeps.tasks", "Task"),
    "DEFAULT_TOKENS": ("rapid_llm.bench.sweeps.tasks", "DEFAULT_TOKENS"),
    "LocalPool": ("rapid_llm.bench.sweeps.local", "LocalPool"),
    "RayExecutor": ("rapid_llm.bench.sweeps.ray_executor", "RayExecutor"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
