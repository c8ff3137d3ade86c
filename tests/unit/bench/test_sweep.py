"""sweep on the local pool, on a CPU: records, the merge into figures files dispatch reads, a crash isolated.

Small shapes and few repeats: what is checked is where figures go and what they name, never their values.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from rapid_llm.bench.sweeps import LocalPool, sweep
from rapid_llm.bench.sweeps.records import Environment, Record, merge_records, target_path
from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch import measurements
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain.digests import code_digest

CRASHER = "external/sweep_crasher"
QUICK = dict(warmup=1, repeats=5)
#: These are the CPU pool's tests (one CPU worker, as on a machine without a GPU), wherever they run; the pool on a
#: GPU is tests/gpu/unit/bench/test_sweep.py's.
CPU_POOL = dict(devices=[])


def _crash(input, factor, out=None):  # noqa: A002 - the op's argument names
    """A row that takes its process down (a kernel that faults does the same to a CUDA worker)."""
    sys.stderr.write("sweep_crasher: going down\n")
    sys.stderr.flush()
    os._exit(7)


@pytest.fixture(scope="module")
def swept():
    """One CPU sweep of rms_norm (native and Triton-interpreted rows) at one small shape, shared by the tests."""
    return sweep(["rms_norm"], tokens=(1,), dtypes=("fp32",), executor=LocalPool(**CPU_POOL), **QUICK)


def test_the_local_pool_times_every_cpu_row_in_one_worker(swept):
    assert swept.failures == [] and swept.tasks == 1 and swept.workers == 1
    rows = sorted(r.row for r in swept.figures)
    assert rows == ["native/rms_norm", "triton/rms_norm"]  # the interpreter serves on a CPU worker
    assert len({r.worker for r in swept.figures}) == 1  # a task's rows on one device, never across two
    for r in swept.figures:
        assert r.env.gpu_kind == "cpu" and r.env.torch and r.env.commit and r.median_us > 0
        assert r.source_digest == code_digest(spec.get_row(r.row))  # the code this process runs
        assert r.numel == spec.get_decl("rms_norm").token_numel
    assert "native/rms_norm" in swept.table() and "cpu" in str(swept)


def test_merge_writes_the_figures_file_dispatch_reads(swept, tmp_path, monkeypatch):
    (path,) = swept.merge(tmp_path)
    assert path == target_path("rms_norm", "cpu", tmp_path)
    assert path.relative_to(tmp_path).as_posix() == "norm/rms_norm/figures/cpu.json"
    doc = measurements.load_file(path)
    assert doc["device"] == "cpu" and doc["meta"]["commit"] == swept.figures[0].env.commit
    assert {e["row"] for e in doc["entries"].values()} == {"native/rms_norm", "triton/rms_norm"}
    assert all(e[measurements.DIGEST_FIELD] for e in doc["entries"].values())
    # dispatch ranks by it once it sits where committed figures do
    monkeypatch.setattr(measurements, "COMMITTED_ROOT", tmp_path)
    native = spec.get_row("native/rms_norm")
    numel = swept.figures[0].numel
    fig = measurements.lookup("rms_norm", native.name, "cpu", "fp32", platform.size_bucket(numel), code_digest(native))
    assert fig is not None and fig.source.startswith("committed norm/rms_norm/figures/cpu.json")


def _record(row: str, numel: int, commit: str = "c0") -> Record:
    env = Environment(gpu_kind="cpu", driver=None, cuda=None, torch="t", commit=commit)
    return Record(op="rms_norm", form=None, row=row, dtype="fp32", numel=numel, env=env, median_us=1.0 + numel,
                  source_digest="d" * 64)


def test_concurrent_merges_into_one_file_lose_nothing(tmp_path):
    """Eight writers at once, each its own entries: read-merge-write under the lock keeps every one."""
    barrier = threading.Barrier(8)

    def write(i: int) -> None:
        barrier.wait()
        merge_records([_record(f"native/w{i}", 1 << (4 + k)) for k in range(3)], tmp_path)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = json.loads(target_path("rms_norm", "cpu", tmp_path).read_text())
    assert len(doc["entries"]) == 24
    # a later merge replaces by key and keeps the rest; replace=True starts the file afresh
    merge_records([_record("native/w0", 16, commit="c1")], tmp_path)
    doc = json.loads(target_path("rms_norm", "cpu", tmp_path).read_text())
    assert len(doc["entries"]) == 24 and doc["entries"]["rms_norm|native/w0|fp32|5"]["commit"] == "c1"
    merge_records([_record("native/w0", 16)], tmp_path, replace=True)
    assert len(json.loads(target_path("rms_norm", "cpu", tmp_path).read_text())["entries"]) == 1


def test_a_worker_that_dies_takes_only_its_task():
    """The crashing row's task says crashed with the worker's stderr; a fresh worker runs the next task."""
    with spec.isolated(discover=True):
        spec.register(KernelSpec(name=CRASHER, op="scale", backend="external", target=f"{__name__}:_crash",
                                 dtypes=("fp32",), devices=("cpu",), golden=GoldenRecord(verified=True,
                                                                                         baseline="native/scale")))
        result = sweep(["scale", "rms_norm"], rows=[CRASHER, "native/rms_norm"], numels=(4096,),
                       dtypes=("fp32",), executor=LocalPool(**CPU_POOL), **QUICK)
    (crashed,) = [r for r in result.records if r.op == "scale"]
    assert crashed.status == "crashed" and crashed.row == CRASHER
    assert "exit 7" in crashed.detail and "sweep_crasher: going down" in crashed.detail
    (timed,) = [r for r in result.records if r.op == "rms_norm"]
    assert timed.ok and timed.row == "native/rms_norm" and timed.worker == crashed.worker


def test_without_ray_the_ray_executor_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install -e \.\[ray\]"):
        sweep(["rms_norm"], tokens=(1,), dtypes=("fp32",), executor="ray")


def test_bad_requests_say_what_is_wrong():
    with pytest.raises(ValueError, match="unknown op 'nope'"):
        sweep(["nope"])
    with pytest.raises(ValueError, match="token_numel"):
        sweep(["scale"], tokens=(1,))
    with pytest.raises(ValueError, match="serves none of"):
        sweep(["rms_norm"], rows=["native/scale"], tokens=(1,))


def test_importing_sweeps_imports_neither_torch_nor_ray():
    code = ("import sys, rapid_llm.bench, rapid_llm.bench.sweeps as s; s.__all__; "
            "print(sorted(m for m in ('torch', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_sweep_script_merges_into_the_folder_it_is_given(tmp_path, capsys, monkeypatch):
    """benchmarks/sweep.py, as the committed figures are made, pointed at a folder of the ops folder's shape (its
    pool held to the CPU worker, as on a machine without a GPU, so the figures file is cpu.json everywhere)."""
    import importlib.util
    from pathlib import Path

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "sweep.py"
    module_spec = importlib.util.spec_from_file_location("sweep_script", path)
    script = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(script)
    assert script.main(["--ops", "silu_and_mul", "--tokens", "1", "--dtypes", "fp32", "--warmup", "1", "--repeats",
                        "5", "--out", str(tmp_path), "--json", str(tmp_path / "records.json")]) == 0
    printed = capsys.readouterr().out
    assert "task 1: " in printed and "wrote " in printed
    doc = measurements.load_file(tmp_path / "activation" / "silu_and_mul" / "figures" / "cpu.json")
    assert {e["row"] for e in doc["entries"].values()} == {"native/silu_and_mul", "triton/silu_and_mul"}
    records = json.loads((tmp_path / "records.json").read_text())
    assert {r["status"] for r in records} == {"ok"} and records[0]["env"]["gpu_kind"] == "cpu"
