"""The compare widget builds without a frontend; its static forms carry the figures, the verdicts and the diff."""
from __future__ import annotations

import base64

import ipywidgets
import matplotlib
import pytest

matplotlib.use("Agg")

from rapid_llm.bench.compare import Comparison, Side  # noqa: E402
from rapid_llm.notebook.compare_view import CompareView, compare_widget  # noqa: E402
from tests.unit.bench.test_compare import _synthetic  # noqa: E402

PNG_MAGIC = b"\x89PNG"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def test_the_view_shows_ratio_interval_verdicts_and_the_sass_diff():
    view = CompareView(_synthetic())
    page = view.to_html()
    assert "B faster (1.50x)" in page and "no difference detectable" in page and "B slower (1.10x)" in page
    assert "verify <b>pass</b>" in page and "source bbbbbbbbbb" in page
    assert "<details><summary>void scale_vec_kernel&lt;float&gt;" in page and "+ FFMA" in page
    png = base64.b64decode(page.split("base64,")[1].split("'")[0])
    assert png.startswith(PNG_MAGIC)
    fig = view.figure()
    ax = fig.axes[0]
    assert ax.get_ylabel() == "B time / A time (95% CI)"
    assert [t.get_text() for t in ax.get_xticklabels()][:2] == ["64K", "1M"]
    box = view.widget()
    assert isinstance(box, ipywidgets.VBox)
    assert any(isinstance(c, ipywidgets.Accordion) for c in box.children)  # the SASS diff, folded
    bundle = view._repr_mimebundle_()
    assert bundle["text/plain"] == str(view.comparison) and WIDGET_MIME in bundle


def test_a_refused_comparison_says_why_in_the_view():
    c = Comparison("scale", Side("A", "native/scale", "working tree", None, "pass"),
                   Side("B", "external/scale_wrong", "working tree", None, "FAIL: fp32 FAIL: 3 bad elements"), "cpu",
                   refused="B (external/scale_wrong) failed verify: FAIL: 3 bad elements")
    page = CompareView(c).to_html()
    assert "not timed:" in page and "3 bad elements" in page
    assert len(CompareView(c).widget().children) == 1


def test_compare_widget_takes_a_comparison_and_refuses_anything_else():
    c = _synthetic()
    assert compare_widget(c).comparison is c
    with pytest.raises(TypeError, match="compare_widget takes the result of compare"):
        CompareView("jit/scale")  # type: ignore[arg-type]


def test_load_ext_renders_a_comparison_as_the_widget():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("rapid_llm")
    try:
        assert callable(shell.user_ns["compare"])
        shown = []
        fmt = shell.display_formatter.ipython_display_formatter
        fmt.for_type(CompareView, lambda v: shown.append(v) or True)
        fmt(_synthetic())
        assert shown and isinstance(shown[0], CompareView)
    finally:
        shell.extension_manager.unload_extension("rapid_llm")
