"""Which rows a test exercises on this machine: the device the suite runs rows on, and an op's rows that run there
(the registry's devices and probes). A test collects these rather than every row to skip: a row that cannot run
here is skipped once, with its reason, by tests/contract/test_rows.py."""
from __future__ import annotations

import torch

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec

#: CUDA when there is one, else the CPU (Triton rows in the interpreter); the ``device`` fixture's answer.
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def runnable_rows(op: str, device: str | torch.device = DEVICE) -> list[KernelSpec]:
    """The rows of ``op`` that run on ``device`` here, in the registry's order."""
    device = torch.device(device)
    return [row for row in spec.rows_for(op) if device.type in row.devices and row.probe(device)]
