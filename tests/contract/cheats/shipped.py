"""The shipped rows under the cheat checks, for tests/contract/test_cheats.py (CPU, one seed) and
tests/gpu/contract/test_cheats.py (a GPU, and the other seeds): every row of an op that runs on a device,
verified, or timed with bench's integrity checks on (new content every call, checked calls, the memo probe)."""
from __future__ import annotations

import zlib
from typing import Sequence

import pytest

from rapid_llm.bench import bench
from rapid_llm.kernels import platform
from rapid_llm.kernels.verification.golden import verify
from tests.rows import runnable_rows

#: The dtypes each row is timed in, where it takes them.
BENCH_DTYPES = ("fp32", "bf16")
#: The dtypes CPU CI runs a Triton row in, through Triton's interpreter: its half dtypes are numpy's, not a GPU's
#: (tests/contract/test_rows.py says why), and each costs as much interpreter time as fp32. The GPU suite runs
#: every dtype.
INTERPRETED_DTYPES = ("fp32",)


def shift_verify_seeds(monkeypatch: pytest.MonkeyPatch, seed_offset: int) -> None:
    """verify seeds its cases from crc32 of the op and dtype: shift them, for cases no other run draws."""
    crc32 = zlib.crc32
    monkeypatch.setattr(zlib, "crc32", lambda data: crc32(data) + 1000 * seed_offset)


def verify_every_row(op: str, device: str) -> int:
    """verify each row of ``op`` that runs on ``device``; each must pass with no defect. How many ran."""
    checked = 0
    for row in runnable_rows(op, device):
        report = verify(row.name, device=device, record=False, sizes=(1, 4097))
        assert report.passed and report.defects == (), str(report)
        checked += 1
    return checked


def bench_every_row(op: str, device: str, numels: Sequence[int], *, warmup: int, repeats: int,
                    paired: bool = False) -> int:
    """Time each row of ``op`` that runs on ``device`` at each of ``numels``, in fp32 and bf16 where it takes
    them, with the op's floor as the reference of the checked calls; bench refuses (raises) a row it catches.
    With ``paired``, each dtype at one of ``numels`` in turn (fp32 at the first, bf16 at the second): a row still
    meets both dtypes and both sizes, in half the calls. A Triton row on CPU (Triton's interpreter) is timed in
    ``INTERPRETED_DTYPES`` only, as test_rows verifies it. How many calls of bench there were."""
    from rapid_llm.bench.ops import floor_call, make_args

    timed = 0
    for row in runnable_rows(op, device):
        interpreted = row.backend == "triton" and device == "cpu"
        dtypes = [dtype for dtype in BENCH_DTYPES if dtype in row.dtypes
                  and (not interpreted or dtype in INTERPRETED_DTYPES)]
        cases = ([(dtype, numels[i % len(numels)]) for i, dtype in enumerate(dtypes)] if paired
                 else [(dtype, numel) for dtype in dtypes for numel in numels])
        for dtype, numel in cases:
            case = make_args(op, numel, platform.torch_dtype(dtype), device)
            bench(row.call_path(), *case.args, warmup=warmup, repeats=repeats, reference=floor_call(op),
                  label=f"{row.name} {dtype} numel={numel}", **case.kwargs)
            timed += 1
    return timed


def graph_every_row(op: str, numels: Sequence[int], *, warmup: int, repeats: int) -> int:
    """Time each graph-safe row of ``op`` on CUDA from a graph of back-to-back calls under plain launches, as
    bench_op times the graph figure dispatch ranks by (rapid_llm.bench.ops._graph_us); bench refuses (raises) a
    graph whose calls overlap one another (dependent_overlap). How many calls of bench there were."""
    from rapid_llm.bench.ops import make_args
    from rapid_llm.kernels.toolchain.fastpath.binding import plain_launches

    timed = 0
    for row in runnable_rows(op, "cuda"):
        if not row.graph_safe:
            continue
        for numel in numels:
            case = make_args(op, numel, platform.torch_dtype("bf16"), "cuda")
            with plain_launches():
                bench(row.call_path(), *case.args, bytes_moved=case.bytes_moved, graph=True, warmup=warmup,
                      repeats=repeats, integrity=False, label=f"{row.name} (graph) numel={numel}", **case.kwargs)
            timed += 1
    return timed
