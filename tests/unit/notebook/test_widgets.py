"""The widgets build without a frontend and their static forms carry the content."""
from __future__ import annotations

import json

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from rapid_llm.kernels.dispatch import measurements  # noqa: E402
from rapid_llm.kernels.registry import spec  # noqa: E402
from rapid_llm.kernels.verification.golden import verify  # noqa: E402
from rapid_llm.notebook import widgets  # noqa: E402

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PNG_MAGIC = b"\x89PNG"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # no project root above: no committed results unless a test makes some
    monkeypatch.setattr(measurements.platform, "PACKAGE_DIR", tmp_path / "pkg")
    monkeypatch.setattr(measurements, "COMMITTED_ROOT", tmp_path / "results")  # the shipped figures: none
    before = {r.name: r for r in spec.rows_for("scale")}
    yield tmp_path
    for row in before.values():
        spec.register(row, replace=True)


def test_explain_widget_static_forms_and_live_selectors(tmp_path):
    view = widgets.explain_widget("scale", torch.randn(4097))
    assert "native/scale" in str(view) and "chosen" in str(view)
    page = view._repr_html_()
    assert widgets.VERDICT_COLOURS["chosen"] in page and widgets.VERDICT_COLOURS["filtered"] in page
    bundle = view._repr_mimebundle_()
    assert {"text/plain", "text/html", WIDGET_MIME} <= bundle.keys()
    box = view.widget()
    dtype_control = box.children[0].children[0]
    dtype_control.value = "bf16"
    assert view.explanation.context.dtype == "bf16" and "bf16" in box.children[1].value
    assert view.save_png(tmp_path / "explain.png").read_bytes().startswith(PNG_MAGIC)


def test_golden_widget_shows_table_histogram_and_worst_elements(tmp_path):
    report = verify("native/scale", sizes=(1, 4097), dtypes=("fp32", "bf16"), record=False)
    view = widgets.golden_widget(report)
    text, page = str(view), view.to_html()
    assert "worst elements" in text and "fp32" in text
    assert "data:image/png;base64," in page and "x allowed" in page
    assert len(view.widget().children) == 3
    assert view.save_png(tmp_path / "golden.png").read_bytes().startswith(PNG_MAGIC)
    assert WIDGET_MIME in widgets.golden_widget(report)._repr_mimebundle_()


def test_golden_widget_of_a_failing_row_marks_it():
    def zeros(x, factor, out=None):
        return out.zero_()

    spec.register(spec.KernelSpec(name="external/zeros_w", op="scale", backend="external", target=zeros,
                                  devices=("cpu",), golden=spec.GoldenRecord(baseline="native/scale")))
    try:
        view = widgets.golden_widget("external/zeros_w", sizes=(4097,), dtypes=("fp16",))
        assert "FAIL" in str(view) and "#f6d5d5" in view.worst_html()
        why = view.report["fp16"].verdict  # the row says why it failed, in every form of the widget
        assert why.startswith("FAIL: ") and "bad elements" in why and "input_independent" in why
        assert why in str(view) and why in view.to_html() and why in view.widget().children[0].value
    finally:
        spec.unregister("external/zeros_w")


def test_bench_plot_from_the_store(tmp_path):
    for n in (1024, 1 << 20):
        measurements.record("scale", "native/scale", "cpu", "fp32", n, n / 1000, gbps=8.0, roofline_fraction=0.4)
        measurements.record("scale", "reference/copy", "cpu", "fp32", n, n / 2000, gbps=16.0)
    measurements.record_meta("cpu", copy_roofline_gbps=20.0)
    plot = widgets.bench_plot("scale", device_name="cpu")
    text = str(plot)
    assert "CPU numbers" in text and "1M" in text and "native/scale" in text and "40%" in text
    assert "copy roofline: 20 GB/s" in text
    assert plot._repr_mimebundle_().keys() >= {"text/plain", "text/html", WIDGET_MIME}
    box = plot.widget()
    box.children[0].children[1].value = "latency"
    assert plot.metric == "latency"
    assert plot.save_png(tmp_path / "bench.png").read_bytes().startswith(PNG_MAGIC)
    why, reason = box.children[3], box.children[4]
    assert why.options[1:] == (("native/scale", "native/scale"), ("reference/copy", "reference/copy"))
    why.value = "native/scale"  # a point on the plot, explained by its row's build facts
    assert "inspect(&#x27;native/scale&#x27;)" in reason.value and "native row" in reason.value


def test_bench_plot_explains_a_row_by_its_profile_too(tmp_path):
    from rapid_llm.kernels.inspection.profiling import KernelProfile, Profile

    measurements.record("scale", "native/scale", "cpu", "fp32", 1024, 1.0, gbps=8.0, roofline_fraction=0.4)
    k = KernelProfile("native/scale", "void at::vectorized_elementwise_kernel<8>(int)", "(128, 1, 1)", "(8, 1, 1)",
                      17344.0, 1.0, 1.0, 2.6e12, 54.6, 20.8, 77.7, 100.0, 49.7, 32.0, (("long_scoreboard", 43.7),))
    plot = widgets.bench_plot("scale", device_name="cpu", profile=Profile("scale", [k]))
    text = plot.why("native/scale")
    assert "Nsight Compute: kernel at::vectorized_elementwise_kernel<8>" in text and "long_scoreboard 43.7" in text
    assert "triton/scale is not in the profile given" in plot.why("triton/scale")


def test_bench_plot_falls_back_to_committed_results_with_gpu_and_date(isolated, monkeypatch):
    root = isolated / "project"
    (isolated / "results" / "elementwise" / "scale" / "figures").mkdir(parents=True)
    entry = {"op": "scale", "row": "jit/scale", "dtype": "bf16", "bucket": 29, "numel": 1 << 28,
             "median_us": 349.0, "gbps": 1538.0, "roofline_fraction": 0.37, "measured_at": "2026-11-30T10:00:00Z"}
    doc = {"device": "NVIDIA H200", "entries": {"scale|jit/scale|bf16|29": entry},
           "meta": {"copy_roofline_gbps": 4184.0, "measured_at": "2026-11-30T10:00:00Z"}}
    (isolated / "results" / "elementwise" / "scale" / "figures" / "nvidia_h200.json").write_text(json.dumps(doc))
    (root / "notebooks").mkdir(parents=True)
    monkeypatch.chdir(root / "notebooks")  # any working directory: the shipped figures are the package's
    monkeypatch.setattr(widgets, "_current_device_name", lambda: "cpu")
    plot = widgets.bench_plot("scale")
    assert plot.title() == ("scale: NVIDIA H200, measured 2026-11-30 (committed elementwise/scale/figures/"
                            "nvidia_h200.json; dispatch on cpu does not rank by them)")
    assert "37%" in str(plot)


CPU_FIGURES = "committed elementwise/scale/figures/cpu.json"


def _committed(root, device, *entries):
    """Figures the package ships (the isolated fixture points the committed root at root/results)."""
    (root / "results" / "elementwise" / "scale" / "figures").mkdir(parents=True, exist_ok=True)
    doc = {"device": device, "entries": dict(measurements.make_entry("scale", *e) for e in entries),
           "meta": {"copy_roofline_gbps": 30.0, "measured_at": "2026-11-30T10:00:00Z"}}
    (root / "results" / "elementwise" / "scale" / "figures" / f"{device}.json").write_text(json.dumps(doc))


def test_bench_plot_shows_what_dispatch_ranks_by_and_where_each_figure_came_from(isolated, monkeypatch):
    """An earlier run's local store does not replace the committed figures (dispatch does not rank by it)."""
    _committed(isolated, "cpu", ("native/scale", "fp32", 1024, 10.0), ("native/scale", "fp32", 1 << 20, 100.0))
    measurements.record("scale", "native/scale", "cpu", "fp32", 1 << 20, 999.0)  # e.g. benchmarks/bench_op.py
    measurements._session.clear()                                                   # ...in another process
    plot = widgets.bench_plot("scale", device_name="cpu")
    assert [(e["numel"], e["median_us"], e["source"]) for e in plot.entries] == [
        (1024, 10.0, CPU_FIGURES), (1 << 20, 100.0, CPU_FIGURES)]
    text = str(plot)
    assert f"({CPU_FIGURES})" in plot.title() and "999" not in text
    assert "not shown: 1 figures of an earlier run in the local store" in text
    assert "RAPID_LLM_LOCAL_MEASUREMENTS=1" in plot.to_html()
    measurements.use_local(True)  # opted in: the local figure ranks, and the plot says so
    try:
        local = widgets.bench_plot("scale", device_name="cpu")
        assert [(e["median_us"], e["source"]) for e in local.entries] == [(10.0, CPU_FIGURES),
                                                                          (999.0, "local store")]
        assert "999.00 us [local]" in str(local) and "figures from: local store (1), committed" in str(local)
    finally:
        measurements.use_local(None)
    # Measured in this session: it ranks, and shadows the committed figure one size class away.
    measurements.record("scale", "native/scale", "cpu", "fp32", 2048, 7.0)
    now = widgets.bench_plot("scale", device_name="cpu")
    assert [(e["numel"], e["source"]) for e in now.entries] == [(2048, "this session"),
                                                                (1 << 20, CPU_FIGURES)]
    for e in now.entries:  # each figure shown is the one dispatch looks up at its size
        figure = measurements.lookup("scale", e["row"], "cpu", e["dtype"], e["bucket"])
        assert figure.median_us == e["median_us"] and widgets._short(figure.source) == e["source"]
    assert now.save_png(isolated / "no_gbps.png").read_bytes().startswith(PNG_MAGIC)  # no GB/s: said, not drawn
    now.metric = "latency"
    assert now.save_png(isolated / "mixed.png").read_bytes().startswith(PNG_MAGIC)


def test_bench_plot_without_any_figures_says_how_to_get_them(tmp_path):
    plot = widgets.bench_plot("scale")
    assert "no figures yet" in str(plot)
    assert plot.save_png(tmp_path / "empty.png").read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="metric must be"):
        widgets.bench_plot("scale", metric="speed")


def test_render_docs_writes_every_view(tmp_path):
    measurements.record("scale", "native/scale", "cpu", "fp32", 4096, 5.0, gbps=6.5)
    paths = widgets.render_docs(tmp_path / "docs", rows=["native/scale"])
    names = sorted(p.name for p in paths)
    assert names == ["bench_scale_gbps.png", "bench_scale_latency.png", "explain_scale.png",
                     "golden_native_scale.png"]
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in paths)


def test_the_extension_renders_core_objects_and_unloading_removes_it():
    """The core prints text; %load_ext rapid_llm gives Explanation its HTML and GoldenReport its widget."""
    from IPython.core.interactiveshell import InteractiveShell

    from rapid_llm.kernels.dispatch.dispatcher import explain
    from rapid_llm.kernels.verification.golden import verify

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("rapid_llm")
    try:
        ex = explain("scale", torch.randn(8))
        data, _ = shell.display_formatter.format(ex)
        assert "<table>" in data["text/html"] and "native/scale" in data["text/plain"]
        shown = shell.display_formatter.ipython_display_formatter(verify("native/scale", sizes=(1, 4097)))
        assert shown  # the golden widget was displayed instead of the text
    finally:
        shell.extension_manager.unload_extension("rapid_llm")
    data, _ = shell.display_formatter.format(explain("scale", torch.randn(8)))
    assert "text/html" not in data
