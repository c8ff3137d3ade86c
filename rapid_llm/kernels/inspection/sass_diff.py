"""What changed in a kernel's machine code, without the noise of a rebuild.

Two builds of the same source can list different SASS text: ptxas numbers
registers differently, labels get other numbers and move, cuobjdump prints
absolute branch targets and the encodings beside each instruction, and a
``-lineinfo`` build names source lines that shift when a comment is added.
None of that is a change in what the GPU runs, so :func:`normalize` reduces a
listing (cuobjdump's or nvdisasm's) to one entry per instruction:

* addresses, encodings, comments, directives and label lines dropped;
* ``.reuse`` operand-cache hints dropped (they follow register allocation);
* branch, call and convergence-barrier targets (``BRA `(.L_x_3)``,
  cuobjdump's ``BRA 0x220``) named by order of first use, and the return
  address a ``MOV`` loads before a ``CALL``, made symbolic;
* registers (``R``, ``UR``, ``P``, ``UP``, ``B``) numbered by order of first
  appearance, so a consistent renaming gives the same text;
* the source line (and a ``%%cuda_jit`` cell's line) kept beside each
  instruction, but never compared.

:func:`diff` aligns two listings on their instructions with each register
reduced to its class (so a renaming that is not a consistent permutation,
typical of a real rebuild, does not shift the alignment), reports the
inserted, deleted and replaced instructions with the lines they came from,
and separately counts instructions whose operands only differ in register
numbering (a change of data flow, or a reallocation).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

__all__ = ["Instruction", "SassDiff", "Hunk", "normalize", "diff"]


@dataclass(frozen=True)
class Instruction:
    """One instruction, normalised: ``text`` (registers renumbered), ``shape`` (registers as their class only)."""

    text: str
    shape: str
    line: int | None = None       # source line, from -lineinfo's ``//## File ..., line N``
    cell_line: int | None = None  # the same line in a %%cuda_jit cell, where the listing was annotated

    @property
    def where(self) -> str:
        if self.cell_line is not None:
            return f"cell line {self.cell_line}"
        return "" if self.line is None else f"line {self.line}"


_ADDRESS = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*")
_ENCODING = re.compile(r"/\*\s*0x[0-9a-f]+\s*\*/")
_LINE_NOTE = re.compile(r'//## File "[^"]*", line (\d+)(?:.*?\(cell line (\d+)\))?')
_REGISTER = re.compile(r"\b(UR|UP|R|P|B)(\d+)\b")
_REUSE = re.compile(r"\.reuse\b")
#: opcodes whose last operand is a code address: branches, calls, convergence barriers
_TARGETED = re.compile(r"^(?:@!?U?P\w+\s+)?(BRA|BRX|JMP|JMX|CALL|BSSY|SSY|PBK|PCNT|BREAK|JCAL)\b")
_LABEL_REF = re.compile(r"`\((\.?L\w+)\)")
_HEX_TARGET = re.compile(r"\b0x([0-9a-f]+)\s*$")
_CALL = re.compile(r"^(?:@!?U?P\w+\s+)?CALL\b")
_MOV_IMM = re.compile(r"^((?:@!?U?P\w+\s+)?MOV\s+R\w*,\s*)0x[0-9a-f]+$")


def _strip(line: str) -> tuple[str, str | None]:
    """(instruction text, or "" for a non-instruction line; a line-note line's raw text, else None)."""
    if "//##" in line:
        return "", line
    if not _ADDRESS.match(line):
        return "", None
    text = _ENCODING.sub("", _ADDRESS.sub("", line)).strip()
    text = text.rstrip(";").strip()
    return _REUSE.sub("", text), None


def normalize(listing: str) -> list[Instruction]:
    """The instructions of one kernel's listing (or several: they are concatenated), as described above."""
    raw: list[tuple[str, int | None, int | None]] = []
    line: int | None = None
    cell: int | None = None
    for row in listing.splitlines():
        text, note = _strip(row)
        if note is not None:
            m = _LINE_NOTE.search(note)
            if m:
                line, cell = int(m[1]), (int(m[2]) if m[2] else None)
            continue
        if text:
            raw.append((text, line, cell))
    targets: dict[str, str] = {}
    registers: dict[str, str] = {}
    out: list[Instruction] = []
    counts: dict[str, int] = {}

    def number(m: re.Match) -> str:
        if m[0] not in registers:
            registers[m[0]] = f"{m[1]}{counts.get(m[1], 0)}"
            counts[m[1]] = counts.get(m[1], 0) + 1
        return registers[m[0]]

    for i, (text, line, cell) in enumerate(raw):
        text = _symbolic_targets(text, targets)
        if i + 1 < len(raw) and _CALL.match(raw[i + 1][0]):  # the return address a call is given: code moves it
            text = _MOV_IMM.sub(r"\1<return>", text)
        out.append(Instruction(_REGISTER.sub(number, text), _REGISTER.sub(lambda m: m[1], text), line, cell))
    return out


def _symbolic_targets(text: str, targets: dict[str, str]) -> str:
    def name(key: str) -> str:
        return targets.setdefault(key, f"<L{len(targets)}>")

    text = _LABEL_REF.sub(lambda m: name(m[1]), text)
    if _TARGETED.match(text):
        text = _HEX_TARGET.sub(lambda m: name(hex(int(m[1], 16))), text)
    return text


# ---------------------------------------------------------------- the diff


@dataclass(frozen=True)
class Hunk:
    """A run of instructions that differ: those of A replaced by those of B (either side may be empty)."""

    removed: tuple[Instruction, ...]
    added: tuple[Instruction, ...]

    def where(self) -> str:
        """The source lines the change sits at, B's first (that is the code a reader edits)."""
        def lines(side: tuple[Instruction, ...]) -> str:
            spots = list(dict.fromkeys(i.where for i in side if i.where))
            return ", ".join(spots[:4]) + (", ..." if len(spots) > 4 else "")

        b, a = lines(self.added), lines(self.removed)
        return "; ".join(p for p in (f"B {b}" if b else "", f"A {a}" if a else "") if p)


@dataclass(frozen=True)
class SassDiff:
    """The difference between one kernel's SASS in two builds."""

    kernel: str
    a_count: int
    b_count: int
    hunks: tuple[Hunk, ...] = ()
    #: instructions aligned as equal whose registers differ beyond a consistent renaming
    register_changes: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def empty(self) -> bool:
        """No instruction differs (register renaming and label moves are not differences)."""
        return not self.hunks

    @property
    def added(self) -> int:
        return sum(len(h.added) for h in self.hunks)

    @property
    def removed(self) -> int:
        return sum(len(h.removed) for h in self.hunks)

    def cell_lines(self) -> list[int]:
        """B's cell lines (else source lines) of the changed instructions, in order: where to look."""
        seen: dict[int, None] = {}
        for h in self.hunks:
            for i in h.added or h.removed:
                where = i.cell_line if i.cell_line is not None else i.line
                if where is not None:
                    seen.setdefault(where)
        return list(seen)

    def summary(self) -> str:
        if self.empty:
            rest = (f"; {self.register_changes} instructions use registers differently"
                    if self.register_changes else "")
            return f"{self.kernel}: same {self.a_count} instructions{rest}"
        return (f"{self.kernel}: {self.a_count} -> {self.b_count} instructions, {self.removed} removed and "
                f"{self.added} added in {len(self.hunks)} places"
                + (f", {self.register_changes} more use registers differently" if self.register_changes else ""))

    def text(self, max_hunks: int = 20) -> str:
        """A unified-diff-like listing: ``-`` A's instruction, ``+`` B's, each with its source line."""
        lines = [self.summary(), *self.notes]
        for k, h in enumerate(self.hunks[:max_hunks]):
            where = h.where()
            lines.append(f"@@ change {k + 1}" + (f" at {where}" if where else "") + " @@")
            lines += [f"- {i.text}" + (f"    [{i.where}]" if i.where else "") for i in h.removed]
            lines += [f"+ {i.text}" + (f"    [{i.where}]" if i.where else "") for i in h.added]
        if len(self.hunks) > max_hunks:
            lines.append(f"... {len(self.hunks) - max_hunks} more changes")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def diff(a: str | list[Instruction], b: str | list[Instruction], kernel: str = "") -> SassDiff:
    """Compare two listings of one kernel (text, or what :func:`normalize` made of it)."""
    ia = normalize(a) if isinstance(a, str) else list(a)
    ib = normalize(b) if isinstance(b, str) else list(b)
    matcher = difflib.SequenceMatcher(None, [i.shape for i in ia], [i.shape for i in ib], autojunk=False)
    hunks: list[Hunk] = []
    aligned: list[tuple[Instruction, Instruction]] = []
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            aligned += list(zip(ia[a0:a1], ib[b0:b1]))
        else:
            hunks.append(Hunk(tuple(ia[a0:a1]), tuple(ib[b0:b1])))
    return SassDiff(kernel, len(ia), len(ib), tuple(hunks), _register_changes(aligned))


def _register_changes(aligned: list[tuple[Instruction, Instruction]]) -> int:
    """Aligned pairs whose registers do not follow one consistent renaming of A's into B's."""
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}
    changed = 0
    for x, y in aligned:
        ra, rb = _REGISTER.findall(x.text), _REGISTER.findall(y.text)
        ok = len(ra) == len(rb)
        for p, q in zip(ra, rb):
            p, q = "".join(p), "".join(q)
            if forward.setdefault(p, q) != q or backward.setdefault(q, p) != p:
                ok = False
        changed += not ok
    return changed
