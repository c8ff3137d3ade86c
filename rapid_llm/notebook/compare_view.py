"""The compare widget: B's time over A's per size with its 95 % interval, the table, and why they differ.

A plot of the ratio against size (log axis), one line per dtype, each point
with its interval, 1 drawn solid and the +-3 % band shaded, so a verdict of
"no difference detectable" is an interval that crosses the line; below it
the figures as a table, both sides' verify verdicts and source digests, and
the build-facts table and SASS diff of each changed kernel, folded.
Displays as an ipywidget and carries static HTML and text, like the other
views (rapid_llm.notebook.widgets).
"""
from __future__ import annotations

import html
import math
from typing import Any

import ipywidgets
from matplotlib.figure import Figure

from rapid_llm.bench.compare import Comparison
from rapid_llm.notebook.widgets import _img_tag, _png, _size_label, _table_html, _View

__all__ = ["CompareView", "compare_widget"]

VERDICT_COLOURS = {"faster": "#d4f4dd", "slower": "#f6d5d5"}


class CompareView(_View):
    """A Comparison as a plot, a table and the build differences."""

    def __init__(self, comparison: Comparison):
        if not isinstance(comparison, Comparison):
            raise TypeError(f"compare_widget takes the result of compare(), got {type(comparison).__name__}")
        self.comparison = comparison

    def __str__(self) -> str:
        return str(self.comparison)

    def figure(self) -> Figure:
        c = self.comparison
        fig = Figure(figsize=(8, 3.6))
        ax = fig.add_subplot()
        ax.axhline(1.0, color="black", linewidth=1)
        ax.axhspan(1 - c.effect, 1 + c.effect, color="#eeeeee", zorder=0, label=f"+-{100 * c.effect:g}%")
        for dtype in dict.fromkeys(s.dtype for s in c.shapes):
            shapes = [s for s in c.shapes if s.dtype == dtype]
            xs = [s.numel for s in shapes]
            ys = [s.estimate.ratio for s in shapes]
            lo = [y - s.estimate.low if math.isfinite(s.estimate.low) else 0 for y, s in zip(ys, shapes)]
            hi = [s.estimate.high - y if math.isfinite(s.estimate.high) else 0 for y, s in zip(ys, shapes)]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label=dtype)
        if c.shapes:
            ax.set_xscale("log", base=2)
            ax.set_xticks([s.numel for s in c.shapes], [_size_label(s.numel) for s in c.shapes])
        else:
            ax.text(0.5, 0.5, f"not timed: {c.refused or 'no shapes'}", ha="center", va="center",
                    transform=ax.transAxes, wrap=True, fontsize=8)
        ax.set_xlabel("elements")
        ax.set_ylabel("B time / A time (95% CI)")
        ax.set_title(f"{c.op}: B = {c.b.row} vs A = {c.a.row} on {c.device}", fontsize=9, loc="left")
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    def summary_html(self) -> str:
        c = self.comparison
        sides = "".join(f"<div>{html.escape(s.describe())}: verify <b>{html.escape(s.verdict)}</b></div>"
                        for s in (c.a, c.b))
        refused = f"<div style='color:#a00'><b>not timed:</b> {html.escape(c.refused)}</div>" if c.refused else ""
        rows = c.table()
        colours = [VERDICT_COLOURS.get(s.verdict, "#ffffff") for s in c.shapes]
        table = _table_html(rows[0], rows[1:], colours) if c.shapes else ""
        rule = f"<div style='font-size:90%'>{html.escape(c.rule())}</div>" if c.shapes else ""
        return f"<div><b>{html.escape(c.header())}</b>{sides}{refused}{table}{rule}</div>"

    def why_html(self, sass: bool = True) -> str:
        """The build differences; ``sass=False`` leaves the SASS diffs out (the widget folds them itself)."""
        why = self.comparison.why
        if why is None:
            return ""
        parts = ["<b>why (A -> B)</b>"]
        if why.kernels:
            rows = why.table()
            parts.append(_table_html(rows[0], rows[1:], ["#fff3c4" if k.changed else "#ffffff" for k in why.kernels]))
        parts += [f"<div>{html.escape(line)}</div>" for line in why.launch_lines()]
        for k in why.kernels if sass else ():
            if k.sass is not None and not k.sass.empty:
                parts.append(f"<details><summary>{html.escape(k.sass.summary())}</summary>"
                             f"<pre>{html.escape(k.sass.text())}</pre></details>")
        parts += [f"<div style='font-size:90%'>{html.escape(n)}</div>" for n in why.notes]
        return "".join(parts)

    def to_html(self) -> str:
        return (f"<div>{self.summary_html()}{_img_tag(_png(self.figure()), 'B/A with its interval per size')}"
                f"{self.why_html()}</div>")

    def widget(self) -> ipywidgets.Widget:
        children: list[Any] = [ipywidgets.HTML(self.summary_html())]
        if self.comparison.shapes:
            children.append(ipywidgets.Image(value=_png(self.figure()), format="png"))
        why = self.comparison.why
        if why is not None:
            children.append(ipywidgets.HTML(self.why_html(sass=False)))
            changed = [k for k in why.kernels if k.sass is not None and not k.sass.empty]
            if changed:
                fold = ipywidgets.Accordion(children=[ipywidgets.HTML(f"<pre>{html.escape(k.sass.text())}</pre>")
                                                      for k in changed])
                for i, k in enumerate(changed):
                    fold.set_title(i, k.sass.summary())
                children.append(fold)
        return ipywidgets.VBox(children)


def compare_widget(comparison: Comparison | Any, *args: Any, **kwargs: Any) -> CompareView:
    """The compare widget for a Comparison, or for ``compare(a, b, ...)`` run now (given its arguments)."""
    if not isinstance(comparison, Comparison):
        from rapid_llm.bench.compare import compare

        comparison = compare(comparison, *args, **kwargs)
    return CompareView(comparison)
