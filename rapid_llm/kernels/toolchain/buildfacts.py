"""What the compiler decided about each kernel, and the occupancy that follows from it.

The fast path's device pass runs ptxas verbose (NVRTC ``--ptxas-options=-v``,
nvcc ``-Xptxas=-v``); its report per kernel (registers, barriers, static
shared memory, stack frame, spill stores and loads) is parsed here and kept
beside the build as ``build_facts.json``, so a cached build knows it too.
Theoretical occupancy is computed from those facts and a block size with
the CUDA occupancy rules of the target architecture.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["KernelFacts", "Occupancy", "parse_ptxas", "occupancy", "notable", "write_facts", "read_facts",
           "FACTS_FILE", "SM_LIMITS"]

FACTS_FILE = "build_facts.json"


@dataclass(frozen=True)
class KernelFacts:
    """ptxas's report on one kernel."""

    symbol: str
    name: str = ""           # the C++ spelling, where the builder knows it
    arch: str = ""
    registers: int = 0       # per thread
    barriers: int = 0
    smem_static: int = 0     # bytes per block, without dynamic shared memory
    stack_frame: int = 0     # bytes of local memory per thread
    spill_stores: int = 0    # bytes per thread
    spill_loads: int = 0
    cmem: int = 0            # bytes of the kernel's constant bank (parameters included)
    threads_per_block: int = 0  # the block size it launches with, where the compiler fixes it (Triton: warps x 32)
    max_threads: int = 0     # the largest block it may launch with, where known (the driver, Triton); 0: unknown

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads

    @property
    def label(self) -> str:
        return self.name or self.symbol


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?(?:, (\d+) bytes cmem\[0\])?")


def parse_ptxas(log: str, names: dict[str, str] | None = None) -> dict[str, KernelFacts]:
    """Per-kernel facts from ptxas's verbose report (as NVRTC's program log or nvcc's stderr writes it)."""
    found: dict[str, dict] = {}
    current: str | None = None
    for line in log.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            current = entry[1]
            found.setdefault(current, {"symbol": current})["arch"] = entry[2]
            continue
        props = _PROPS.search(line)
        if props:
            current = props[1]
            found.setdefault(current, {"symbol": current})
            continue
        if current is None:
            continue
        frame = _FRAME.search(line)
        if frame:
            found[current].update(stack_frame=int(frame[1]), spill_stores=int(frame[2]), spill_loads=int(frame[3]))
            continue
        used = _USED.search(line)
        if used:
            found[current].update(registers=int(used[1]), barriers=int(used[2] or 0), smem_static=int(used[3] or 0),
                                  cmem=int(used[4] or 0))
    names = names or {}
    return {s: KernelFacts(name=names.get(s, ""), **fields) for s, fields in found.items()}


def write_facts(path: Path, facts: dict[str, KernelFacts]) -> None:
    path.write_text(json.dumps({s: asdict(f) for s, f in facts.items()}, indent=1))


def read_facts(path: Path) -> dict[str, KernelFacts] | None:
    """The facts kept beside a build, or None where that build kept none."""
    try:
        return {s: KernelFacts(**f) for s, f in json.loads(path.read_text()).items()}
    except (OSError, ValueError, TypeError):
        return None


# ------------------------------------------------------------------ occupancy


@dataclass(frozen=True)
class _Limits:
    warps: int              # resident warps per SM
    blocks: int             # resident blocks per SM
    registers: int          # 32-bit registers per SM
    register_unit: int      # registers are allocated per warp in units of this many
    max_registers: int      # per thread
    smem: int               # bytes of shared memory per SM usable by blocks
    smem_per_block_reserved: int


#: Per-SM limits from NVIDIA's CUDA occupancy rules (compute capability tables of the CUDA C++ guide).
SM_LIMITS = {
    "sm_80": _Limits(64, 32, 65536, 256, 255, 167936, 1024),
    "sm_86": _Limits(48, 16, 65536, 256, 255, 102400, 1024),
    "sm_89": _Limits(48, 24, 65536, 256, 255, 102400, 1024),
    "sm_90": _Limits(64, 32, 65536, 256, 255, 233472, 1024),
}


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM for one kernel at one block size, and what limits them."""

    threads_per_block: int
    blocks_per_sm: int
    warps_per_sm: int
    max_warps: int
    limiter: str

    @property
    def fraction(self) -> float:
        return self.warps_per_sm / self.max_warps

    def __str__(self) -> str:
        return (f"{100 * self.fraction:.0f}% occupancy at {self.threads_per_block} threads per block "
                f"({self.blocks_per_sm} blocks, {self.warps_per_sm} of {self.max_warps} warps per SM; "
                f"limited by {self.limiter})")


def occupancy(facts: KernelFacts, threads_per_block: int, dynamic_smem: int = 0, arch: str | None = None) -> Occupancy:
    """Theoretical occupancy of ``facts``'s kernel launched with ``threads_per_block`` threads."""
    arch = arch or facts.arch or "sm_90"
    base = re.match(r"sm_\d+", arch)
    lim = SM_LIMITS.get(base[0] if base else arch)  # sm_90a has sm_90's limits
    if lim is None:
        raise ValueError(f"no occupancy limits for {arch}; known: {', '.join(SM_LIMITS)}")
    if not 1 <= threads_per_block <= 1024:
        raise ValueError(f"threads per block must be 1..1024, got {threads_per_block}")
    warps = math.ceil(threads_per_block / 32)
    by = {"warps": lim.warps // warps, "blocks": lim.blocks}
    if facts.registers:
        per_warp = math.ceil(facts.registers * 32 / lim.register_unit) * lim.register_unit
        by["registers"] = lim.registers // (per_warp * warps)
    smem = facts.smem_static + dynamic_smem
    if smem:
        by["shared memory"] = lim.smem // (smem + lim.smem_per_block_reserved)
    limiter = min(by, key=lambda k: (by[k], k != "warps"))
    blocks = max(0, by[limiter])
    return Occupancy(threads_per_block, blocks, blocks * warps, lim.warps, limiter)


def notable(facts: dict[str, KernelFacts], threads_per_block: int = 256) -> list[str]:
    """What a kernel author should hear at once: spills, local memory, and occupancy below 50 %."""
    out = []
    for f in facts.values():
        if f.spills:
            out.append(f"{f.label}: {f.spill_stores} B spill stores, {f.spill_loads} B spill loads per thread")
        try:
            occ = occupancy(f, f.threads_per_block or threads_per_block)
        except ValueError:
            continue
        if occ.fraction < 0.5:
            out.append(f"{f.label}: {occ}")
    return out
