"""The SASS normaliser: a rebuild that only renames registers, renumbers or moves labels, or shifts source
lines diffs empty; a real change does not, and says where."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from rapid_llm.kernels.inspection.sass_diff import diff, normalize

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "sass_diff"


def _read(name: str) -> str:
    return (SAMPLES / name).read_text()


def _rename_registers(text: str) -> str:
    """Every R register renamed by one permutation (R1 <-> R7, R2 -> R40 ...), as a rebuild may number them."""
    def swap(m: re.Match) -> str:
        n = int(m[1])
        return f"R{(n * 7 + 3) % 61}"

    return re.sub(r"\bR(\d+)\b", swap, text)


def _move_labels_and_addresses(text: str) -> str:
    """Labels renumbered and every address shifted by 0x40, as when code ahead of the kernel changes."""
    text = re.sub(r"\.L_x_(\d+)", lambda m: f".L_x_{int(m[1]) + 17}", text)
    shift = lambda m: f"{m[1]}{int(m[2], 16) + 0x40:04x}{m[3]}"  # noqa: E731
    text = re.sub(r"(/\*)([0-9a-f]{4})(\*/)", shift, text)
    return re.sub(r"\b(BRA|BSSY B\d+,|CALL\.REL\.NOINC|MOV R\d+,) 0x([0-9a-f]+)",
                  lambda m: f"{m[1]} 0x{int(m[2], 16) + 0x40:x}", text)


@pytest.mark.parametrize("listing", ["scale_loop_nvdisasm.sass", "scale_loop_cuobjdump.sass"])
def test_a_rebuild_with_renamed_registers_and_moved_labels_diffs_empty(listing):
    a = _read(listing)
    b = _move_labels_and_addresses(_rename_registers(a))
    assert b != a
    d = diff(a, b, "scale_kernel<float>")
    assert d.empty and d.register_changes == 0, d.text()
    assert d.a_count == d.b_count > 100
    assert "same" in d.summary()


def test_the_same_code_at_other_source_lines_diffs_empty():
    d = diff(_read("scale_loop_nvdisasm.sass"), _read("scale_loop_moved_nvdisasm.sass"))
    assert d.empty and d.register_changes == 0, d.text()


@pytest.mark.parametrize("tool", ["nvdisasm", "cuobjdump"])
def test_a_real_change_is_shown(tool):
    d = diff(_read(f"scale_loop_{tool}.sass"), _read(f"scale_loop_plus_one_{tool}.sass"), "scale_kernel<float>")
    assert not d.empty
    added = [i.text.split()[0] for h in d.hunks for i in h.added]
    removed = [i.text.split()[0] for h in d.hunks for i in h.removed]
    assert "FFMA" in added and "FMUL" in removed  # x * f became x * f + 1
    assert d.summary().startswith("scale_kernel<float>: 224 -> 224 instructions")
    if tool == "nvdisasm":  # -lineinfo: the change sits at the kernel's line 5 (the multiply)
        assert 5 in d.cell_lines()
        assert "[line 5]" in d.text()


def test_normalize_drops_addresses_encodings_and_reuse_and_names_targets():
    listing = """
        /*0100*/                   IMAD R13, R7.reuse, UR6, RZ ;                        /* 0x0000000607 */
        /*0110*/              @!P0 BRA 0x220 ;                                          /* 0x00000000001 */
        /*0120*/                   MOV R6, 0x1f0 ;                                      /* 0x000001f000 */
        /*0130*/                   CALL.REL.NOINC 0x910 ;                               /* 0x0000000400 */
        /*0140*/                   BRA 0x220 ;
"""
    got = [i.text for i in normalize(listing)]
    assert got == ["IMAD R0, R1, UR0, RZ", "@!P0 BRA <L0>", "MOV R2, <return>", "CALL.REL.NOINC <L1>", "BRA <L0>"]


def test_cell_lines_are_read_from_annotated_listings():
    listing = """
	//## File "/x/csrc/elementwise/scale_lines.cu", line 9 (cell line 10)
        /*0060*/                   ULDC.64 UR4, c[0x0][0x228] ;
	//## File "/x/csrc/elementwise/scale_lines.cu", line 12
        /*0070*/                   EXIT ;
"""
    ins = normalize(listing)
    assert (ins[0].line, ins[0].cell_line, ins[0].where) == (9, 10, "cell line 10")
    assert (ins[1].line, ins[1].cell_line, ins[1].where) == (12, None, "line 12")


def test_a_register_swap_inside_equal_instructions_is_counted():
    a = "        /*0000*/ IADD3 R1, R2, R3, RZ ;\n        /*0010*/ FMUL R4, R1, R2 ;\n"
    b = "        /*0000*/ IADD3 R1, R2, R3, RZ ;\n        /*0010*/ FMUL R4, R1, R3 ;\n"
    d = diff(a, b)
    assert d.empty and d.register_changes == 1
    assert "use registers differently" in d.summary()
