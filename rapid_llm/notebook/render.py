"""HTML for the core's plain objects, attached to IPython by ``%load_ext rapid_llm``.

The core (rapid_llm.kernels) prints tables as text and knows nothing of
notebooks; this module gives an Explanation and a GoldenReport their HTML and
their widgets. The formatters are registered by name, so loading the
extension imports neither torch nor the core.
"""
from __future__ import annotations

from typing import Any

from rapid_llm.notebook.tables import explanation_html, golden_html

__all__ = ["attach", "detach"]

def _show_golden(report: Any) -> bool:
    from IPython.display import display

    from rapid_llm.notebook.widgets import golden_widget

    display(golden_widget(report))
    return True


def _show_comparison(comparison: Any) -> bool:
    from IPython.display import display

    from rapid_llm.notebook.compare_view import CompareView

    display(CompareView(comparison))
    return True


def attach(ipython: Any) -> None:
    """Register the HTML and widget formatters (by type name: nothing is imported here)."""
    formatters = ipython.display_formatter.formatters
    formatters["text/html"].for_type_by_name("rapid_llm.kernels.dispatch.dispatcher", "Explanation", explanation_html)
    formatters["text/html"].for_type_by_name("rapid_llm.kernels.verification.report", "GoldenReport", golden_html)
    ipython.display_formatter.ipython_display_formatter.for_type_by_name(
        "rapid_llm.kernels.verification.report", "GoldenReport", _show_golden)
    ipython.display_formatter.ipython_display_formatter.for_type_by_name(
        "rapid_llm.bench.compare", "Comparison", _show_comparison)


_REGISTERED = (("text/html", "rapid_llm.kernels.dispatch.dispatcher", "Explanation"),
               ("text/html", "rapid_llm.kernels.verification.report", "GoldenReport"),
               (None, "rapid_llm.kernels.verification.report", "GoldenReport"),
               (None, "rapid_llm.bench.compare", "Comparison"))


def detach(ipython: Any) -> None:
    """Remove what :func:`attach` registered (whether or not the types were imported since)."""
    for mime, module, name in _REGISTERED:
        fmt = (ipython.display_formatter.formatters[mime] if mime else
               ipython.display_formatter.ipython_display_formatter)
        fmt.deferred_printers.pop((module, name), None)
        for typ in [t for t in fmt.type_printers if getattr(t, "__module__", None) == module
                    and getattr(t, "__name__", None) == name]:
            fmt.type_printers.pop(typ)
