"""bench_decode.py (benchmarks/models/) on a CPU: the script's wiring, eager only (its figures need CUDA graphs)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "models" / "bench_decode.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_decode", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_decode"] = module
    spec.loader.exec_module(module)
    return module


def test_bench_decode_times_the_eager_step_on_a_cpu_and_names_its_sampler(capsys, tmp_path):
    script = _load()
    out = tmp_path / "decode.json"
    assert script.main(["--device", "cpu", "--tokens", "2", "--layers", "1", "--repeats", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "sampler " in printed and "T=   2  eager:" in printed, printed
    assert '"tokens": 2' in out.read_text()


@pytest.mark.parametrize("argv", [["--layer-forms"], ["--arms", "reduce-overhead"], ["--tokens", "0"]])
def test_bench_decode_refuses_what_a_cpu_cannot_time(argv):
    with pytest.raises(SystemExit):
        _load().main(["--device", "cpu", *argv])
