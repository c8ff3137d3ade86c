"""``inspect(row)``: what the compiler made of a row's kernels, beside the row.

For a JIT row built on the fast path: registers, spills, static shared and
local memory per kernel (ptxas's report, kept with the build), the
theoretical occupancy at a block size, the PTX (NVRTC's), and the SASS where
``cuobjdump`` or ``nvdisasm`` is installed (with source lines when the row
was built with ``-lineinfo``). For a Triton or Gluon row: the same facts of
each specialisation Triton compiled (rapid_llm.kernels.inspection.triton_facts), at
the block size Triton launches it with, and Triton's GPU IR (``ttgir``: for a
Gluon kernel, its layouts as written). For a CuTe DSL row: the facts of its builds at the op's bench shape,
read from their cubins, with the PTX and SASS. Where a GPU is present, each occupancy
is also asked of the CUDA driver (rapid_llm.kernels.inspection.occupancy_api), and a
disagreement is said. Rows built otherwise say what is not known about
them, in one line each.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rapid_llm.kernels.toolchain import buildfacts, cell_lines
from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain.buildfacts import KernelFacts, Occupancy

__all__ = ["Inspection", "inspect", "sass_of", "split_by_kernel", "annotate_cell_lines"]


@dataclass
class Inspection:
    """Build facts, occupancy and code of one row's kernels."""

    row: str
    threads_per_block: int
    facts: dict[str, KernelFacts] = field(default_factory=dict)
    ptx: str | None = None
    sass: str | None = None
    notes: list[str] = field(default_factory=list)
    #: per kernel and kind ("sass", "ptx"): code kept apart where one listing cannot be split by symbol
    #: (a Triton kernel's specialisations share one name)
    kernel_code: dict[str, dict[str, str]] = field(default_factory=dict)
    #: per kernel: resident blocks per SM as the CUDA driver computes it, where a GPU was there to ask
    driver_blocks: dict[str, int] = field(default_factory=dict)

    def block_size(self, symbol: str) -> int:
        """The block size a kernel's occupancy is given at: its own where the compiler fixes it."""
        return self.facts[symbol].threads_per_block or self.threads_per_block

    def occupancy(self, symbol: str) -> Occupancy | None:
        try:
            return buildfacts.occupancy(self.facts[symbol], self.block_size(symbol))
        except ValueError:
            return None

    def kernels(self) -> list[str]:
        return list(self.facts)

    def code(self, symbol: str, kind: str = "sass") -> str | None:
        """One kernel's SASS or PTX (the whole listing split at its kernels)."""
        if symbol in self.kernel_code:
            return self.kernel_code[symbol].get(kind)
        text = self.sass if kind == "sass" else self.ptx
        return None if text is None else split_by_kernel(text, kind).get(symbol)

    def rows(self) -> list[tuple[str, ...]]:
        out = []
        for symbol, f in self.facts.items():
            occ = self.occupancy(symbol)
            out.append((f.label, str(f.registers), f"{f.spill_stores}/{f.spill_loads}", str(f.smem_static),
                        str(f.stack_frame), str(f.max_threads or "-"), str(self.block_size(symbol)),
                        "-" if occ is None else f"{100 * occ.fraction:.0f}% ({occ.limiter})"))
        return out

    HEAD = ("kernel", "registers", "spill B st/ld", "static smem B", "stack B", "max block", "block", "occupancy")

    def __str__(self) -> str:
        fixed = self.facts and all(f.threads_per_block for f in self.facts.values())
        lines = [f"inspect({self.row!r}): {len(self.facts)} kernels; occupancy at "
                 + ("each kernel's own block size" if fixed else f"{self.threads_per_block} threads per block")]
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
    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.toolchain.jit_row import JitRow

    row = spec.get_row(row) if isinstance(row, str) else row
    result = Inspection(row.name, threads_per_block)
    target = row.target
    if row.backend in ("triton", "gluon") and (isinstance(target, str) or callable(target)):  # shipped, or a cell's
        _triton(row, result)
        return result
    if row.backend == "cute":
        _cute(row, result)
        return result
    if not isinstance(target, JitRow):
        result.notes.append(f"{row.name} is a {row.backend} row: build facts exist for JIT, Triton, Gluon and CuTe "
                            "rows")
        return result
    if target.not_built is not None:
        result.notes.append(f"{row.name} was not built on this machine: {target.not_built}")
        return result
    from rapid_llm.kernels.toolchain import jit

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
    cubin = built.build_dir / "kernels.cubin"
    lineinfo = any(f in ("-lineinfo", "--generate-line-info") for f in target.flags)
    result.sass, missing = sass_of(cubin, lineinfo=lineinfo)
    if result.sass is not None and lineinfo:
        result.sass = annotate_cell_lines(result.sass, Path(target.source))
    elif result.sass is not None:
        result.notes.append("SASS without source lines: build the row with -lineinfo "
                            "(%%cuda_jit ... --flags \"-lineinfo\") to see the source line of each block")
    if missing:
        result.notes.append(missing)
    result.notes += [f"notable: {n}" for n in buildfacts.notable(facts, threads_per_block)]
    if cubin.exists():
        image = cubin.read_bytes()
        _ask_the_driver(result, {s: (image, s, 0) for s in result.facts})
    return result


def _triton(row: Any, result: Inspection) -> None:
    """Facts of every specialisation Triton compiled for the row (a Gluon row's too: Triton compiles and keeps
    them alike); compiles the op's bench case if none is."""
    import os

    from rapid_llm.kernels.inspection import triton_facts

    if row.backend == "gluon":
        from rapid_llm.kernels.toolchain import gluon_support

        installed = gluon_support.installed()
        if not installed:  # the row's module imports Gluon: say why there is none instead
            result.notes.append(f"{row.name}: {installed.reason}")
            return
    if row.backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1":  # Gluon has no interpreter
        result.notes.append(f"{row.name}: Triton's interpreter runs it here (TRITON_INTERPRET=1), so nothing is "
                            "compiled and there are no build facts")
        return
    fns = triton_facts.jit_functions(row.target)
    compiled = [k for fn in fns for k in triton_facts.compiled_kernels(fn)]
    if not compiled:
        _compile_bench_case(row, result)
        compiled = [k for fn in fns for k in triton_facts.compiled_kernels(fn)]
    if not compiled:
        return
    result.facts = {k.facts.symbol: k.facts for k in compiled}
    sass, missing = _sass_by_kernel(compiled)
    result.kernel_code = {k.facts.symbol: {kind: text for kind, text in (("ptx", k.ptx), ("ttgir", k.ttgir),
                                                                          ("sass", sass.get(k.facts.symbol))) if text}
                          for k in compiled}
    result.ptx = "\n".join(k.ptx for k in compiled if k.ptx) or None
    result.sass = "\n".join(sass.values()) or None
    if missing:
        result.notes.append(missing)
    result.notes += [f"notable: {n}" for n in buildfacts.notable(result.facts)]
    # Triton's shared memory is dynamic: the driver is asked with it as the launch's dynamic size
    _ask_the_driver(result, {k.facts.symbol: (k.cubin, k.facts.symbol.partition("[")[0], k.facts.smem_static)
                             for k in compiled if k.cubin})


def _sass_by_kernel(kernels: list[Any]) -> tuple[dict[str, str], str | None]:
    """Each compiled Triton kernel's SASS (from its own cubin) by symbol, and why some are missing."""
    import tempfile

    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, k in enumerate(kernels):
            if not k.cubin:
                continue
            path = Path(tmp) / f"k{i}.cubin"
            path.write_bytes(k.cubin)
            text, missing = sass_of(path)
            if text is None:
                return out, missing
            out[k.facts.symbol] = text
    return out, None


def _cute(row: Any, result: Inspection) -> None:
    """A CuTe DSL row's builds, one per dtype, as its launcher names them (``cute_builds(dtype)``, the op's bench
    shape): from the cache, or compiled now (no GPU needed); their facts as the cubin states them, the PTX, the
    SASS where a disassembler is installed, and the driver's occupancy where a GPU is here."""
    from rapid_llm.kernels.toolchain import cute_build, cute_support

    fn = row.load()
    builds = getattr(fn, "cute_builds", None)
    if builds is None:
        result.notes.append(f"{row.name}: its launcher names no builds to inspect (give it an attribute "
                            "cute_builds(dtype) -> CuteBuild: a cute_launcher's build(...) for that dtype)")
        return
    ptx, images = [], {}
    for dtype in row.dtypes:
        build = builds(dtype)
        try:
            module, _ = cute_build.load(build)
        except ImportError:  # nothing cached, and no DSL to compile with
            result.notes.append(f"{row.name}: {cute_support.installed().reason or 'the CuTe DSL cannot be imported'}")
            return
        folder = Path(module.__file__).parent
        result.facts.update(module.__build_facts__)
        ptx.append((folder / "kernels.ptx").read_text())
        cubin = folder / "kernels.cubin"
        images.update({s: (cubin.read_bytes(), s, 0) for s in module.__build_facts__})
        sass, missing = sass_of(cubin)
        if sass is not None:
            result.sass = (result.sass or "") + sass
        elif missing not in result.notes:
            result.notes.append(missing)
    result.ptx = "\n".join(ptx)
    result.notes.append(f"the builds of {', '.join(row.dtypes)} at {row.op}'s bench shape (registers and stack frame "
                        "as the cubin states them: the DSL's ptxas prints no report)")
    result.notes += [f"notable: {n}" for n in buildfacts.notable(result.facts, result.threads_per_block)]
    _ask_the_driver(result, images)


def _compile_bench_case(row: Any, result: Inspection) -> None:
    """Triton compiles at a kernel's first launch: launch the row once on the op's bench case, per dtype."""
    import torch

    from rapid_llm.kernels.registry.opdecl import get_decl
    from rapid_llm.kernels.platform import torch_dtype

    if not torch.cuda.is_available() or "cuda" not in row.devices:
        result.notes.append(f"{row.name} has no compiled {row.backend.capitalize()} kernel in this process, and there "
                            "is no GPU here to compile one on (Triton compiles a kernel at its first launch)")
        return
    fn = row.load()
    for dtype in row.dtypes:
        case = get_decl(row.op).bench(4096, torch_dtype(dtype), torch.device("cuda"))
        fn(*case.args, **case.kwargs)
    torch.cuda.synchronize()
    result.notes.append(f"compiled by one launch per dtype on {row.op}'s bench case (4096 elements): "
                        f"{', '.join(row.dtypes)}")


def _ask_the_driver(result: Inspection, images: dict[str, tuple[bytes, str, int]]) -> None:
    """Check each computed occupancy against the CUDA driver's, where a GPU is here to ask.

    ``images``: per kernel, (its cubin, its symbol in that cubin, dynamic shared memory per block)."""
    from rapid_llm.kernels.inspection import occupancy_api

    if not images or not occupancy_api.available():
        return
    for symbol, (image, name, dynamic_smem) in images.items():
        answer = occupancy_api.ask(image, name, result.block_size(symbol), dynamic_smem)
        if answer is None:
            continue
        result.driver_blocks[symbol] = answer.blocks_per_sm
        result.facts[symbol] = replace(result.facts[symbol], max_threads=answer.max_threads_per_block)
        ours = result.occupancy(symbol)
        if ours is not None and ours.blocks_per_sm != answer.blocks_per_sm:
            result.notes.append(f"{result.facts[symbol].label}: the CUDA driver gives {answer.blocks_per_sm} blocks "
                                f"per SM at {result.block_size(symbol)} threads, the occupancy rules here "
                                f"{ours.blocks_per_sm}")


def sass_of(cubin: Path, lineinfo: bool = False) -> tuple[str | None, str | None]:
    """(SASS listing of ``cubin``, None) or (None, one line saying why there is none). With ``lineinfo`` (a
    build with -lineinfo) nvdisasm goes first: it prints the source line of each block; cuobjdump does not."""
    tools = [("cuobjdump", ["-sass"]), ("nvdisasm", ["-c", "-g"])]
    for tool, args in (reversed(tools) if lineinfo else tools):
        exe = platform.cuda_tool(tool)
        if exe is None:
            continue
        proc = subprocess.run([exe, *args, str(cubin)], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout, None
    return None, ("SASS: neither nvdisasm nor cuobjdump is installed here (both ship with the CUDA toolkit, "
                  "beside nvcc)")


_LINE_NOTE = re.compile(r'(//## File "([^"]+)", line (\d+))')


def annotate_cell_lines(sass: str, source: Path) -> str:
    """nvdisasm's ``//## File ".../name.cu", line 12`` gets ``(cell line 13)`` where the file is the row's cell."""
    def tell(m: re.Match) -> str:
        shown = cell_lines.where(Path(m[2]), int(m[3]), source)
        return m[1] + shown[shown.index(" ("):] if " (" in shown else m[1]

    return _LINE_NOTE.sub(tell, sass)


_PTX_ENTRY = re.compile(r"^\.(?:visible|weak) \.entry (\S+?)\(", re.M)
_SASS_FUNCTION = re.compile(r"^\s*(?:Function : (\S+)|//-+ \.text\.(\S+) -+|\.text\.(\S+?):)\s*$", re.M)


def split_by_kernel(text: str, kind: str) -> dict[str, str]:
    """A PTX or SASS listing cut into one piece per kernel, keyed by the kernel's symbol (cuobjdump's
    ``Function :`` headers; nvdisasm's ``//---- .text.NAME ----`` banner, or its ``.text.NAME:`` label)."""
    pattern = _PTX_ENTRY if kind == "ptx" else _SASS_FUNCTION
    starts: list[tuple[int, str]] = []
    for m in pattern.finditer(text):
        name = next(g for g in m.groups() if g)
        if not starts or starts[-1][1] != name:  # nvdisasm: a banner, then the label of the same kernel
            starts.append((m.start(), name))
    return {name: text[a:b] for (a, name), (b, _) in zip(starts, starts[1:] + [(len(text), "")])}
