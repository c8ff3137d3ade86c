"""How a row that is called out-first gets its ``out``: the one owner of the out rules.

A JIT row's launcher is ``fn(out, input, *args)``; the op's caller passes
``out=`` or not, and the rule says what to allocate when not:

- ``like_input``: a contiguous tensor shaped and typed like the input (the default);
- ``half_last_dim``: the input's shape with its last dimension halved (a gated
  activation's ``[T, 2I] -> [T, I]``);
- ``none``: nothing; the op works in place on its arguments (``fn(*args)``) and returns None.

The same rule gives a custom op's fake (meta) output under torch.compile, and
``rule_of`` reads it back off a native row's result. The numbers are the codes
fastcall's C ``OutFirst`` takes for the same rules.
"""
from __future__ import annotations

from typing import Any

__all__ = ["OUT_RULES", "DEFAULT", "make_out", "rule_of"]

#: rule -> fastcall's OutFirst code.
OUT_RULES = {"like_input": 0, "half_last_dim": 1, "none": 2}
DEFAULT = "like_input"


def make_out(rule: str, input: Any, name: str = "op") -> Any:
    """The ``out`` a call without one gets (None for ``none``); ValueError naming ``name`` for an input the rule
    cannot halve."""
    import torch

    if rule == "none":
        return None
    if rule == "half_last_dim":
        if input.dim() == 0 or input.shape[-1] % 2:
            raise ValueError(f"{name}: the input's last dim must be even ([..., 2I]), got {list(input.shape)}")
        return input.new_empty((*input.shape[:-1], input.shape[-1] // 2))
    if rule == "like_input":
        return torch.empty_like(input, memory_format=torch.contiguous_format)
    raise ValueError(f"{name}: out must be one of {', '.join(OUT_RULES)}, got {rule!r}")


def rule_of(result: Any, input: Any) -> str | None:
    """The out rule a native row's ``result`` for ``input`` follows, or None where no rule describes it."""
    import torch

    if result is None:
        return "none"
    if not isinstance(result, torch.Tensor) or not isinstance(input, torch.Tensor) or result.dtype != input.dtype:
        return None
    if tuple(result.shape) == tuple(input.shape):
        return "like_input"
    if input.dim() and input.shape[-1] % 2 == 0 and tuple(result.shape) == (*input.shape[:-1], input.shape[-1] // 2):
        return "half_last_dim"
    return None
