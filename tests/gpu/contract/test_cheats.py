"""The cheat checks that need a GPU, or that a CPU run leaves to one: the persisting-L2 cheat caught by name, and
no verdict on a shipped row over every seed.

CPU CI (tests/contract/test_cheats.py) times each shipped row once, with one seed, at small sizes; verify's
first seed is tests/contract/test_rows.py's. Here the shipped rows are verified with the other two seeds and
timed with all three, at the full sizes and counts, on CUDA and on the CPU of the GPU machine.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.bench import BenchRefused, bench
from rapid_llm.bench.integrity import REFUSALS
from rapid_llm.kernels.registry import spec
from tests.contract.cheats import cheat_rows, shipped, shortcuts, tampering

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fresh_memos():
    cheat_rows.forget()
    shortcuts.forget()
    yield
    tampering.forget()


def _floor(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    return torch.mul(input, factor, out=out) if out is not None else input * factor


def test_bench_refuses_the_persisting_l2_cheat_by_name():
    fn, kind = "scale_with_persisting_l2", "persisting_l2"
    assert kind in REFUSALS
    x = torch.randn(1 << 16, device="cuda")
    with pytest.raises(BenchRefused) as caught:
        bench(getattr(cheat_rows, fn), x, 2.0, reference=_floor, label=fn)
    assert caught.value.kind == kind, str(caught.value)
    assert fn in str(caught.value) and kind in str(caught.value)


#: Cheats caught by name on CUDA tensors: the timer patches (Python and the runtime's code), the checker's.
CUDA_CHEATS = [(tampering, "scale_patching_event_timer", "timer_patched"),
               (tampering, "scale_patching_native_timer", "timer_patched"),
               (tampering, "scale_patching_the_reference", "checker_tampered"),
               (shortcuts, "scale_lazy_subclass", "lazy_result"),
               (shortcuts, "scale_skipping_at_random", "timed_output_wrong")]


@pytest.mark.parametrize("module, fn, kind", CUDA_CHEATS, ids=[c[1] for c in CUDA_CHEATS])
def test_bench_refuses_the_cuda_cheat_by_name(module, fn, kind):
    x = torch.randn(1 << 20, device="cuda")
    with pytest.raises(BenchRefused) as caught:
        bench(getattr(module, fn), x, 2.0, reference=_floor, label=fn)
    assert caught.value.kind == kind, str(caught.value)
    tampering.forget()  # the native patch stays until undone (every bench meanwhile is refused: the driver disagrees)
    result = bench(_floor, x, 2.0, reference=_floor, label="after it")
    assert result.median_us > 0


def _on_a_side_stream(input: torch.Tensor, factor: float) -> torch.Tensor:
    """Work launched where the caller's events do not wait for it."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        return input * factor


def test_a_figure_above_the_read_roofline_is_refused():
    """Without the checks (integrity=False) a row working off the current stream times as nothing: bench refuses
    the figure by the read roofline alone."""
    x = torch.randn(1 << 26, device="cuda")
    with pytest.raises(BenchRefused) as caught:
        bench(_on_a_side_stream, x, 2.0, bytes_moved=2 * x.numel() * 4, integrity=False, label="side stream")
    assert caught.value.kind == "above_roofline", str(caught.value)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("seed_offset", [1, 2])
def test_no_cheat_verdict_on_the_shipped_rows(seed_offset, device, monkeypatch):
    """0 false verdicts: every shipped row that runs on the device passes verify with no defect, over three seeds
    (the first is test_rows.py's run of every row; these are the other two)."""
    shipped.shift_verify_seeds(monkeypatch, seed_offset)
    assert shipped.verify_every_row(device), f"no shipped row runs on {device} here"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_bench_verdict_on_the_shipped_rows(seed, device):
    """0 false refusals: every shipped row that runs on the device is timed with fresh content, checked calls and
    the memo probe, three times over (the draws of checked calls and content are random each time). Seed 0 on
    CPU is tests/contract/test_cheats.py's (smaller, in CPU CI); here it is timed again at these sizes."""
    from rapid_llm.bench.integrity import _PROBED

    _PROBED.clear()  # probe again on every pass
    numels = (4097 + seed, 1 << 20 if device == "cuda" else 1 << 16)
    timed = sum(shipped.bench_every_row(op, device, numels, warmup=2, repeats=5) for op in spec.all_ops())
    assert timed, f"no shipped row runs on {device} here"
