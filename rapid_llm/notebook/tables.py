"""HTML tables for the core's plain objects: an Explanation, a GoldenReport.

Used by the renderers the extension attaches (render) and by the widgets.
"""
from __future__ import annotations

import html
from typing import Any

__all__ = ["explanation_html", "golden_html", "VERDICT_COLOURS"]

VERDICT_COLOURS = {"chosen": "#d4f4dd", "outranked": "#fff3c4", "filtered": "#f6d5d5"}


def _table(header: str, head: tuple[str, ...], rows: list[tuple[tuple[str, ...], str]],
           footer: str | list[str] = "") -> str:
    ths = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in head)
    body = "".join(
        f"<tr style='background:{colour}'>"
        + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in cells) + "</tr>"
        for cells, colour in rows
    )
    lines = [footer] if isinstance(footer, str) else footer
    foot = "".join(f"<div style='font-size:90%'>{html.escape(line)}</div>" for line in lines if line)
    return (f"<div><b>{html.escape(header)}</b><table><thead><tr>{ths}</tr></thead>"
            f"<tbody>{body}</tbody></table>{foot}</div>")


def explanation_html(ex: Any) -> str:
    """An Explanation as a coloured table: every row, its verdict, why, and where its figure came from."""
    rows = [((r.name, r.backend, r.verdict, r.priority, r.measured_text, r.reason), VERDICT_COLOURS[r.verdict])
            for r in ex.rows]
    sources = sorted({r.source for r in ex.rows if r.source})
    footer = ("measured figures from: " + "; ".join(sources)) if sources else ""
    return _table(ex._header(), ("row", "backend", "verdict", "priority", "measured", "why"), rows, footer)


def golden_html(report: Any) -> str:
    """A GoldenReport's per-dtype table, with the rule its "of allowed" column is measured against."""
    from rapid_llm.kernels.verification.report import COLUMNS

    rows = [(r.cells(), "#d4f4dd" if r.passed else "#f6d5d5") for r in report.results]
    return _table(report._header(), COLUMNS, rows, [report.rule_text(), *report.defect_lines()])
