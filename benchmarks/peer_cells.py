"""The peer benchmark's goal cells, read from its JSON: dispatch against the best peer, and against a copy.

    python benchmarks/peer_cells.py RUN.json [RUN.json ...] [--within 0.01] [--copy-within 0.10] [--decode-t 16]

The peer benchmark (``bash run.sh OUTDIR``, kept beside the repository; see benchmarks/results/peer/README.md)
writes every figure to ``bench_peers.json``. This reads its summary and prints, per op and T, one line a cell:

* dispatch (``rapid_llm``: the row an eager caller gets) over the best of FlashInfer, Liger-Kernel and
  torch.compile in the same run; the cell is met at ``1 + --within`` or less;
* at T <= ``--decode-t``, dispatch over a device-to-device copy of the same bytes; met at ``1 + --copy-within``;
* the run's own spread at that cell: dispatch and the row it dispatched to, timed alone in the same run, are one
  kernel timed twice (the benchmark times each implementation on its own inputs, one after another), so their
  gap says how far a 1 % cell can be trusted.

Liger's rotary_embedding is taken as the benchmark times it by default (cos/sin gathered before the timed call);
``liger+prep``, which gathers them inside it, is not a peer here. With several runs of one model a last table
counts, per cell, in how many runs it was met.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

PEERS = ("flashinfer", "liger", "torch.compile")
DISPATCH = "rapid_llm"


@dataclass(frozen=True)
class Cell:
    """One op at one T of one run."""

    op: str
    tokens: int
    dispatch_us: float
    best_peer: str
    best_us: float
    copy_us: float
    row_alone_us: float | None  # the dispatched row timed on its own in the same run

    @property
    def ratio(self) -> float:
        return self.dispatch_us / self.best_us

    @property
    def copy_ratio(self) -> float:
        return self.dispatch_us / self.copy_us

    @property
    def spread(self) -> float | None:
        """|dispatch - the same row alone| over the smaller: the run's own noise at this cell."""
        if self.row_alone_us is None:
            return None
        return abs(self.dispatch_us - self.row_alone_us) / min(self.dispatch_us, self.row_alone_us)


def model_of(run: dict) -> str:
    """The shapes a run used: its --model, else the benchmark's default (Llama-3-8B)."""
    return run.get("args", {}).get("model") or "llama3-8b"


def cells(run: dict) -> list[Cell]:
    """Every (op, T) of a run that has dispatch and at least one peer; ValueError if the JSON has no summary."""
    summary = run.get("summary")
    if not isinstance(summary, dict):
        raise ValueError("not a peer benchmark JSON: no 'summary' (bench_peers.py --json writes one)")
    out = []
    for op, by_t in summary.items():
        for t, figures in sorted(by_t.items(), key=lambda kv: int(kv[0])):
            peers = {p: figures[p][0] for p in PEERS if figures.get(p)}
            if DISPATCH not in figures or not peers:
                continue
            best = min(peers, key=peers.get)
            chosen = figures.get("dispatched") or ""
            alone = figures.get(f"{DISPATCH}:{chosen.split('/')[0]}") if "/" in chosen else None
            out.append(Cell(op, int(t), figures[DISPATCH][0], best, peers[best], figures["copy_us"],
                            alone[0] if alone else None))
    return out


def table(name: str, run_cells: list[Cell], within: float, copy_within: float, decode_t: int) -> str:
    """One run's cells, a line each, and the count of cells met."""
    lines = [f"== {name}",
             f"{'op':20s} {'T':>6s} {'dispatch':>9s} {'best peer':>22s} {'ratio':>6s} {'met':>4s} "
             f"{'spread':>7s} {'vs copy':>8s}"]
    met = 0
    for c in run_cells:
        ok = c.ratio <= 1 + within
        met += ok
        spread = "" if c.spread is None else f"{100 * c.spread:.1f} %"
        copy = ""
        if c.tokens <= decode_t:
            copy = f"{c.copy_ratio:.3f} {'yes' if c.copy_ratio <= 1 + copy_within else 'no'}"
        lines.append(f"{c.op:20s} {c.tokens:6d} {c.dispatch_us:9.2f} {c.best_peer:>14s} {c.best_us:7.2f} "
                     f"{c.ratio:6.3f} {'yes' if ok else 'no':>4s} {spread:>7s} {copy:>8s}")
    lines.append(f"cells where dispatch is within {100 * within:g} % of the best peer: {met} of {len(run_cells)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="bench_peers.json files")
    p.add_argument("--within", type=float, default=0.01, help="a cell is met at dispatch <= (1 + this) x best peer")
    p.add_argument("--copy-within", type=float, default=0.10, help="at decode T: dispatch <= (1 + this) x copy")
    p.add_argument("--decode-t", type=int, default=16, help="the largest T judged against a copy")
    a = p.parse_args(argv)
    met_by_model: dict[str, dict[tuple[str, int], list[bool]]] = defaultdict(lambda: defaultdict(list))
    for path in a.runs:
        try:
            run = json.loads(path.read_text())
            run_cells = cells(run)
        except (OSError, ValueError) as exc:
            print(f"peer_cells: {path}: {exc}", file=sys.stderr)
            return 2
        print(table(f"{path} ({model_of(run)})", run_cells, a.within, a.copy_within, a.decode_t), end="\n\n")
        for c in run_cells:
            met_by_model[model_of(run)][c.op, c.tokens].append(c.ratio <= 1 + a.within)
    for model, by_cell in met_by_model.items():
        runs = max(len(v) for v in by_cell.values())
        if runs < 2:
            continue
        print(f"== {model}: runs in which each cell was met, of {runs}")
        for (op, t), met in by_cell.items():
            print(f"{op:20s} {t:6d} {sum(met)} of {len(met)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
