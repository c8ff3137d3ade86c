"""Widgets for the three questions a kernel author asks: which row runs, is it right, is it fast.

* :func:`explain_widget`: every row of an op and its verdict, coloured, with
  dtype / device / size selectors that re-resolve live;
* :func:`golden_widget`: the per-dtype golden table, a histogram of |diff|
  and the worst elements, so a numeric divergence is found at one look;
* :func:`bench_plot`: latency or GB/s against size on log axes, one line per
  row, the measured copy roofline dashed, and the figures as a table.

Each view displays as an ipywidget in JupyterLab and carries static HTML and
text forms too, so nbval, plain IPython and frontends without a widget
manager still show the content. Figures are drawn on matplotlib's Agg canvas
directly, never through pyplot, so a notebook's backend is left alone;
``save_png`` writes the same figure to a file.

``python -m rapid_llm.notebook.widgets OUT_DIR`` renders every view of an op
to PNGs (how the pictures under docs/ are made).
"""
from __future__ import annotations

import argparse
import base64
import html
import io
import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence

import ipywidgets
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rapid_llm.kernels.dispatch import measurements
from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch.dispatcher import Explanation, dtype_name, explain
from rapid_llm.notebook.tables import explanation_html, golden_html
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.verification.report import GoldenReport
from rapid_llm.kernels.registry.spec import rows_for

__all__ = ["ExplainView", "GoldenView", "BenchPlot", "explain_widget", "golden_widget", "bench_plot", "render_docs"]

VERDICT_COLOURS = {"chosen": "#d4f4dd", "outranked": "#fff3c4", "filtered": "#f6d5d5"}
#: Sizes offered by the explain widget's size selector (elements).
SIZE_CHOICES = tuple(1 << p for p in range(10, 29, 2))
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: Rows recorded by benchmarks as references rather than dispatchable rows.
COPY_ROW = "reference/copy"


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return buf.getvalue()


def _img_tag(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'/>"


def _size_label(n: int) -> str:
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _table_html(head: Sequence[str], rows: Sequence[Sequence[str]], colours: Sequence[str] | None = None) -> str:
    th = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in head)
    body = []
    for i, row in enumerate(rows):
        style = f" style='background:{colours[i]}'" if colours else ""
        tds = "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row)
        body.append(f"<tr{style}>{tds}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _View:
    """Common display plumbing: widget view when a frontend can show it, static HTML and text always."""

    def figure(self) -> Figure:
        raise NotImplementedError

    def to_html(self) -> str:
        raise NotImplementedError

    def widget(self) -> ipywidgets.Widget:
        raise NotImplementedError

    def save_png(self, path: str | Path, dpi: int = 120) -> Path:
        """Write the view's figure to ``path`` (parent folders are created)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig = self.figure()
        fig.set_dpi(dpi)
        path.write_bytes(_png(fig))
        return path

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": str(self), "text/html": self.to_html()}
        view = self.widget()._repr_mimebundle_()
        if view and _WIDGET_MIME in view:
            bundle[_WIDGET_MIME] = view[_WIDGET_MIME]
        return bundle


# ------------------------------------------------------------------ explain


class ExplainView(_View):
    """Rows x verdicts for one op in one context; the selectors re-run dispatch's explain."""

    def __init__(self, op: str, *tensors: Any, dtype: Any = None, device: Any = None, numel: int | None = None):
        first = next((t for t in tensors if isinstance(t, torch.Tensor)), None)
        if first is not None:
            dtype = first.dtype if dtype is None else dtype
            device = first.device if device is None else device
            numel = first.numel() if numel is None else numel
        rows = rows_for(op)
        self.op = op
        self.dtypes = tuple(dict.fromkeys(d for r in rows for d in r.dtypes))
        self.dtype = dtype if isinstance(dtype, str) else (dtype_name(dtype) if dtype is not None else
                                                           (self.dtypes[0] if self.dtypes else "fp32"))
        self.device = str(torch.device(device)) if device is not None else (
            "cuda" if torch.cuda.is_available() else "cpu")
        self.numel = int(numel) if numel is not None else 4096
        self.explanation = self.update()

    def update(self, dtype: str | None = None, device: str | None = None, numel: int | None = None) -> Explanation:
        """Re-resolve in a new context (what the selectors call)."""
        self.dtype = dtype or self.dtype
        self.device = device or self.device
        self.numel = numel or self.numel
        self.explanation = explain(self.op, dtype=self.dtype, device=self.device, numel=self.numel)
        return self.explanation

    def __str__(self) -> str:
        return str(self.explanation)

    def to_html(self) -> str:
        legend = " ".join(f"<span style='background:{c};padding:0 6px'>{v}</span>" for v, c in VERDICT_COLOURS.items())
        return f"<div>{explanation_html(self.explanation)}<div>{legend}</div></div>"

    def figure(self) -> Figure:
        ex = self.explanation
        cells = [[r.name, r.verdict, r.priority, "-" if r.measured_us is None else f"{r.measured_us:.2f} us",
                  r.reason] for r in ex.rows]
        fig = Figure(figsize=(12, 0.5 + 0.45 * (len(cells) + 1)))
        ax = fig.add_subplot()
        ax.axis("off")
        table = ax.table(cellText=cells, colLabels=["row", "verdict", "priority", "measured", "why"],
                         cellColours=[[VERDICT_COLOURS[r.verdict]] * 5 for r in ex.rows],
                         colWidths=[0.14, 0.09, 0.09, 0.09, 0.59], loc="center", cellLoc="left")
        table.auto_set_font_size(False)
        table.set_fontsize(9)
        table.scale(1, 1.4)
        ax.set_title(ex._header(), fontsize=10, loc="left")
        fig.tight_layout()
        return fig

    def widget(self) -> ipywidgets.Widget:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        if self.device.split(":")[0] not in devices:
            devices.append(self.device)
        sizes = sorted({*SIZE_CHOICES, self.numel})
        dtype = ipywidgets.Dropdown(options=list(self.dtypes), value=self.dtype, description="dtype")
        device = ipywidgets.Dropdown(options=devices, value=self.device if self.device in devices else devices[0],
                                     description="device")
        size = ipywidgets.Dropdown(options=[(_size_label(n), n) for n in sizes], value=self.numel,
                                   description="numel")
        out = ipywidgets.HTML(self.to_html())

        def refresh(_: Any = None) -> None:
            try:
                self.update(dtype.value, device.value, size.value)
                out.value = self.to_html()
            except Exception as exc:  # a selector combination dispatch refuses: say so in place
                out.value = f"<pre>{html.escape(f'{type(exc).__name__}: {exc}')}</pre>"

        for control in (dtype, device, size):
            control.observe(refresh, names="value")
        return ipywidgets.VBox([ipywidgets.HBox([dtype, device, size]), out])


def explain_widget(op: str, *tensors: Any, dtype: Any = None, device: Any = None,
                   numel: int | None = None) -> ExplainView:
    """The explain widget for ``op`` (context from ``tensors`` or dtype=/device=/numel=)."""
    return ExplainView(op, *tensors, dtype=dtype, device=device, numel=numel)


# ------------------------------------------------------------------- golden


class GoldenView(_View):
    """A golden report with its |diff| histogram and worst elements."""

    def __init__(self, report: GoldenReport):
        self.report = report

    def __str__(self) -> str:
        lines = [str(self.report), "worst elements:"]
        for r in self.report.results:
            for e in r.worst[:3]:
                lines.append(f"  {r.dtype} {e.case} {list(e.index)}: row {e.row_value:.6g} exact {e.exact_value:.6g}"
                             f" |diff| {e.abs_diff:.3g} (allowed {e.allowed:.3g})")
        return "\n".join(lines)

    def worst_html(self) -> str:
        head = ("dtype", "case", "index", "row", "exact", "baseline", "|diff|", "allowed", "x allowed")
        rows, colours = [], []
        for r in self.report.results:
            for e in r.worst:
                rows.append((r.dtype, e.case, str(list(e.index)), f"{e.row_value:.6g}", f"{e.exact_value:.6g}",
                             "-" if e.baseline_value is None else f"{e.baseline_value:.6g}", f"{e.abs_diff:.3g}",
                             f"{e.allowed:.3g}", f"{e.ratio:.3g}"))
                colours.append("#f6d5d5" if e.ratio > 1 else "#ffffff")
        return "<b>worst elements (by |diff| / allowed)</b>" + _table_html(head, rows, colours)

    def figure(self) -> Figure:
        fig = Figure(figsize=(8, 3.6))
        ax = fig.add_subplot()
        drew = False
        for r in self.report.results:
            d = r.diff_sample
            if d is None or d.numel() == 0:
                continue
            finite = d[torch.isfinite(d) & (d > 0)]
            exact = int((d == 0).sum())
            broken = int((~torch.isfinite(d)).sum())
            label = f"{r.dtype} ({r.verdict}; {exact} exact, {broken} non-finite)"
            if finite.numel():
                ax.hist(finite.log10().numpy(), bins=60, histtype="step", linewidth=1.5, label=label)
                drew = True
            else:
                ax.plot([], [], label=label)
        ax.set_xlabel("log10 |row - exact| (sampled elements)")
        ax.set_ylabel("elements")
        ax.set_title(self.report._header(), fontsize=9, loc="left")
        if not drew:
            ax.text(0.5, 0.5, "no finite non-zero differences", ha="center", va="center", transform=ax.transAxes)
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    def to_html(self) -> str:
        png = _png(self.figure())
        return f"<div>{golden_html(self.report)}{_img_tag(png, 'histogram of |diff|')}{self.worst_html()}</div>"

    def widget(self) -> ipywidgets.Widget:
        return ipywidgets.VBox([
            ipywidgets.HTML(golden_html(self.report)),
            ipywidgets.Image(value=_png(self.figure()), format="png"),
            ipywidgets.HTML(self.worst_html()),
        ])


def golden_widget(report: GoldenReport | str, **verify_kwargs: Any) -> GoldenView:
    """The golden widget for a report, or for a row name (verified now, with ``verify_kwargs``)."""
    if isinstance(report, str):
        report = verify(report, **verify_kwargs)
    if not isinstance(report, GoldenReport):
        raise TypeError(f"golden_widget takes a GoldenReport or a row name, got {type(report).__name__}")
    return GoldenView(report)


# -------------------------------------------------------------------- bench


def _current_device_name() -> str:
    return platform.device_label("cuda" if torch.cuda.is_available() else "cpu")


def _short(source: str) -> str:
    """A figure's source as a plot names it: the local store's path is left to the notes."""
    return "local store" if source.startswith("local store") else source


def _source_rank(source: str) -> tuple[int, str]:
    """Dispatch's order: this session, then the local store, then the committed files."""
    return ({"this session": 0, "local store": 1}.get(source, 2), source)


#: A point's marker says where its figure came from (when a plot mixes sources).
_MARKERS = {"this session": "s", "local store": "^"}


class BenchPlot(_View):
    """Benchmark figures of one op: a line per row against size, the copy roofline dashed.

    By default it shows the figures dispatch ranks this machine's rows by
    (rapid_llm.kernels.dispatch.measurements.ranked_entries): this session's, the
    local store's only when opted in, then the committed ``ops/<group>/<op>/figures``
    of this device kind, each figure named by its source. So a plot never
    shows what does not decide dispatch, such as the local store written by
    an earlier run. Where nothing ranks rows here (a machine without the
    committed GPU), the first committed file that has the op is shown, and
    the title says which GPU measured it and that dispatch here does not use
    it. ``device_name`` shows what ranks rows on that device; ``source`` one
    results file.
    """

    def __init__(self, op: str, *, metric: str = "gbps", dtype: str | None = None, device_name: str | None = None,
                 source: str | Path | None = None, rows: Sequence[str] | None = None, profile: Any = None):
        if metric not in ("gbps", "latency"):
            raise ValueError(f"bench_plot({op!r}): metric must be 'gbps' or 'latency', got {metric!r}")
        self.op, self.metric, self.dtype, self.profile = op, metric, dtype, profile
        self.notes: list[str] = []
        entries, self.meta, self.device, self.origin = self._load(op, device_name, source)
        self.entries = [e for e in entries if rows is None or e["row"] in rows]
        self.sources = sorted({e["source"] for e in self.entries}, key=_source_rank)
        self.dtypes = sorted({e["dtype"] for e in self.entries})
        if dtype is not None and self.entries and dtype not in self.dtypes:
            raise ValueError(f"bench_plot({op!r}): no {dtype} figures (have {', '.join(self.dtypes)})")

    def _load(self, op: str, device_name: str | None,
              source: str | Path | None) -> tuple[list[dict[str, Any]], dict[str, Any], str, str]:
        """(entries, each with its "source"; meta; device; origin): origin is "file" (``source``), "ranked"
        (what dispatch ranks by on the device) or "elsewhere" (committed figures of another device)."""
        if source is not None:
            doc = measurements.load_file(source)
            label = Path(source).name
            return ([{**e, "source": label} for e in doc["entries"].values() if e["op"] == op], doc.get("meta", {}),
                    doc["device"], "file")
        name = device_name or _current_device_name()
        raw = measurements.ranked_entries(name, op)
        ranked = [{**e, "source": _short(src)} for src, e in raw]
        shown = {json.dumps(e, sort_keys=True) for _, e in raw}  # this session's figures are in the store too
        unranked = [e for e in measurements.entries(name, op) if json.dumps(e, sort_keys=True) not in shown]
        if unranked and not measurements.uses_local():
            self.notes.append(f"not shown: {len(unranked)} figures of an earlier run in the local store "
                              f"{measurements.results_path(name)}; dispatch ranks by them only with "
                              "RAPID_LLM_LOCAL_MEASUREMENTS=1 (or measurements.use_local())")
        if ranked or device_name is not None:
            return ranked, self._meta_of(name, {e["source"] for e in ranked}), name, "ranked"
        path = measurements.committed_for(op)
        if path is None:
            return [], {}, name, "ranked"
        doc = measurements.load_file(path)
        return ([{**e, "source": measurements.committed_label(path)} for e in doc["entries"].values() if e["op"] == op],
                doc.get("meta", {}), doc["device"], "elsewhere")

    @staticmethod
    def _meta_of(name: str, sources: set[str]) -> dict[str, Any]:
        """The facts (copy roofline, date) of the first source in dispatch's order that has them."""
        for src in sorted(sources, key=_source_rank):
            if src.startswith("committed "):
                path = next((p for p in measurements.committed_results() if measurements.committed_label(p) == src), None)
                found = measurements.load_file(path).get("meta", {}) if path is not None else {}
            else:  # bench_op keeps the facts of this session's and the local store's figures in the store
                found = measurements.meta(name)
            if found:
                return found
        return {}

    @property
    def roofline_gbps(self) -> float | None:
        return self.meta.get("copy_roofline_gbps")

    def date(self) -> str:
        stamp = self.meta.get("measured_at") if len(self.sources) == 1 else None
        stamp = stamp or max((e.get("measured_at", "") for e in self.entries), default="")
        return stamp[:10] or "unknown date"

    def _title_parts(self) -> tuple[str, str]:
        """What was measured where and when, and where the figures came from."""
        kind = "CPU numbers" if self.device == "cpu" else self.device
        if not self.entries:
            return f"{self.op}: {kind}, no figures", ""
        where = " + ".join(self.sources)
        if self.origin == "elsewhere":
            where += f"; dispatch on {_current_device_name()} does not rank by them"
        return f"{self.op}: {kind}, measured {self.date()}", where

    def title(self) -> str:
        head, where = self._title_parts()
        return f"{head} ({where})" if where else head

    def _tag(self, source: str) -> str:
        """A table cell's short name for its figure's source ("figures from:" has the full names)."""
        committed = [s for s in self.sources if s.startswith("committed ")]
        short = {"this session": "session", "local store": "local"}
        return short.get(source, "committed" if len(committed) == 1 and source in committed else source)

    def source_lines(self) -> list[str]:
        """Where the figures came from, and what was left out (the text and HTML forms share them)."""
        counts = {s: sum(e["source"] == s for e in self.entries) for s in self.sources}
        lines = ["figures from: " + ", ".join(f"{s} ({n})" for s, n in counts.items())] if len(counts) > 1 else []
        return lines + self.notes

    def _series(self, dtype: str) -> dict[str, list[dict[str, Any]]]:
        series: dict[str, list[dict[str, Any]]] = {}
        for e in sorted((e for e in self.entries if e["dtype"] == dtype), key=lambda e: e["numel"]):
            series.setdefault(e["row"], []).append(e)
        return series

    def _value(self, e: dict[str, Any]) -> float | None:
        return e.get("gbps") if self.metric == "gbps" else e["median_us"]

    def figure(self) -> Figure:
        dtypes = [self.dtype] if self.dtype else self.dtypes
        fig = Figure(figsize=(5.2 * max(len(dtypes), 1), 4.2))
        if not self.entries:
            ax = fig.add_subplot()
            ax.axis("off")
            ax.text(0.5, 0.5, f"no benchmark figures for {self.op!r} yet:\nrun rapid_llm.bench.bench_op({self.op!r}, "
                    "sizes) or its benchmarks/kernels script", ha="center", va="center")
            return fig
        axes = fig.subplots(1, len(dtypes), squeeze=False)[0]
        mixed = len(self.sources) > 1
        for ax, dtype in zip(axes, dtypes):
            if not any(self._value(p) for p in self.entries if p["dtype"] == dtype):
                ax.axis("off")  # e.g. figures without GB/s: no line to draw, and no log axis of nothing
                ax.text(0.5, 0.5, f"{dtype}: no {'GB/s' if self.metric == 'gbps' else 'latency'} figures",
                        ha="center", va="center")
                continue
            for row, points in self._series(dtype).items():
                points = [p for p in points if self._value(p)]
                xs = [p["numel"] for p in points]
                ys = [self._value(p) for p in points]
                if row == COPY_ROW:
                    ax.plot(xs, ys, "k--", linewidth=1.2, label="copy (same bytes)")
                    continue
                mine = sorted({p["source"] for p in points}, key=_source_rank)
                (line,) = ax.plot(xs, ys, label=f"{row} ({', '.join(map(self._tag, mine))})" if mixed else row)
                for src in mine:  # the marker says where each point's figure came from
                    ax.plot([p["numel"] for p in points if p["source"] == src],
                            [self._value(p) for p in points if p["source"] == src], linestyle="none",
                            marker=_MARKERS.get(src, "o"), markersize=4 if mixed else 3, color=line.get_color())
            if self.metric == "gbps" and self.roofline_gbps:
                ax.axhline(self.roofline_gbps, color="grey", linestyle=":", linewidth=1,
                           label=f"copy roofline {self.roofline_gbps:.0f} GB/s")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("elements")
            ax.set_ylabel("GB/s (read + write)" if self.metric == "gbps" else "median latency (us)")
            ax.set_title(dtype)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=9 if len(dtypes) > 1 else 10)
        head, where = self._title_parts()
        fig.suptitle("\n".join([head, *where.split("; ")]) if where else head, fontsize=10)
        fig.tight_layout()
        return fig

    def table_rows(self, dtype: str) -> tuple[list[str], list[list[str]]]:
        series = self._series(dtype)
        sizes = sorted({p["numel"] for pts in series.values() for p in pts})
        head = ["numel", *series]
        rows = []
        for n in sizes:
            cells = [_size_label(n)]
            for points in series.values():
                p = next((p for p in points if p["numel"] == n), None)
                if p is None:
                    cells.append("-")
                    continue
                text = f"{p['median_us']:.2f} us"
                if p.get("gbps"):
                    text += f", {p['gbps']:.0f} GB/s"
                if p.get("roofline_fraction"):
                    text += f", {100 * p['roofline_fraction']:.0f}%"
                if len(self.sources) > 1:
                    text += f" [{self._tag(p['source'])}]"
                cells.append(text)
            rows.append(cells)
        return head, rows

    def __str__(self) -> str:
        lines = [self.title(), *self.source_lines()]
        if self.roofline_gbps:
            lines.append(f"copy roofline: {self.roofline_gbps:.0f} GB/s")
        for dtype in [self.dtype] if self.dtype else self.dtypes:
            head, rows = self.table_rows(dtype)
            widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
            lines.append(f"[{dtype}]")
            for r in [head, *rows]:
                lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if not self.entries:
            lines.append("no figures yet")
        return "\n".join(lines)

    def tables_html(self) -> str:
        parts = []
        for dtype in [self.dtype] if self.dtype else self.dtypes:
            head, rows = self.table_rows(dtype)
            parts.append(f"<b>{html.escape(dtype)}</b> (median latency, GB/s, % of copy roofline)"
                         + _table_html(head, rows))
        return "".join(parts)

    def notes_html(self) -> str:
        return "".join(f"<div style='font-size:90%'>{html.escape(line)}</div>" for line in self.source_lines())

    def to_html(self) -> str:
        return (f"<div><b>{html.escape(self.title())}</b><br/>{self.notes_html()}"
                f"{_img_tag(_png(self.figure()), self.title())}{self.tables_html()}</div>")

    def row_names(self) -> list[str]:
        return sorted({e["row"] for e in self.entries})

    def why(self, row: str) -> str:
        """What explains a row's line: its kernels' build facts (inspect) and, when the plot was given a
        profile, what Nsight Compute measured of them."""
        from rapid_llm.kernels import inspect

        lines = [str(inspect(row))]
        if self.profile is not None:
            mine = [r for r in self.profile.rows() if r[0] == row]
            if mine:
                lines += ["Nsight Compute: " + "  ".join(f"{h} {v}" for h, v in zip(self.profile.HEAD[1:], r[1:]))
                          for r in mine]
            else:
                lines.append(f"Nsight Compute: {row} is not in the profile given ({self.profile.target})")
        return "\n".join(lines)

    def widget(self) -> ipywidgets.Widget:
        # a dtype with no figures yet is not among the options: start on "all" then
        # "all" is a string value: ipywidgets shows an option whose value is None as no selection
        dtype = ipywidgets.Dropdown(options=[("all", "all")] + [(d, d) for d in self.dtypes],
                                    value=self.dtype if self.dtype in self.dtypes else "all", description="dtype")
        metric = ipywidgets.ToggleButtons(options=[("GB/s", "gbps"), ("latency", "latency")], value=self.metric)
        image = ipywidgets.Image(value=_png(self.figure()), format="png")
        table = ipywidgets.HTML(self.notes_html() + self.tables_html())

        def refresh(_: Any = None) -> None:
            self.dtype, self.metric = (None if dtype.value == "all" else dtype.value), metric.value
            image.value = _png(self.figure())
            table.value = self.notes_html() + self.tables_html()

        dtype.observe(refresh, names="value")
        metric.observe(refresh, names="value")
        why = ipywidgets.Dropdown(options=[("a row's line...", "")] + [(r, r) for r in self.row_names()],
                                  value="", description="why?")
        reason = ipywidgets.HTML()

        def explain_row(_: Any = None) -> None:
            reason.value = "" if not why.value else f"<pre>{html.escape(self.why(why.value))}</pre>"

        why.observe(explain_row, names="value")
        return ipywidgets.VBox([ipywidgets.HBox([dtype, metric]), image, table, why, reason])


def inspect_widget(inspection: Any) -> Any:
    """A row's build facts table, with a kernel picker, SASS/PTX switch and a search box over the code.

    ``inspection`` is what rapid_llm.kernels.inspect returns; printed, it is the same table as text.
    """
    w = ipywidgets
    from rapid_llm.notebook.tables import _table

    table = w.HTML(_table(str(inspection).splitlines()[0], inspection.HEAD,
                          [(r, "#ffffff") for r in inspection.rows()], inspection.notes))
    kernels = inspection.kernels()
    if not kernels:
        return table
    names = {inspection.facts[k].label: k for k in kernels}
    picker = w.Dropdown(options=list(names), description="kernel", layout=w.Layout(width="90%"))
    kinds = [k for k, text in (("SASS", inspection.sass), ("PTX", inspection.ptx)) if text]
    kind = w.ToggleButtons(options=kinds or ["SASS"])
    search = w.Text(placeholder="search (regex)", description="find")
    code = w.HTML()

    def redraw(*_: Any) -> None:
        text = inspection.code(names[picker.value], kind.value.lower()) or f"no {kind.value} for this kernel here"
        pattern = search.value
        if pattern:
            try:
                rx = re.compile(pattern)
                text = "\n".join(line for line in text.splitlines() if rx.search(line)) or f"no line matches {pattern!r}"
            except re.error as exc:
                text = f"not a regex: {exc}"
        code.value = f"<pre style='max-height:24em;overflow:auto'>{html.escape(text)}</pre>"

    for control in (picker, kind, search):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([table, picker, w.HBox([kind, search]), code])


def bench_plot(op: str, *, metric: str = "gbps", dtype: str | None = None, device_name: str | None = None,
               source: str | Path | None = None, rows: Sequence[str] | None = None, profile: Any = None) -> BenchPlot:
    """The benchmark plot of ``op`` (``metric`` 'gbps' or 'latency'), of every row or of ``rows`` only; its
    "why?" picker explains a row's line by the row's build facts and, given one, ``profile``'s figures."""
    return BenchPlot(op, metric=metric, dtype=dtype, device_name=device_name, source=source, rows=rows,
                     profile=profile)


# -------------------------------------------------------------------- docs


def render_docs(out_dir: str | Path, op: str = "scale", rows: Sequence[str] | None = None,
                source: str | Path | None = None) -> list[Path]:
    """Render the explain, golden and benchmark views of ``op`` to PNGs in ``out_dir``.

    Golden views are rendered for every row that can be verified here (the
    others are reported and skipped); the explain view uses the largest
    measured size, so its figures are the measured ones.
    """
    from rapid_llm.kernels.verification.golden import GoldenError

    out = Path(out_dir)
    written = []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    plot = bench_plot(op, source=source)
    numel = max((e["numel"] for e in plot.entries), default=4096)
    dtype = "bf16" if "bf16" in plot.dtypes else None
    written.append(explain_widget(op, dtype=dtype, device=device, numel=numel).save_png(out / f"explain_{op}.png"))
    for name in rows or [r.name for r in rows_for(op)]:
        try:
            report = verify(name)
        except GoldenError as exc:
            print(f"skipping golden view of {name}: {exc}", file=sys.stderr)
            continue
        written.append(golden_widget(report).save_png(out / f"golden_{name.replace('/', '_')}.png"))
    for metric in ("gbps", "latency"):
        written.append(bench_plot(op, metric=metric, source=source).save_png(out / f"bench_{op}_{metric}.png"))
    return written


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the widgets of an op to PNG files.")
    parser.add_argument("out_dir", help="folder for the PNGs (e.g. docs/img)")
    parser.add_argument("--op", default="scale")
    parser.add_argument("--rows", nargs="*", help="rows to verify for golden views (default: all of the op's rows)")
    parser.add_argument("--results", help="results JSON to plot instead of this machine's store")
    args = parser.parse_args(argv)
    for path in render_docs(args.out_dir, args.op, args.rows, args.results):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
