"""Measured figures: where they come from, how they order dispatch, and that dispatch is deterministic.

The whole path through a real CUDA-graph capture is in tests/gpu/unit/bench/test_store_and_priority.py.
"""
from __future__ import annotations

import dataclasses
import json
import warnings

from pathlib import Path

import pytest
import torch

from rapid_llm.bench import bench_op
from rapid_llm.kernels.dispatch import measurements
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.dispatch.dispatcher import explain, resolve
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference, declare_op, define_op
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

@pytest.fixture(autouse=True)
def serve_interpreter():
    """These tests use Triton-labelled rows on CPU tensors to check dispatch rules: let them serve."""
    from rapid_llm.kernels.toolchain import triton_support

    triton_support.serve_interpreter(True)
    yield
    triton_support.serve_interpreter(None)



def _mul(x, factor, out=None):
    out = torch.empty_like(x) if out is None else out
    return torch.mul(x, factor, out=out)


def _case(numel, dtype, device):
    x = torch.randn(numel, device=device).to(dtype)
    return CaseArgs((x, 3.0), {"out": torch.empty_like(x)}, bytes_moved=2 * x.nbytes)


#: The reference of the private ops below: x times a factor (a form's extra argument changes nothing).
_REFERENCE = Reference(make_inputs=lambda shape, dtype, device, gen: (torch.randn(shape, generator=gen).to(dtype), 3.0),
                       oracle=lambda x, f, *form: x.double() * f)


def _three_rows(op, floor, a, b, devices=("cpu",), floor_devices=None):
    """A private op's native floor and two verified rows, ``triton/<op>_a`` and ``jit/<op>_b``."""
    verified = GoldenRecord(verified=True)
    return [KernelSpec(name=f"native/{op}", op=op, backend="native", target=floor, devices=floor_devices or devices),
            KernelSpec(name=f"triton/{op}_a", op=op, backend="triton", target=a, devices=devices, golden=verified),
            KernelSpec(name=f"jit/{op}_b", op=op, backend="jit", target=b, devices=devices, golden=verified)]


@pytest.fixture
def prio_rows():
    """Two verified CPU rows of a private op (and its native floor), declared in a registry of their own."""
    rows = _three_rows("prio", _mul, _mul, _mul)
    with spec.isolated():
        declare_op("prio", rows=rows, reference=_REFERENCE, bench=_case)
        yield [r.name for r in rows]


def test_record_lookup_roundtrip_by_bucket(isolated_store):
    measurements.record("prio", "triton/prio_a", "cpu", "fp32", 4096, 12.5, gbps=3.0)
    assert measurements.results_path("cpu").parent == isolated_store / "results"
    figure = measurements.lookup("prio", "triton/prio_a", "cpu", "fp32", (4096).bit_length())
    assert figure.median_us == 12.5 and figure.source == "this session"
    assert measurements.lookup("prio", "triton/prio_a", "cpu", "fp32", (4096 * 2).bit_length()).median_us == 12.5
    assert measurements.lookup("prio", "triton/prio_a", "cpu", "fp32", (4096 * 8).bit_length()) is None
    assert measurements.lookup("prio", "triton/prio_a", "NVIDIA H200", "fp32", 13) is None
    (entry,) = measurements.entries("cpu", "prio")
    assert entry["gbps"] == 3.0 and entry["numel"] == 4096


def test_meta_export_and_merge(tmp_path):
    measurements.record("prio", "triton/prio_a", "Some GPU", "bf16", 1 << 20, 40.0)
    measurements.record("other", "native/other", "Some GPU", "bf16", 1 << 20, 41.0)
    measurements.record_meta("Some GPU", copy_roofline_gbps=4000.0)
    path = measurements.export("Some GPU", tmp_path / "some_gpu.json", op="prio")
    doc = json.loads(path.read_text())
    assert doc["device"] == "Some GPU" and len(doc["entries"]) == 1
    assert doc["meta"]["copy_roofline_gbps"] == 4000.0
    measurements.clear("Some GPU")
    assert measurements.entries("Some GPU") == [] and measurements.meta("Some GPU") == {}
    assert measurements.merge_file(path) == "Some GPU"
    measurements.use_local(True)  # merged figures live in the local store, ranked only when opted in
    try:
        assert measurements.lookup("prio", "triton/prio_a", "Some GPU", "bf16", 21).median_us == 40.0
    finally:
        measurements.use_local(None)
    assert measurements.meta("Some GPU")["copy_roofline_gbps"] == 4000.0


def test_unreadable_results_file_says_what_to_do(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{\"entries\": 3}")
    with pytest.raises(RuntimeError, match="unreadable.*delete it"):
        measurements.load_file(bad)


def test_the_shipped_figures_do_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    shipped = measurements.committed_results()
    assert shipped and all(p.is_relative_to(platform.OPS_DIR) and p.parent.name == platform.FIGURES
               for p in shipped)  # package data, in each op's folder
    (tmp_path / "pyproject.toml").write_text("")  # another project, with figures of its own
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "gpu.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert measurements.committed_results() == shipped


def test_measured_latency_orders_rows_and_unmeasured_loses(prio_rows):
    native, a, b = prio_rows
    # Unmeasured: the backend preference decides (jit before triton), native last.
    assert resolve("prio", dtype="fp32", device="cpu", numel=4096).name == b
    measurements.record("prio", a, "cpu", "fp32", 4096, 5.0)
    assert resolve("prio", dtype="fp32", device="cpu", numel=4096).name == a  # measured beats unmeasured
    measurements.record("prio", b, "cpu", "fp32", 4096, 3.0)
    assert resolve("prio", dtype="fp32", device="cpu", numel=4096).name == b  # faster measured wins
    ex = explain("prio", dtype="fp32", device="cpu", numel=4096)
    assert ex.verdict(b).measured_us == 3.0
    assert "3.00 us vs 5.00 us" in ex.verdict(a).reason
    # Another dtype has no figures: back to static ordering.
    assert resolve("prio", dtype="bf16", device="cpu", numel=4096).name == b


def test_bench_op_times_eligible_cpu_rows_and_records(prio_rows):
    native, a, b = prio_rows
    results = bench_op("prio", sizes=[1024], dtypes=["fp32"], warmup=1, repeats=3, device="cpu")
    assert {m.row for m in results} == {native, a, b}
    assert all(m.result.is_cpu and m.result.gbps is not None for m in results)
    ex = explain("prio", dtype="fp32", device="cpu", numel=1024)
    assert all(v.measured_us is not None for v in ex.rows)
    # ranked by what a caller pays: the larger of device time and host time per call
    cheapest = min(results, key=lambda m: max(m.result.median_us, m.host_us or 0.0))
    assert ex.chosen.name == cheapest.row
    assert all(m.host_us is not None for m in results)  # short calls: bench_op timed the host too
    assert measurements.meta("cpu")["copy_roofline_gbps"] > 0


def test_local_store_ranks_only_when_opted_in_and_committed_figures_rank_by_default(prio_rows, tmp_path,
                                                                                    monkeypatch):
    native, a, b = prio_rows
    measurements.record("prio", a, "cpu", "fp32", 4096, 5.0)  # a figure recorded by an earlier session...
    measurements._session.clear()                              # ...which this session did not measure
    assert resolve("prio", dtype="fp32", device="cpu", numel=4096).name == b  # the local store is not consulted
    measurements.use_local(True)
    try:
        assert resolve("prio", dtype="fp32", device="cpu", numel=4096).name == a
        assert explain("prio", dtype="fp32", device="cpu", numel=4096).verdict(a).source.startswith("local store")
    finally:
        measurements.use_local(None)
    root = tmp_path / "shipped"
    root.mkdir()
    key, entry = measurements.make_entry("prio", native, "fp32", 4096, 1.0)
    _commit(root, {key: entry})
    monkeypatch.setattr(measurements, "COMMITTED_ROOT", root)
    measurements.use_local(None)  # a policy change clears dispatch's cache
    ex = explain("prio", dtype="fp32", device="cpu", numel=4096)
    assert ex.chosen.name == native and ex.chosen.source == "committed g/prio/figures/cpu.json"
    assert "measured figures from: committed g/prio/figures/cpu.json" in str(ex)


def _commit(root, entries):
    """Figures as the package ships them: in the op's folder, ``<group>/<op>/figures/<gpu kind>.json``."""
    folder = root / "g" / "prio" / "figures"
    folder.mkdir(parents=True)
    (folder / "cpu.json").write_text(json.dumps({"device": "cpu", "entries": entries}))


def test_ranked_entries_are_the_figures_lookup_picks(prio_rows, tmp_path, monkeypatch):
    """What plots show: per row and size the first source with a figure within NEAREST_BUCKETS, as dispatch."""
    native, a, b = prio_rows
    root = tmp_path / "shipped"
    root.mkdir()
    committed = dict(measurements.make_entry("prio", a, "fp32", n, us) for n, us in ((1024, 1.0), (1 << 16, 2.0)))
    _commit(root, committed)
    monkeypatch.setattr(measurements, "COMMITTED_ROOT", root)
    measurements.record("prio", a, "cpu", "fp32", 1 << 20, 9.0)  # an earlier run's local store
    measurements._session.clear()
    measurements.record("prio", a, "cpu", "fp32", 2048, 3.0)     # this session, next to the committed 1024
    shown = [(source, e["numel"], e["median_us"]) for source, e in measurements.ranked_entries("cpu", "prio")]
    assert shown == [("this session", 2048, 3.0), ("committed g/prio/figures/cpu.json", 1 << 16, 2.0)]
    measurements.use_local(True)
    try:
        assert [s for s, _ in measurements.ranked_entries("cpu", "prio")][-1].startswith("local store")
    finally:
        measurements.use_local(None)
    for source, e in measurements.ranked_entries("cpu"):
        assert measurements.lookup("prio", e["row"], "cpu", "fp32", e["bucket"]).source == source


def test_bench_op_on_scale_skips_filtered_rows():
    results = bench_op("scale", sizes=[256], dtypes=["fp32"], record=False, warmup=1, repeats=2, device="cpu")
    ran = {m.row for m in results}
    assert "native/scale" in ran and "jit/scale" not in ran  # the JIT row cannot run on CPU
    assert measurements.entries("cpu", "scale") == []


def test_bench_op_bad_requests(prio_rows):
    with pytest.raises(ValueError, match="unknown op 'nope'"):
        bench_op("nope", sizes=[16])
    with pytest.raises(ValueError, match="no row 'x/y'"):
        bench_op("prio", sizes=[16], rows=["x/y"], device="cpu")
    with pytest.raises(ValueError, match="cannot run bf16 on cpu"):
        spec.register(KernelSpec(name="aot/prio_fp32", op="prio", backend="aot", target=_mul, devices=("cpu",),
                                 dtypes=("fp32",), golden=GoldenRecord(verified=True)))
        try:
            bench_op("prio", sizes=[16], dtypes=["bf16"], rows=["aot/prio_fp32"], device="cpu")
        finally:
            spec.unregister("aot/prio_fp32")
    with pytest.raises(ValueError, match="at least one size"):
        bench_op("prio", sizes=[])


def test_where_host_time_dominates_rows_rank_by_what_a_caller_pays(prio_rows):
    native, a, b = prio_rows
    measurements.record("prio", a, "cpu", "fp32", 1024, 2.0, host_us=9.0)  # fast kernel, slow wrapper
    measurements.record("prio", b, "cpu", "fp32", 1024, 3.0, host_us=4.0)
    ex = explain("prio", dtype="fp32", device="cpu", numel=1024)
    assert ex.chosen.name == b and ex.verdict(a).measured_us == 9.0
    assert measurements.lookup("prio", a, "cpu", "fp32", (1024).bit_length()).caller_us == 9.0


def test_where_host_time_is_not_paid_per_call_rows_rank_by_device_time(prio_rows):
    """A capture's replay and a compiled graph's call pay no per-call host cost: explain names that rule."""
    native, a, b = prio_rows
    measurements.record("prio", a, "cpu", "fp32", 1024, 2.0, host_us=9.0)
    measurements.record("prio", b, "cpu", "fp32", 1024, 3.0, host_us=4.0)
    assert resolve("prio", dtype="fp32", device="cpu", numel=1024).name == b
    device = explain("prio", dtype="fp32", device="cpu", numel=1024, rule="device")
    assert device.chosen.name == a and device.verdict(a).measured_us == 2.0 and device.verdict(b).measured_us == 3.0
    assert "measured rows ranked by device time" in str(device) and "measured rows ranked" not in str(explain(
        "prio", dtype="fp32", device="cpu", numel=1024))
    with pytest.raises(spec.RegistryError, match="rule must be one of caller, device"):
        resolve("prio", dtype="fp32", device="cpu", numel=1024, rule="fastest")


def test_a_capture_takes_the_device_time_winner_only_once_it_has_run_outside_one(prio_rows):
    """Its first call may compile or load code, which a capture must not do; the eager call that finds the two
    rules disagree runs it once, on copies of the call's arguments, and the op resolves again."""
    from rapid_llm.kernels.dispatch import dispatcher

    native, a, b = prio_rows
    measurements.record("prio", a, "cpu", "fp32", 1024, 2.0, host_us=9.0)
    measurements.record("prio", b, "cpu", "fp32", 1024, 3.0, host_us=4.0)
    cold = explain("prio", dtype="fp32", device="cpu", numel=1024, capturing=True)
    assert cold.chosen.name == b and "has not run outside a capture" in cold.verdict(a).reason
    x = torch.randn(1024)
    seen = []
    op = dispatcher.get_op("prio")
    op(x, 3.0)
    entries = op.cached_entries()
    first = dispatcher._warming(op, lambda *args: seen.append(args) or "eager result", spec.get_row(a), cold.context)
    assert first(x, 3.0) == "eager result" and seen == [(x, 3.0)]
    assert entries == 1 and op.cached_entries() == 0  # resolves again, now that the row has run
    warm = explain("prio", dtype="fp32", device="cpu", numel=1024, capturing=True)
    assert warm.chosen.name == a and warm.chosen.reason == "fastest measured (2.00 us, device time)"


def test_the_custom_op_that_compiled_graphs_call_ranks_by_device_time(prio_rows):
    native, a, b = prio_rows
    ran = []
    for name in (a, b):
        tagged = (lambda tag: lambda x, f, out=None: ran.append(tag) or _mul(x, f, out))(name)
        spec.register(dataclasses.replace(spec.get_row(name), target=tagged), replace=True)
    measurements.record("prio", a, "cpu", "fp32", 1024, 2.0, host_us=9.0)
    measurements.record("prio", b, "cpu", "fp32", 1024, 3.0, host_us=4.0)
    x = torch.randn(1024)
    import rapid_llm.kernels as K

    torch.testing.assert_close(K.prio(x, 3.0), x * 3.0)
    torch.testing.assert_close(torch.ops.rapid_llm.prio.default(x, 3.0), x * 3.0)
    assert ran == [b, a]


def test_the_eager_call_that_finds_the_rules_disagree_readies_the_capture_s_row(prio_rows, monkeypatch):
    """The whole path a capture relies on, with CPU tensors standing in for CUDA ones (no capture runs here)."""
    from rapid_llm.kernels.dispatch import dispatcher
    import rapid_llm.kernels as K

    native, a, b = prio_rows
    ran = []
    for name in (a, b):
        tagged = (lambda tag: lambda x, f, out=None: ran.append((tag, x.data_ptr())) or _mul(x, f, out))(name)
        spec.register(dataclasses.replace(spec.get_row(name), target=tagged), replace=True)
    measurements.record("prio", a, "cpu", "fp32", 1024, 2.0, host_us=9.0)
    measurements.record("prio", b, "cpu", "fp32", 1024, 3.0, host_us=4.0)
    monkeypatch.setattr(dispatcher, "_capturable", lambda x: True)
    x = torch.randn(1024)
    torch.testing.assert_close(K.prio(x, 3.0), x * 3.0)
    assert [tag for tag, _ in ran] == [b, a] and ran[0][1] == x.data_ptr() != ran[1][1]  # a ran on a copy
    assert explain("prio", x, capturing=True).chosen.name == a
    ran.clear()
    K.prio(x, 3.0)
    assert ran == [(b, x.data_ptr())]  # eager calls keep the caller's rule, and run once


def test_captures_rank_by_the_graph_replay_figure_where_one_was_measured(prio_rows):
    """The events around one call include a wait for a slow launch; a graph's replay is the device alone."""
    native, a, b = prio_rows
    measurements.record("prio", a, "cpu", "fp32", 1024, 20.0, host_us=30.0, graph_us=2.0)  # launch-bound events
    measurements.record("prio", b, "cpu", "fp32", 1024, 3.0, host_us=4.0, graph_us=2.9)
    figure = measurements.lookup("prio", a, "cpu", "fp32", (1024).bit_length())
    assert (figure.caller_us, figure.device_us) == (30.0, 2.0)
    assert resolve("prio", dtype="fp32", device="cpu", numel=1024).name == b
    device = explain("prio", dtype="fp32", device="cpu", numel=1024, rule="device")
    assert device.chosen.name == a and device.chosen.measured_us == 2.0


def test_the_device_rule_keeps_the_eager_row_unless_another_is_clearly_faster(prio_rows):
    """Within the figures' spread (dispatcher.DEVICE_MARGIN) a capture runs what eager calls run."""
    native, a, b = prio_rows
    measurements.record("prio", a, "cpu", "fp32", 1024, 2.95, host_us=9.0)
    measurements.record("prio", b, "cpu", "fp32", 1024, 3.0, host_us=4.0)
    ex = explain("prio", dtype="fp32", device="cpu", numel=1024, rule="device")
    assert ex.chosen.name == b and "no row beats by 3%" in ex.chosen.reason
    assert "by less than the 3% it takes to leave the row an eager call runs" in ex.verdict(a).reason


def test_a_row_that_fails_ahead_of_a_capture_warns_and_captures_keep_the_eager_row(prio_rows, monkeypatch):
    from rapid_llm.kernels.dispatch import dispatcher
    import rapid_llm.kernels as K

    native, a, b = prio_rows

    def broken(x, f, out=None):
        raise RuntimeError("prio: launch failed\nsecond line")

    spec.register(dataclasses.replace(spec.get_row(a), target=broken), replace=True)
    measurements.record("prio", a, "cpu", "fp32", 1024, 2.0, host_us=9.0)
    measurements.record("prio", b, "cpu", "fp32", 1024, 3.0, host_us=4.0)
    monkeypatch.setattr(dispatcher, "_capturable", lambda x: True)
    x = torch.randn(1024)
    with pytest.warns(RuntimeWarning, match="triton/prio_a failed when run once ahead of a capture.*launch failed"):
        torch.testing.assert_close(K.prio(x, 3.0), x * 3.0)  # the caller's own call still answers
    captured = explain("prio", x, capturing=True)
    assert captured.chosen.name == b
    assert "failed when run once ahead of a capture: RuntimeError: prio: launch failed" in captured.verdict(a).reason
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(K.prio(x, 3.0), x * 3.0)
    assert caught == []  # no second attempt


def _scaled(x, factor, mode="plain", out=None):
    return _mul(x, factor, out)


@pytest.fixture
def form_rows():
    """A private op with two forms (by its third argument), two verified CPU rows and the floor."""
    rows = _three_rows("formed", _scaled, _scaled, _scaled)

    def bench(numel, dtype, device):
        x = torch.randn(numel, device=device).to(dtype)
        return CaseArgs((x, 3.0), {}, bytes_moved=2 * x.nbytes)

    def bench_wide(numel, dtype, device):
        x = torch.randn(numel, device=device).to(dtype)
        return CaseArgs((x, 3.0, "wide"), {}, bytes_moved=2 * x.nbytes)

    with spec.isolated():
        declare_op("formed", rows=rows, reference=_REFERENCE, bench=bench, forms={"wide": bench_wide},
                   form_of=lambda x=None, f=None, mode="plain", out=None: "wide" if mode == "wide" else None)
        yield [r.name for r in rows]


def test_each_form_ranks_by_its_own_figures_and_explain_names_the_crossover(form_rows):
    import rapid_llm.kernels as K

    native, a, b = form_rows
    for bucket_numel, (fa, fb) in {1024: (2.0, 3.0), 1 << 20: (9.0, 5.0)}.items():
        measurements.record("formed", a, "cpu", "fp32", bucket_numel, 4.0)
        measurements.record("formed", b, "cpu", "fp32", bucket_numel, 6.0)
        measurements.record(measurements.form_key("formed", "wide"), a, "cpu", "fp32", bucket_numel, fa)
        measurements.record(measurements.form_key("formed", "wide"), b, "cpu", "fp32", bucket_numel, fb)
    small, large = torch.randn(1024), torch.randn(1 << 20)
    assert resolve("formed", small, 3.0).name == a and resolve("formed", large, 3.0).name == a
    assert resolve("formed", small, 3.0, "wide").name == a
    crossed = explain("formed", large, 3.0, "wide")
    assert crossed.chosen.name == b and "form 'wide'" in str(crossed) and crossed.verdict(a).measured_us == 9.0
    assert explain("formed", dtype="fp32", numel=1 << 20, form="wide").chosen.name == b
    torch.testing.assert_close(K.formed(large, 3.0, "wide"), large * 3.0)
    torch.testing.assert_close(K.formed(large, 3.0), large * 3.0)
    assert K.formed.cached_entries() == 2  # one resolution per form
    with pytest.raises(spec.RegistryError, match="no form 'narrow'; its other forms are 'wide'"):
        explain("formed", large, 3.0, form="narrow")


def test_explain_in_capture_tables_each_form_s_pick_per_rule_and_marks_the_crossover(form_rows, capsys):
    """benchmarks/kernels/explain_in_capture.py's form table, from recorded figures (the H200's, on a GPU)."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "kernels" / "explain_in_capture.py"
    loader = importlib.util.spec_from_file_location("explain_in_capture", path)
    script = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(script)
    native, a, b = form_rows
    for t in script.FORM_TOKENS:  # a leads up to T=16, b from T=64 on
        fa, fb = (2.0, 3.0) if t <= 16 else (9.0, 5.0)
        measurements.record(measurements.form_key("formed", "wide"), a, "cpu", "fp32", t, fa, host_us=1.0)
        measurements.record(measurements.form_key("formed", "wide"), b, "cpu", "fp32", t, fb, host_us=1.0)
    script.form_table("formed", "fp32", torch.device("cpu"))
    table = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.split()[:1] != ["T"]
             and line[:6].strip().isdigit()}
    assert f"{a} 2.00 us" in table["16"] and "crossover" not in table["16"]
    assert f"{b} 5.00 us" in table["64"] and f"<- crossover from {a}" in table["64"]
    assert "crossover" not in table["16384"]


def test_a_form_without_figures_ranks_as_the_declared_one(form_rows):
    native, a, b = form_rows
    measurements.record("formed", b, "cpu", "fp32", 1024, 3.0)
    measurements.record("formed", a, "cpu", "fp32", 1024, 5.0)
    assert explain("formed", torch.randn(1024), 3.0, "wide").chosen.name == b


def test_bench_op_times_a_form_and_records_it_apart(form_rows):
    native, a, b = form_rows
    measured = bench_op("formed", [1024], dtypes=["fp32"], rows=[a], device="cpu", repeats=3, form="wide")
    assert [m.form for m in measured] == ["wide"]
    assert measurements.lookup("formed[wide]", a, "cpu", "fp32", (1024).bit_length()) is not None
    assert measurements.lookup("formed", a, "cpu", "fp32", (1024).bit_length()) is None
    with pytest.raises(ValueError, match="no form 'narrow'"):
        bench_op("formed", [1024], dtypes=["fp32"], device="cpu", form="narrow")


def test_forms_and_form_of_come_together():
    reference = Reference(make_inputs=lambda shape, dtype, device, gen: (torch.randn(shape),), oracle=lambda x: x)
    with pytest.raises(spec.RegistryError, match="give forms and form_of together"):
        define_op("lonely", reference=reference, bench=_case, native=lambda x: x, forms={"f": _case})


def test_a_written_declaration_keeps_the_op_s_forms():
    """What a verify child and promote write (rapid_llm.kernels.registry.opsource) declares the same forms."""
    from rapid_llm.kernels.registry import opsource

    namespace: dict = {}
    exec(compile(opsource.module_source("scaled_fp8_quant", ship=True), "<declaration>", "exec"), namespace)
    written, shipped = namespace["DECLARATION"], spec.get_decl("scaled_fp8_quant")
    assert dict(written.forms) == dict(shipped.forms) and written.form_of is shipped.form_of


def test_forms_must_be_labelled_bench_cases():
    reference = Reference(make_inputs=lambda shape, dtype, device, gen: (torch.randn(shape),), oracle=lambda x: x)
    with pytest.raises(spec.RegistryError, match="forms must map at most 63 labels to bench cases"):
        define_op("badforms", reference=reference, bench=_case, native=lambda x: x, forms={"": _case},
                  form_of=lambda x: None)


def test_an_edited_row_is_not_ranked_by_figures_of_its_old_code(tmp_path, monkeypatch):
    """Each figure names the digest of the code it measured; after an edit (the row's module, or a header a .cu
    row includes) dispatch ranks the row as unmeasured, and explain names the figure it passed over."""
    from rapid_llm.kernels.toolchain.digests import code_digest
    from rapid_llm.kernels.toolchain.jit_row import JitRow

    module = tmp_path / "edited_row_module.py"
    module.write_text("import torch\n\ndef fast(x, factor, out=None):\n    return torch.mul(x, factor, out=out)\n")
    header = tmp_path / "shared.cuh"
    header.write_text("// kernels v1\n")
    cu = tmp_path / "edited.cu"
    cu.write_text('#include "shared.cuh"\n// the launcher\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    verified = GoldenRecord(verified=True)
    rows = [KernelSpec(name="native/edited", op="edited", backend="native", target=_mul, devices=("cpu",)),
            KernelSpec(name="triton/edited_py", op="edited", backend="triton", target="edited_row_module:fast",
                       devices=("cpu",), golden=verified, priority=1),
            KernelSpec(name="jit/edited_cu", op="edited", backend="jit", target=JitRow(cu, "launcher"),
                       devices=("cpu",), golden=verified, priority=2)]
    with spec.isolated():
        declare_op("edited", rows=rows, reference=_REFERENCE, bench=_case)
        bench_op("edited", sizes=[4096], dtypes=["fp32"], rows=["triton/edited_py"], warmup=1, repeats=3,
                 device="cpu")  # a real measurement: recorded with the digest of the module it timed
        row_cu = spec.get_row("jit/edited_cu")
        measurements.record("edited", "jit/edited_cu", "cpu", "fp32", 4096, 1e6, source_digest=code_digest(row_cu))
        ex = explain("edited", dtype="fp32", device="cpu", numel=4096)
        assert ex.chosen.name == "triton/edited_py" and ex.verdict("jit/edited_cu").measured_us == 1e6
        assert not any(r.ignored for r in ex.rows)

        module.write_text(module.read_text() + "# edited: other code now\n")
        ex = explain("edited", dtype="fp32", device="cpu", numel=4096)
        assert ex.verdict("triton/edited_py").measured_us is None
        assert ex.verdict("triton/edited_py").ignored.startswith("figures of other code ignored (this session:")
        assert ex.chosen.name == "jit/edited_cu"  # measured, so ranked ahead of the now unmeasured row
        assert "triton/edited_py: figures of other code ignored" in str(ex)

        before = code_digest(row_cu)
        header.write_text("// kernels v2\n")  # the .cu file is unchanged; a header it includes is not
        assert code_digest(row_cu) != before
        ex = explain("edited", dtype="fp32", device="cpu", numel=4096)
        assert ex.verdict("jit/edited_cu").measured_us is None and "jit/edited_cu" in str(ex)
        assert ex.chosen.name == "jit/edited_cu"  # both unmeasured now: static priority decides again
        assert resolve("edited", dtype="fp32", device="cpu", numel=4096).name == "jit/edited_cu"


def test_committed_figures_name_the_code_they_measured():
    """Every shipped figure names a digest; explain on the shipped ops reads them against the rows' code."""
    from rapid_llm.kernels.toolchain.digests import code_digest

    for path in measurements.committed_results():
        for key, entry in measurements.load_file(path)["entries"].items():
            assert len(entry.get(measurements.DIGEST_FIELD, "")) == 64, f"{path}: {key} names no source digest"
            assert code_digest(spec.get_row(entry["row"])) is not None, key


def test_a_python_row_s_digest_covers_the_files_its_module_names(tmp_path, monkeypatch):
    """A CuTe row's kernel and launcher are files of their own, named in the module's CODE_FILES: an edit to
    either is an edit of the row (its old figures stop ranking it); a module naming none keeps its one-file digest."""
    from rapid_llm.kernels.toolchain.digests import code_digest, code_files

    (tmp_path / "kernel_part.py").write_text("# kernel v1\n")
    (tmp_path / "launcher_part.cpp").write_text("// launcher v1\n")
    (tmp_path / "named_row_module.py").write_text('CODE_FILES = ("kernel_part.py", "launcher_part.cpp")\n'
                                                  "def fast(x, factor, out=None):\n    return x * factor\n")
    (tmp_path / "plain_row_module.py").write_text("def fast(x, factor, out=None):\n    return x * factor\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    named = KernelSpec(name="cute/named", op="named", backend="cute", target="named_row_module:fast", devices=("cpu",))
    plain = KernelSpec(name="triton/plain", op="plain", backend="triton", target="plain_row_module:fast",
                       devices=("cpu",))
    assert [p.name for p in code_files(named)] == ["named_row_module.py", "kernel_part.py", "launcher_part.cpp"]
    assert [p.name for p in code_files(plain)] == ["plain_row_module.py"]
    before = code_digest(named)
    for part in ("kernel_part.py", "launcher_part.cpp"):
        (tmp_path / part).write_text((tmp_path / part).read_text() + "// edited\n")
        assert code_digest(named) != before, part
        before = code_digest(named)
