"""The benchmark scripts run end to end on this machine and write results the store can read."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.dispatch import measurements

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    path = BENCHMARKS / f"{name}.py" if (BENCHMARKS / f"{name}.py").exists() else BENCHMARKS / "kernels" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the script's body runs
    spec.loader.exec_module(module)
    return module


def test_bench_op_script_writes_results_json(tmp_path, capsys):
    bench = _load("bench_op")
    out = tmp_path / "scale.json"
    assert bench.main(["scale", "--sizes", "1024", "--dtypes", "fp32", "--repeats", "3", "--device", "cpu",
                       "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "CPU numbers" in printed and "native/scale" in printed and "% copy" in printed
    assert "skipped jit/scale" in printed  # a row that cannot run here is named, with the reason
    doc = measurements.load_file(out)
    assert "native/scale" in {e["row"] for e in doc["entries"].values()}
    assert doc["meta"]["copy_roofline_gbps"] > 0
    # Not recorded by default: a look at the numbers leaves nothing a later plot or dispatch could pick up.
    assert measurements.lookup("scale", "native/scale", "cpu", "fp32", (1024).bit_length()) is None
    assert measurements.entries("cpu") == [] and not measurements.results_path("cpu").exists()


def test_bench_op_script_records_only_when_asked():
    bench = _load("bench_op")
    assert bench.main(["scale", "--sizes", "1024", "--dtypes", "fp32", "--repeats", "3", "--device", "cpu",
                       "--rows", "native/scale", "--record"]) == 0
    assert [e["row"] for e in measurements.entries("cpu", "scale")] == ["native/scale"]
    measurements._session.clear()  # the script's process has ended: what is left is the local store...
    assert measurements.lookup("scale", "native/scale", "cpu", "fp32", (1024).bit_length()) is None
    assert measurements.ranked_entries("cpu", "scale") == []  # ...which ranks nothing until opted in


def test_bench_op_check_harness_prints_spread(capsys):
    assert _load("bench_op").main(["--check-harness", "--repeats", "3", "--device", "cpu"]) == 0
    assert "spread (max-min)/median" in capsys.readouterr().out


def test_bench_op_script_rejects_bad_sizes():
    with pytest.raises(SystemExit):
        _load("bench_op").main(["scale", "--sizes", "0", "--device", "cpu"])


def test_dispatch_overhead_reports_both_paths(capsys):
    assert _load("bench_dispatch_overhead").main(["--device", "cpu", "--n", "20"]) == 0
    printed = capsys.readouterr().out
    assert "through dispatch" in printed and "row called direct" in printed and "dispatch adds" in printed
    assert "torch.mul" in printed and "op / torch.mul" in printed


def test_custom_op_overhead_prints_every_path_and_torch_s_floors(capsys):
    """The call paths of an op, and what torch.ops costs by itself: a Python kernel and aten's. The C++ floors
    (``--cpp-floor``, about 20 s of compiling here) are tests/gpu/benchmarks/test_bench_scripts.py's."""
    assert _load("bench_custom_op_overhead").main(["--op", "scale", "--device", "cpu", "--pairs", "1",
                                                   "--n", "20"]) == 0
    printed = capsys.readouterr().out
    for arm in ("K.scale", "torch.ops.rapid_llm.scale.default", "torch.library.custom_op", "row native/scale direct",
                "torch.ops, same schema, kernel = the row", "torch.ops, same schema, kernel does no work",
                "Python kernel (returns its input)", "aten C++ kernel (mul.Scalar)"):
        assert arm in printed, printed


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU twins stand in for CUDA rows where none can run; on a "
                    "GPU the script times the CUDA rows themselves (--device cuda)")
def test_row_checks_runs_on_cpu_through_the_jit_rows_twins(capsys):
    from rapid_llm.kernels.registry import spec

    assert _load("bench_row_checks").main(["--device", "cpu", "--rounds", "1", "--n", "5"]) == 0
    printed = capsys.readouterr().out
    assert "jit/cpu_twin_of_rms_norm" in printed and "with checks" in printed
    assert not [r for op in spec.all_ops() for r in spec.rows_for(op) if "cpu_twin" in r.name]  # gone after


def test_strided_script_times_each_row_and_the_layout_alone(capsys):
    strided = _load("bench_strided")
    assert strided.main(["--device", "cpu", "--tokens", "1", "3", "--hidden", "64", "--ops", "rms_norm",
                         "--compiled"]) == 0
    printed = capsys.readouterr().out
    for line in ("native/rms_norm", "dispatch -> native/rms_norm", "torch.compile(native)",
                 "copy of x (the layout alone)"):
        assert sum(row.split()[1:2] == line.split()[:1] for row in printed.splitlines()) == 2, printed
    assert "jit/rms_norm                             not run:" in printed


def test_profile_vs_compile_lists_the_op_its_rows_and_compile_and_needs_a_gpu(capsys):
    """What ncu is shown: the dispatched op, each row asked for (of that op only), torch.compile's kernel."""
    script = _load("profile_vs_compile")
    found = script.implementations("rms_norm", ["triton/rms_norm", "triton/silu_and_mul"])
    assert list(found) == ["K.rms_norm", "triton/rms_norm", "torch.compile"]
    if not __import__("torch").cuda.is_available():
        assert script.main(["--ops", "rms_norm", "--tokens", "1"]) == 2
        assert "needs a CUDA device" in capsys.readouterr().out


def test_profile_vs_compile_compiles_per_t_or_once_as_the_peer_benchmark_does(monkeypatch):
    """--compile-dynamic auto passes torch's default (dynamic from the second T), the default a kernel per T."""
    torch = __import__("torch")
    script = _load("profile_vs_compile")
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, dynamic=False: seen.append(dynamic) or fn)
    script.implementations("rms_norm", [])
    script.implementations("rms_norm", [], dynamic=None)
    assert seen == [False, None]


def test_peer_bench_sets_the_peer_benchmark_to_a_model_s_shapes(tmp_path):
    """--model sets the peer benchmark's shapes, the rope cache's width too where its builder fixed the head size
    as a default when it was defined (the peer benchmark's own form)."""
    (tmp_path / "bench_peers.py").write_text(
        "HIDDEN, INTER, Q_HEADS, KV_HEADS, HEAD = 4096, 14336, 32, 8, 128\nMAX_POS = 16\n"
        "def rope_cache(device, max_pos=MAX_POS, rot=HEAD):\n    return (max_pos, rot)\n"
        "def make_inputs():\n    return rope_cache('cpu')\n")
    script = _load("peer_bench")
    peer = script.load(str(tmp_path))
    for model, (hidden, inter, q_heads, kv_heads, head) in script.MODELS.items():
        script.set_model(peer, model)
        assert (peer.HIDDEN, peer.INTER, peer.Q_HEADS, peer.KV_HEADS, peer.HEAD) == (hidden, inter, q_heads, kv_heads,
                                                                                    head)
        assert peer.make_inputs() == (16, head), model


def test_profile_vs_liger_takes_the_peer_benchmark_s_models_and_needs_a_gpu(capsys):
    script = _load("profile_vs_liger")
    with pytest.raises(SystemExit):
        script.main(["--peer-bench", ".", "--model", "not-a-model"])
    if not __import__("torch").cuda.is_available():
        assert script.main(["--peer-bench", "."]) == 2
        assert "needs a CUDA device" in capsys.readouterr().out


def test_profile_vs_compile_summarizes_an_ncu_export(tmp_path, capsys):
    """--summarize turns ncu's details CSV into one line per kernel, in launch order, without a GPU."""
    script = _load("profile_vs_compile")
    head = '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
    rows = ['"1","triton_red_fused_0","s","Duration","us","4.03"', '"0","void k<float>(float*)","s","Duration","us","2.85"',
            '"0","void k<float>(float*)","s","Registers Per Thread","register/thread","38"',
            '"0","void k<float>(float*)","s","Not a summary metric","","9"']
    (tmp_path / "r.csv").write_text(head + "\n".join(rows) + "\n")
    assert script.main(["--summarize", str(tmp_path / "r.csv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["[0] k<float>", "    Duration 2.85 us | Registers Per Thread 38 register/thread",
                     "[1] triton_red_fused_0", "    Duration 4.03 us"]


def _peer_run(model: str | None, dispatch_us: float) -> dict:
    """A bench_peers.json of one op at two T (dispatch at T = 1024 always ahead): dispatch, its row alone, two
    peers (FlashInfer missing) and the copy."""
    figures = {"copy_us": 4.0, "dispatched": "jit/rms_norm", "rapid_llm": [dispatch_us, 0.0],
               "rapid_llm:jit": [dispatch_us * 1.02, 0.0], "liger": [5.0, 0.0], "torch.compile": [4.8, 0.0],
               "liger+prep": [1.0, 0.0]}
    return {"args": {"model": model} if model else {},
            "summary": {"rms_norm": {"1024": dict(figures, copy_us=8.0, rapid_llm=[4.0, 0.0]), "1": figures}}}


def test_peer_cells_judge_each_cell_against_the_best_peer_and_a_copy(tmp_path, capsys):
    """A cell is met within 1 % of the best of FlashInfer, Liger and torch.compile (never liger+prep); at decode T
    dispatch is also judged against the copy; the same row timed alone gives the run's spread; runs of one model
    are counted per cell."""
    script = _load("peer_cells")
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(__import__("json").dumps(_peer_run(None, 4.84)))
    second.write_text(__import__("json").dumps(_peer_run("llama3-8b", 4.90)))
    assert script.main([str(first), str(second)]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines()]
    first_t1 = next(line for line in lines if line[:2] == ["rms_norm", "1"])
    assert first_t1[3:7] == ["torch.compile", "4.80", "1.008", "yes"]
    assert first_t1[7:] == ["2.0", "%", "1.210", "no"]  # 4.84 / 4.0 of the copy: past 10 %
    assert "cells where dispatch is within 1 % of the best peer: 2 of 2" in out
    assert "cells where dispatch is within 1 % of the best peer: 1 of 2" in out  # 4.90 / 4.80 misses
    assert "== llama3-8b: runs in which each cell was met, of 2" in out
    assert any(line == ["rms_norm", "1", "1", "of", "2"] for line in lines)
    assert any(line == ["rms_norm", "1024", "2", "of", "2"] for line in lines)
    assert script.main([str(first), "--copy-within", "0.25"]) == 0
    assert "1.210 yes" in capsys.readouterr().out


def test_peer_cells_name_a_file_that_is_no_peer_benchmark(tmp_path, capsys):
    script = _load("peer_cells")
    (tmp_path / "other.json").write_text("{}")
    assert script.main([str(tmp_path / "other.json")]) == 2
    assert "no 'summary'" in capsys.readouterr().err


def test_compile_forms_gives_each_compile_a_code_object_of_its_own_and_needs_a_gpu(capsys):
    """Each torch.compile of the same plain torch gets its own code object (its own compile cache), computing the
    same; without CUDA the script says it needs a device."""
    script = _load("bench_compile_forms")

    def plain(x, scale=2):
        return x * scale

    copy = script._fresh(plain)
    assert copy.__code__ is not plain.__code__ and copy(3) == plain(3) == 6
    if not __import__("torch").cuda.is_available():
        assert script.main(["--peer-bench", "."]) == 2
        assert "needs a CUDA device" in capsys.readouterr().out


def test_full_flush_refuses_a_sweep_within_l2():
    """A sweep no larger than L2 would leave older evict_last lines in it: refused before any device is touched."""
    sys.path.insert(0, str(BENCHMARKS / "kernels"))
    import l2_flush

    with pytest.raises(ValueError, match="must exceed L2"):
        l2_flush.FullFlush(object(), sweep_l2=1.0)


_FAKE_PEER = """
HIDDEN, INTER, Q_HEADS, KV_HEADS, HEAD = 4096, 14336, 32, 8, 128
MAX_POS = 16
SEEN = {}
def rope_cache(device, max_pos=MAX_POS, rot=HEAD):
    return (max_pos, rot)
class GpuTimer:
    def _hold(self, us):
        SEEN["hold"] = us
def main(argv):
    SEEN["argv"], SEEN["timer"], SEEN["hidden"] = list(argv), GpuTimer, HIDDEN
    return 0
"""


@pytest.mark.parametrize("own_model_flag", [False, True])
def test_peer_full_flush_runs_the_peer_benchmark_with_its_timer_swapped(tmp_path, capsys, own_model_flag):
    """The benchmark's own main runs with every other argument, at the model's shapes (and its own --model where
    the copy has one), with a timer that holds the GPU longer for the sweeps; --check needs a GPU."""
    (tmp_path / "bench_peers.py").write_text(_FAKE_PEER + ("MODELS = {}\n" if own_model_flag else ""))
    script = _load("peer_full_flush")
    assert script.main(["--peer-bench", str(tmp_path), "--model", "llama3.2-1b", "--json", "out.json"]) == 0
    peer = sys.modules["bench_peers"]
    seen = peer.SEEN
    assert seen["argv"] == ["--json", "out.json"] + (["--model", "llama3.2-1b"] if own_model_flag else [])
    assert seen["hidden"] == 2048
    timer = seen["timer"]
    assert timer.__name__ == "FullFlushTimer" and issubclass(timer, timer.__mro__[1])
    timer.__new__(timer)._hold(100.0)
    assert seen["hold"] == pytest.approx(100.0 + 10 * 1.5 * script.l2_flush.SWEEP_HOST_US)
    if not __import__("torch").cuda.is_available():
        assert script.main(["--peer-bench", str(tmp_path), "--check"]) == 2
        assert "needs a CUDA device" in capsys.readouterr().out


def test_peer_model_runs_the_peer_benchmark_at_a_model_s_shapes_and_names_it_in_the_json(tmp_path):
    """The peer benchmark's own main, every other argument passed on, at the model's shapes; its JSON then names
    the model where peer_cells.py reads a run's shapes."""
    out = tmp_path / "run.json"
    (tmp_path / "bench_peers.py").write_text(_FAKE_PEER + "import json\ndef main(argv):\n"
        "    SEEN['argv'], SEEN['hidden'] = list(argv), HIDDEN\n"
        "    open(argv[argv.index('--json') + 1], 'w').write(json.dumps({'args': {'json': 'x'}, 'summary': {}}))\n"
        "    return 0\n")
    script = _load("peer_model")
    assert script.main(["--peer-bench", str(tmp_path), "--model", "llama3-70b", "--json", str(out)]) == 0
    seen = sys.modules["bench_peers"].SEEN
    assert seen["argv"] == ["--json", str(out)] and seen["hidden"] == 8192
    assert _load("peer_cells").model_of(__import__("json").loads(out.read_text())) == "llama3-70b"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="with a GPU the script times; this checks its refusal")
def test_harness_evict_last_needs_a_gpu(capsys):
    script = _load("bench_harness_evict_last")
    assert script.main([]) == 2
    assert "needs a CUDA device" in capsys.readouterr().out


def _scale_twin(x, factor, out=None):
    """native/scale's arithmetic, as an unverified row of its own."""
    return torch.mul(x, factor, out=out)


def test_bench_op_verify_times_an_unverified_row_once_it_passes(capsys):
    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

    with spec.isolated(discover=True):
        spec.register(KernelSpec(name="aot/scale_twin", op="scale", target=_scale_twin, devices=("cpu",),
                                 golden=GoldenRecord(verified=False, baseline="native/scale")))
        bench = _load("bench_op")
        assert bench.main(["scale", "--sizes", "1024", "--dtypes", "fp32", "--repeats", "3", "--device", "cpu",
                           "--verify"]) == 0
        printed = capsys.readouterr().out
        assert "verify aot/scale_twin: pass" in printed and "skipped aot/scale_twin" not in printed
        assert printed.count("aot/scale_twin") >= 2  # its verdict, and its line in the table
