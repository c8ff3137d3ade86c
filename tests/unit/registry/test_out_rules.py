"""The out rules: what a call without ``out`` gets, read back off a native result, and the C codes agree."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.registry.out_rules import OUT_RULES, make_out, rule_of

FASTCALL_DISPATCH = Path(__file__).resolve().parents[3] / "rapid_llm" / "kernels" / "dispatch" / "fastcall_dispatch.inc"


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 4097), (2, 5, 8)])
@pytest.mark.parametrize("rule", ["like_input", "half_last_dim", "none"])
def test_make_out_follows_its_rule_and_rule_of_reads_it_back(rule, shape):
    x = torch.randn(shape)
    if rule == "half_last_dim" and shape[-1] % 2:
        with pytest.raises(ValueError, match=r"gate: the input's last dim must be even \(\[\.\.\., 2I\]\)"):
            make_out(rule, x, "gate")
        return
    out = make_out(rule, x, "gate")
    if rule == "none":
        assert out is None
    else:
        expected = shape if rule == "like_input" else (*shape[:-1], shape[-1] // 2)
        assert tuple(out.shape) == expected and out.dtype == x.dtype and out.is_contiguous()
    assert rule_of(out, x) == ("like_input" if rule == "half_last_dim" and shape[-1] == 0 else rule)


def test_rule_of_names_no_rule_for_another_dtype_or_shape():
    x = torch.randn(4, 6)
    assert rule_of(x.to(torch.float64), x) is None and rule_of(torch.empty(5), x) is None
    with pytest.raises(ValueError, match="out must be one of like_input, half_last_dim, none"):
        make_out("twice", x)


def test_the_c_call_path_uses_the_same_codes():
    codes = dict(re.findall(r"RL_OUT_(\w+) = (\d)", FASTCALL_DISPATCH.read_text()))
    assert {name.lower(): int(code) for name, code in codes.items()} == OUT_RULES
