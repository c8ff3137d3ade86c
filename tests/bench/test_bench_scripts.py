"""The benchmark scripts run end to end on this machine and write results the store can read."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rapid_llm.bench import store

SCRIPTS = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_scale_writes_results_json(tmp_path, capsys):
    bench_scale = _load("bench_scale")
    out = tmp_path / "scale.json"
    assert bench_scale.main(["--sizes", "1024", "--dtypes", "fp32", "--repeats", "3", "--device", "cpu",
                             "--record", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "CPU numbers" in printed and "reference/copy" in printed and "% copy" in printed
    doc = store.load_file(out)
    rows = {e["row"] for e in doc["entries"].values()}
    assert {"native/scale", "reference/torch.mul", "reference/copy"} <= rows
    assert doc["meta"]["copy_roofline_gbps"] > 0
    assert store.lookup_latency("scale", "native/scale", "cpu", "fp32", (1024).bit_length()) is not None


def test_bench_scale_check_harness_prints_spread(capsys):
    bench_scale = _load("bench_scale")
    assert bench_scale.main(["--check-harness", "--repeats", "3", "--device", "cpu"]) == 0
    assert "spread (max-min)/median" in capsys.readouterr().out


def test_bench_scale_rejects_bad_sizes():
    with pytest.raises(SystemExit):
        _load("bench_scale").main(["--sizes", "0", "--device", "cpu"])


def test_dispatch_overhead_reports_both_paths(capsys):
    assert _load("bench_dispatch_overhead").main(["--device", "cpu", "--n", "20"]) == 0
    printed = capsys.readouterr().out
    assert "through dispatch" in printed and "row called direct" in printed and "dispatch adds" in printed
