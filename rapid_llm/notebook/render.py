"""HTML for the core's plain objects, attached to IPython by ``%load_ext rapid_llm``.

The core (rapid_llm.kernels) prints tables as text and knows nothing of
notebooks; this module gives an Explanation and a GoldenReport their HTML and
their widgets. The formatters are registered by name, so loading the
extension imports neither torch nor the core.
"""
from __future__ import annotations

import html
from typing import Any

__all__ = ["explanation_html", "golden_html", "attach", "detach"]

_VERDICT_COLOURS = {"chosen": "#d4f4dd", "outranked": "#fff3c4", "filtered": "#f6d5d5"}


def _table(header: str, head: tuple[str, ...], rows: list[tuple[tuple[str, ...], str]], footer: str = "") -> str:
    ths = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in head)
    body = "".join(
        f"<tr style='background:{colour}'>"
        + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in cells) + "</tr>"
        for cells, colour in rows
    )
    foot = f"<div style='font-size:90%'>{html.escape(footer)}</div>" if footer else ""
    return (f"<div><b>{html.escape(header)}</b><table><thead><tr>{ths}</tr></thead>"
            f"<tbody>{body}</tbody></table>{foot}</div>")


def explanation_html(ex: Any) -> str:
    """An Explanation as a coloured table: every row, its verdict, why, and where its figure came from."""
    rows = [((r.name, r.backend, r.verdict, r.priority, r.measured_text, r.reason), _VERDICT_COLOURS[r.verdict])
            for r in ex.rows]
    sources = sorted({r.source for r in ex.rows if r.source})
    footer = ("measured figures from: " + "; ".join(sources)) if sources else ""
    return _table(ex._header(), ("row", "backend", "verdict", "priority", "measured", "why"), rows, footer)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def golden_html(report: Any) -> str:
    """A GoldenReport's per-dtype table."""
    rows = []
    for r in report.results:
        w = r.worst_element
        worst = r.error or ("-" if w is None else
                            f"{w.case} {list(w.index)}: row {w.row_value:.6g}, exact {w.exact_value:.6g}")
        cells = (r.dtype, "pass" if r.passed else "FAIL", f"{r.max_abs_diff:.3g}", f"{r.max_rel_diff:.3g}",
                 _fmt(r.max_abs_diff_vs_baseline), _fmt(r.baseline_max_abs_diff), f"{r.n_bad} / {r.n_elements}",
                 worst)
        rows.append((cells, "#d4f4dd" if r.passed else "#f6d5d5"))
    head = ("dtype", "verdict", "max abs", "max rel", "vs baseline", "baseline err", "bad / elements", "worst element")
    return _table(report._header(), head, rows)


def _show_golden(report: Any) -> bool:
    from IPython.display import display

    from rapid_llm.notebook.widgets import golden_widget

    display(golden_widget(report))
    return True


def attach(ipython: Any) -> None:
    """Register the HTML and widget formatters (by type name: nothing is imported here)."""
    formatters = ipython.display_formatter.formatters
    formatters["text/html"].for_type_by_name("rapid_llm.kernels.dispatch", "Explanation", explanation_html)
    formatters["text/html"].for_type_by_name("rapid_llm.kernels.golden", "GoldenReport", golden_html)
    ipython.display_formatter.ipython_display_formatter.for_type_by_name(
        "rapid_llm.kernels.golden", "GoldenReport", _show_golden)


_REGISTERED = (("text/html", "rapid_llm.kernels.dispatch", "Explanation"),
               ("text/html", "rapid_llm.kernels.golden", "GoldenReport"),
               (None, "rapid_llm.kernels.golden", "GoldenReport"))


def detach(ipython: Any) -> None:
    """Remove what :func:`attach` registered (whether or not the types were imported since)."""
    for mime, module, name in _REGISTERED:
        fmt = (ipython.display_formatter.formatters[mime] if mime else
               ipython.display_formatter.ipython_display_formatter)
        fmt.deferred_printers.pop((module, name), None)
        for typ in [t for t in fmt.type_printers if getattr(t, "__module__", None) == module
                    and getattr(t, "__name__", None) == name]:
            fmt.type_printers.pop(typ)
