"""Why two rows differ in speed: their kernels' build facts, occupancy, launch configuration and SASS, side by side.

Everything comes from the project's inspection (rapid_llm.kernels.inspection:
ptxas's report kept with a build, Triton's record of its specialisations, the
occupancy rules, the SASS listing), so a row that ``inspect`` can describe
can be compared. Kernels of A and B are paired by symbol, then by the
template arguments in their names (``scale_kernel<float>`` with
``scale_vec_kernel<float>``), then in order; a kernel with no partner is
listed as only in A or only in B.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rapid_llm.kernels.toolchain.buildfacts import KernelFacts, Occupancy
from rapid_llm.kernels.inspection.sass_diff import SassDiff
from rapid_llm.kernels.inspection.sass_diff import diff as sass_diff

__all__ = ["KernelDiff", "BuildDiff", "diff_inspections", "pair_kernels"]

HEAD = ("kernel (A -> B)", "registers", "spill B st/ld", "static smem B", "stack B", "block", "occupancy", "SASS")


@dataclass(frozen=True)
class KernelDiff:
    """One kernel of A beside its partner in B (either may be missing)."""

    a: str | None
    b: str | None
    a_facts: KernelFacts | None = None
    b_facts: KernelFacts | None = None
    a_block: int | None = None
    b_block: int | None = None
    a_occupancy: Occupancy | None = None
    b_occupancy: Occupancy | None = None
    sass: SassDiff | None = None

    @property
    def label(self) -> str:
        la = self.a_facts.label if self.a_facts else self.a
        lb = self.b_facts.label if self.b_facts else self.b
        if la == lb:
            return str(la)
        return f"{la or '(none)'} -> {lb or '(none)'}"

    def cells(self) -> tuple[str, ...]:
        fa, fb = self.a_facts, self.b_facts

        def pair(get: Any) -> str:
            va = "-" if fa is None else get(fa)
            vb = "-" if fb is None else get(fb)
            return str(va) if va == vb else f"{va} -> {vb}"

        def occ(o: Occupancy | None) -> str:
            return "-" if o is None else f"{100 * o.fraction:.0f}% ({o.limiter})"

        oa, ob = occ(self.a_occupancy), occ(self.b_occupancy)
        ba, bb = self.a_block or "-", self.b_block or "-"
        sass = "-" if self.sass is None else ("same" if self.sass.empty else
                                              f"-{self.sass.removed} +{self.sass.added}")
        return (self.label, pair(lambda f: f.registers), pair(lambda f: f"{f.spill_stores}/{f.spill_loads}"),
                pair(lambda f: f.smem_static), pair(lambda f: f.stack_frame),
                str(ba) if ba == bb else f"{ba} -> {bb}", oa if oa == ob else f"{oa} -> {ob}", sass)

    @property
    def changed(self) -> bool:
        cells = self.cells()
        return self.a is None or self.b is None or any("->" in c for c in cells[1:7]) or cells[7] not in ("same", "-")


@dataclass
class BuildDiff:
    """The kernel pairs of two rows, the launches of one call of each, and what could not be known."""

    kernels: list[KernelDiff] = field(default_factory=list)
    #: per shape label ("bf16 numel=1048576"): (A's launches, B's launches) as Launch.config() lines
    launches: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def table(self) -> list[tuple[str, ...]]:
        return [HEAD, *(k.cells() for k in self.kernels)]

    def launch_lines(self) -> list[str]:
        out = []
        for shape, (la, lb) in self.launches.items():
            if la == lb:
                out.append(f"launch at {shape}: same ({'; '.join(la) or 'no kernels'})")
            else:
                out.append(f"launch at {shape}: A {'; '.join(la) or 'no kernels'} | B {'; '.join(lb) or 'no kernels'}")
        return out

    def text(self, max_hunks: int = 8) -> str:
        lines = []
        if self.kernels:
            rows = self.table()
            widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD) - 1)]
            lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
        lines += self.launch_lines()
        for k in self.kernels:
            if k.sass is not None and not k.sass.empty:
                lines.append(k.sass.text(max_hunks))
        lines += self.notes
        return "\n".join(line.rstrip() for line in lines)

    def __str__(self) -> str:
        return self.text()


_TEMPLATE = re.compile(r"<(.*)>")


def _template_key(facts: KernelFacts) -> str | None:
    """The template arguments of a kernel's C++ name (``float`` of ``void k<float>(...)``), if any."""
    m = _TEMPLATE.search(facts.name.split("(")[0]) if facts.name else None
    return m[1] if m else None


def pair_kernels(a: dict[str, KernelFacts], b: dict[str, KernelFacts]) -> list[tuple[str | None, str | None]]:
    """Pairs of A's and B's kernel symbols: same symbol, then same template arguments, then in order."""
    pairs: list[tuple[str | None, str | None]] = []
    left, right = [s for s in a], [s for s in b]
    for s in list(left):
        if s in right:
            pairs.append((s, s))
            left.remove(s)
            right.remove(s)
    for s in list(left):
        key = _template_key(a[s])
        match = next((t for t in right if key is not None and _template_key(b[t]) == key), None)
        if match is not None:
            pairs.append((s, match))
            left.remove(s)
            right.remove(match)
    while left and right:
        pairs.append((left.pop(0), right.pop(0)))
    pairs += [(s, None) for s in left] + [(None, t) for t in right]
    return pairs


def diff_inspections(a: Any, b: Any) -> BuildDiff:
    """A BuildDiff from two rapid_llm.kernels.inspection Inspection objects (A's and B's)."""
    out = BuildDiff()
    out.notes += [f"A: {n}" for n in a.notes if not n.startswith("notable")]
    out.notes += [f"B: {n}" for n in b.notes if not n.startswith("notable")]
    tools = {side: _tool(insp.sass) for side, insp in (("A", a), ("B", b)) if insp.sass}
    if len(set(tools.values())) > 1:
        out.notes.append("SASS: A and B were listed by different tools (one build has -lineinfo, the other not), "
                         "so their listings may differ in spelling; build both alike for an exact diff")
    for sa, sb in pair_kernels(a.facts, b.facts):
        code_a = a.code(sa) if sa else None
        code_b = b.code(sb) if sb else None
        sass = None
        if code_a is not None and code_b is not None:
            sass = sass_diff(code_a, code_b, kernel=(b.facts[sb].label if sb else ""))
        out.kernels.append(KernelDiff(
            sa, sb, a.facts.get(sa) if sa else None, b.facts.get(sb) if sb else None,
            a.block_size(sa) if sa else None, b.block_size(sb) if sb else None,
            a.occupancy(sa) if sa else None, b.occupancy(sb) if sb else None, sass))
    if a.facts and b.facts and all(k.sass is None for k in out.kernels):
        out.notes.append("SASS: no listing on one side or both (nvdisasm or cuobjdump from the CUDA toolkit lists it)")
    return out


def _tool(listing: str) -> str:
    return "nvdisasm" if ".text." in listing and "Function :" not in listing else "cuobjdump"
