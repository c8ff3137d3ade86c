"""rapid_llm_abi.h's dtype names are the Python side's (platform.DTYPE_NAMES): one spelling per dtype.

The C side names dtypes only in messages ("dtype fp8e4m3 is not supported"); a
name there that Python spells otherwise would send a reader looking for a
dtype no row declares.
"""
from __future__ import annotations

import re

import pytest
import torch

from rapid_llm.kernels import platform

HEADER = platform.CUDA_INCLUDE / "common" / "rapid_llm_abi.h"


def _c_dtype_names() -> list[str]:
    return re.findall(r'X\(RL_\w+, \d+, "(\w+)"\)', HEADER.read_text())


def test_the_header_lists_the_dtypes():
    assert {"fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2"} <= set(_c_dtype_names())


@pytest.mark.parametrize("name", _c_dtype_names())
def test_each_c_name_is_pythons_or_one_python_lacks(name):
    if name in platform.DTYPE_NAMES:
        return
    # A dtype rows never name (int16, uint8): torch's own name, and Python has no other spelling for it.
    with pytest.raises(ValueError, match="has no short name"):
        platform.dtype_name(getattr(torch, name))
