"""The microbenchmark harness: the only sanctioned timer in rapid_llm.

``bench`` times GPU work with CUDA events and a cold L2, ``bench_stateful``
resets mutated inputs outside the timed region, ``bench_host`` measures the
host-side cost per call, ``copy_roofline`` is the bandwidth the rest is
compared with, and ``bench_op`` times every eligible row of an op and records
the medians that dispatch ranks rows by (through rapid_llm.kernels.dispatch.measurements), and ``compare``
puts two rows of one op side by side: verified, timed interleaved with a confidence interval, and explained;
``sweep`` times rows x sizes x dtypes on every GPU (kind) an executor reaches, into the figures files (bench.sweeps).
Names load on first use, so importing this package costs nothing.
"""
from __future__ import annotations

from rapid_llm.kernels.platform import lazy_exports

_EXPORTS: dict[str, tuple[str, str]] = {
    "BenchResult": ("rapid_llm.bench.harness", "BenchResult"),
    "BenchRefused": ("rapid_llm.bench.integrity", "BenchRefused"),
    "bench": ("rapid_llm.bench.harness", "bench"),
    "bench_stateful": ("rapid_llm.bench.harness", "bench_stateful"),
    "bench_host": ("rapid_llm.bench.harness", "bench_host"),
    "copy_roofline": ("rapid_llm.bench.harness", "copy_roofline"),
    "bench_op": ("rapid_llm.bench.ops", "bench_op"),
    "OpMeasurement": ("rapid_llm.bench.ops", "OpMeasurement"),
    "compare": ("rapid_llm.bench.compare", "compare"),
    "Comparison": ("rapid_llm.bench.compare", "Comparison"),
    "saved_builds": ("rapid_llm.bench.row_versions", "saved_builds"),
    "CaseArgs": ("rapid_llm.kernels.registry.opdecl", "CaseArgs"),
    "sweep": ("rapid_llm.bench.sweeps.run", "sweep"),
    "tune": ("rapid_llm.bench.tune", "tune"),
    "TuneResult": ("rapid_llm.bench.tune", "TuneResult"),
    "SweepResult": ("rapid_llm.bench.sweeps.records", "SweepResult"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
