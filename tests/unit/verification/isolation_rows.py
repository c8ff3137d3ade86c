"""Rows for the child-process tests: one that takes its process down, one that never returns, one that works."""
from __future__ import annotations

import os
import time

import torch


def aborts(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Stands in for an illegal address: the process dies on the first call."""
    os.abort()


def hangs(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Stands in for a kernel that never ends."""
    while True:
        time.sleep(1)


def works(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    return torch.mul(input, factor, out=out)
