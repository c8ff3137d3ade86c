"""What ``verify`` reports: per dtype the largest errors, the worst elements and the verdict, as data.

These are plain frozen values with a text form (a table), kept apart from the
comparison rule that fills them and from ``verify`` that runs the cases, so a
renderer (the notebook's golden widget, its HTML table) needs only this module.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from rapid_llm.kernels.registry.spec import GoldenRecord
from rapid_llm.kernels.verification.defects import Defect

__all__ = ["GoldenError", "ElementDiff", "DtypeResult", "GoldenReport", "COLUMNS", "NOT_COMPARED"]

#: How the rule of a dtype that was never compared starts (the rest says why).
NOT_COMPARED = "not compared: "


class GoldenError(RuntimeError):
    """Verification cannot run (no reference for the op, or the row cannot run here)."""


@dataclass(frozen=True)
class ElementDiff:
    """One element where a row and the exact answer differ: where, by how much, and the values."""

    case: str
    index: tuple[int, ...]
    row_value: float
    exact_value: float
    baseline_value: float | None
    abs_diff: float
    allowed: float

    @property
    def ratio(self) -> float:
        """How many times the allowed error this element is off (> 1 fails)."""
        if self.abs_diff == 0:
            return 0.0
        return math.inf if self.allowed == 0 else self.abs_diff / self.allowed


@dataclass(frozen=True)
class DtypeResult:
    """The verdict for one dtype over every reference case."""

    dtype: str
    passed: bool
    max_abs_diff: float
    max_rel_diff: float
    max_abs_diff_vs_baseline: float | None
    baseline_max_abs_diff: float | None
    n_elements: int
    n_bad: int
    worst: tuple[ElementDiff, ...]
    rule: str
    error: str | None = None
    diff_sample: torch.Tensor | None = field(default=None, repr=False, compare=False)
    defects: tuple[Defect, ...] = ()
    deterministic: bool | None = None  # bitwise equal over two runs on one input (None: not run)
    notes: tuple[str, ...] = ()  # what an op's own comparison rule reports (Reference.compare.summary)
    ulps: float | None = None  # the largest error in ulps of m (comparison.ulps_of; None: another rule judged it)
    bound_ulps: float | None = None  # the bound B in ulps it was held to (the largest over the cases)

    @property
    def worst_element(self) -> ElementDiff | None:
        return self.worst[0] if self.worst else None

    def failure_reasons(self) -> list[str]:
        """Why this dtype failed, in the row itself: a defect fails it with 0 bad elements, and its
        line below the table is easy to miss."""
        if self.passed:
            return []
        reasons = []
        if self.error is not None:
            reasons.append(self.rule.removeprefix(NOT_COMPARED) if self.rule.startswith(NOT_COMPARED) else "error")
        if self.n_bad:
            reasons.append(f"{self.n_bad} bad element{'' if self.n_bad == 1 else 's'}")
        reasons += dict.fromkeys(d.kind for d in self.defects)
        return reasons

    @property
    def verdict(self) -> str:
        """"pass", or "FAIL: " and the reasons ("FAIL: guard_band", "FAIL: 3 bad elements")."""
        if self.passed:
            return "pass"
        reasons = self.failure_reasons()
        return "FAIL: " + ", ".join(reasons) if reasons else "FAIL"

    def cells(self) -> tuple[str, ...]:
        """This dtype's row of the report table (COLUMNS): the text and the HTML forms share it."""
        w = self.worst_element
        worst = self.error or ("-" if w is None else
                               f"{w.case} {list(w.index)}: row {w.row_value:.6g}, exact {w.exact_value:.6g}")
        of_allowed = "-" if w is None else ("inf" if math.isinf(w.ratio) else f"{w.ratio:.2g}x")
        return (self.dtype, self.verdict, _fmt(self.max_abs_diff), _fmt(self.max_rel_diff), self.ulps_text(),
                of_allowed, _fmt(self.max_abs_diff_vs_baseline), _fmt(self.baseline_max_abs_diff),
                f"{self.n_bad}/{self.n_elements}", worst)

    def ulps_text(self) -> str:
        """"3.1 of 10": the largest error in ulps of m, of the bound it was held to (the "ulps" column)."""
        if self.ulps is None:
            return "-"
        return f"{self.ulps:.2g}" + ("" if self.bound_ulps is None else f" of {self.bound_ulps:.3g}")

    @property
    def recorded_diff(self) -> float:
        """What the GoldenRecord keeps: the diff against the baseline row (against exact without one)."""
        return self.max_abs_diff if self.max_abs_diff_vs_baseline is None else self.max_abs_diff_vs_baseline


@dataclass(frozen=True)
class GoldenReport:
    """Verification of one row; prints as a table (the notebook extension renders the golden widget)."""

    row: str
    op: str
    baseline: str
    device: str
    results: tuple[DtypeResult, ...]
    record: GoldenRecord
    findings: tuple[Any, ...] = ()  # compute-sanitizer reports (rapid_llm.kernels.verification.isolate.SanitizerFinding)
    notes: tuple[str, ...] = ()     # how the checks ran: in a child process, under which sanitizer tools

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results) and not self.findings

    @property
    def defects(self) -> tuple[Defect, ...]:
        """Every defect found, over all dtypes (rapid_llm.kernels.verification.defects.DEFECT_KINDS says what each kind is)."""
        return tuple(d for r in self.results for d in r.defects)

    def defect_lines(self) -> list[str]:
        """One line per defect, then whether the row is deterministic: what the table does not show."""
        lines = [f"defect {d}" for d in self.defects] + [f"sanitizer {f}" for f in self.findings] + list(self.notes)
        lines += [f"{r.dtype}: {note}" for r in self.results for note in r.notes]
        runs = {r.dtype: r.deterministic for r in self.results if r.deterministic is not None}
        if runs:
            same = [d for d, v in runs.items() if v]
            differ = [d for d, v in runs.items() if not v]
            lines.append("deterministic (two runs, bitwise): " + ("yes" if not differ else
                         f"no for {', '.join(differ)}" + (f"; yes for {', '.join(same)}" if same else "")))
        return lines

    def __getitem__(self, dtype: str) -> DtypeResult:
        for r in self.results:
            if r.dtype == dtype:
                return r
        raise KeyError(f"{self.row}: no result for dtype {dtype!r} (have {', '.join(r.dtype for r in self.results)})")

    def regressions(self, record: GoldenRecord) -> list[str]:
        """Dtypes whose measured diff against the baseline exceeds what ``record`` promises.

        A shipped row's test calls this with the row's committed record: the
        test fails when the kernel got less accurate than it claimed.
        """
        promised = dict(record.per_dtype)
        out = []
        for r in self.results:
            limit = promised.get(r.dtype, record.max_abs_diff)
            if limit is None:
                continue
            if not r.passed or not r.recorded_diff <= limit:
                out.append(f"{r.dtype}: measured {r.recorded_diff:.3g} vs recorded {limit:.3g}"
                           + ("" if r.passed else " (and it fails the tolerance)"))
        return out

    def _header(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        if not self.passed and all(r.passed for r in self.results):  # no row says why: the sanitizer did
            verdict += f": {len(self.findings)} sanitizer finding{'' if len(self.findings) == 1 else 's'}"
        return f"golden {self.row} vs {self.baseline} and the float64 oracle on {self.device}: {verdict}"

    def rule_text(self) -> str:
        """What the tolerance is relative to (the table's "of allowed" is the worst element's error over it)."""
        return "rule: " + "; ".join(sorted({r.rule for r in self.results}))

    def __str__(self) -> str:
        lines = [self._header()]
        rows = [COLUMNS] + [r.cells() for r in self.results]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
        for row in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
        lines.append(self.rule_text())
        lines.extend(self.defect_lines())
        return "\n".join(line.rstrip() for line in lines)

    def __repr__(self) -> str:
        return str(self)


#: The report's columns: "ulps" is the largest error in ulps of m, of the bound B the rule held the dtype to
#: (rapid_llm.kernels.verification.comparison); "of allowed" is the worst element's error over what the rule allows
#: it (<= 1 passes).
COLUMNS = ("dtype", "verdict", "max abs", "max rel", "ulps", "of allowed", "vs baseline", "baseline err", "bad/elements",
           "worst element")


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) or abs(x) >= 1e300 else f"{x:.3g}"

