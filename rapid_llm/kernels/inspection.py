"""``inspect(row)``: what the compiler made of a row's kernels, beside the row.

For a JIT row built on the fast path: registers, spills, static shared and
local memory per kernel (ptxas's report, kept with the build), the
theoretical occupancy at a block size, the PTX (NVRTC's), and the SASS where
``cuobjdump`` or ``nvdisasm`` is installed (with source lines when the row
was built with ``-lineinfo``). Rows built otherwise say what is not known
about them, in one line each.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rapid_llm.kernels import buildfacts
from rapid_llm.kernels.buildfacts import KernelFacts, Occupancy

__all__ = ["Inspection", "inspect", "sass_of", "split_by_kernel"]


@dataclass
class Inspection:
    """Build facts, occupancy and code of one row's kernels."""

    row: str
    threads_per_block: int
    facts: dict[str, KernelFacts] = field(default_factory=dict)
    ptx: str | None = None
    sass: str | None = None
    notes: list[str] = field(default_factory=list)

    def occupancy(self, symbol: str) -> Occupancy | None:
        try:
            return buildfacts.occupancy(self.facts[symbol], self.threads_per_block)
        except ValueError:
            return None

    def kernels(self) -> list[str]:
        return list(self.facts)

    def code(self, symbol: str, kind: str = "sass") -> str | None:
        """One kernel's SASS or PTX (the whole listing split at its kernels)."""
        text = self.sass if kind == "sass" else self.ptx
        return None if text is None else split_by_kernel(text, kind).get(symbol)

    def rows(self) -> list[tuple[str, ...]]:
        out = []
        for symbol, f in self.facts.items():
            occ = self.occupancy(symbol)
            out.append((f.label, str(f.registers), f"{f.spill_stores}/{f.spill_loads}", str(f.smem_static),
                        str(f.stack_frame), "-" if occ is None else f"{100 * occ.fraction:.0f}% ({occ.limiter})"))
        return out

    HEAD = ("kernel", "registers", "spill B st/ld", "static smem B", "stack B", "occupancy")

    def __str__(self) -> str:
        lines = [f"inspect({self.row!r}): {len(self.facts)} kernels; occupancy at {self.threads_per_block} "
                 "threads per block"]
        table = [self.HEAD, *self.rows()]
        if self.facts:
            widths = [max(len(r[i]) for r in table) for i in range(len(self.HEAD) - 1)]
            lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in table]
        lines += self.notes
        return "\n".join(line.rstrip() for line in lines)

    def __repr__(self) -> str:
        return str(self)


def inspect(row: Any, threads_per_block: int = 256) -> Inspection:
    """The build facts of ``row`` (a row name or KernelSpec), building it if it is not built yet."""
    from rapid_llm.kernels import spec
    from rapid_llm.kernels.jit_row import JitRow

    row = spec.get_row(row) if isinstance(row, str) else row
    result = Inspection(row.name, threads_per_block)
    target = row.target
    if not isinstance(target, JitRow):
        result.notes.append(f"{row.name} is a {row.backend} row: build facts are kept for fast-path JIT rows only"
                            + (" (a Triton kernel's n_regs / n_spills exist after a launch on a GPU)"
                               if row.backend == "triton" else ""))
        return result
    if target.not_built is not None:
        result.notes.append(f"{row.name} was not built on this machine: {target.not_built}")
        return result
    from rapid_llm.kernels import jit

    built = jit.build_jit(target.source.stem, target.source, extra_cuda_cflags=target.flags)
    facts = buildfacts.read_facts(built.build_dir / buildfacts.FACTS_FILE)
    if facts is None:
        result.notes.append(f"{row.name} was built by the {built.builder} builder, which keeps no build facts "
                            "(the fast path does: a source without torch headers)")
        return result
    result.facts = facts
    ptx = built.build_dir / "kernels.ptx"
    result.ptx = ptx.read_text() if ptx.exists() else None
    if result.ptx is None:
        result.notes.append("PTX: kept by the NVRTC device pass only; this build used nvcc")
    result.sass, missing = sass_of(built.build_dir / "kernels.cubin")
    if missing:
        result.notes.append(missing)
    result.notes += [f"notable: {n}" for n in buildfacts.notable(facts, threads_per_block)]
    return result


def sass_of(cubin: Path) -> tuple[str | None, str | None]:
    """(SASS listing of ``cubin``, None) or (None, one line saying why there is none)."""
    for tool, args in (("cuobjdump", ["-sass"]), ("nvdisasm", ["-c", "-g"])):
        exe = shutil.which(tool)
        if exe is None:
            continue
        proc = subprocess.run([exe, *args, str(cubin)], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout, None
    return None, ("SASS: neither nvdisasm nor cuobjdump is installed here (both ship with the CUDA toolkit, "
                  "beside nvcc)")


_PTX_ENTRY = re.compile(r"^\.(?:visible|weak) \.entry (\S+?)\(", re.M)
_SASS_FUNCTION = re.compile(r"^\s*(?:Function : |\.text\.)(\S+?):?\s*$", re.M)


def split_by_kernel(text: str, kind: str) -> dict[str, str]:
    """A PTX or SASS listing cut into one piece per kernel, keyed by the kernel's symbol."""
    pattern = _PTX_ENTRY if kind == "ptx" else _SASS_FUNCTION
    starts = [(m.start(), m[1]) for m in pattern.finditer(text)]
    return {name: text[a:b] for (a, name), (b, _) in zip(starts, starts[1:] + [(len(text), "")])}
