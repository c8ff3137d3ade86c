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


# Per op, so the suite's workers share the passes (one test over every op was the suite's longest, 103 s).
@pytest.mark.parametrize("op", sorted(spec.all_ops()))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("seed_offset", [1, 2])
def test_no_cheat_verdict_on_the_shipped_rows(seed_offset, device, op, monkeypatch):
    """0 false verdicts: every shipped row that runs on the device passes verify with no defect, over three seeds
    (the first is test_rows.py's run of every row; these are the other two)."""
    shipped.shift_verify_seeds(monkeypatch, seed_offset)
    assert shipped.verify_every_row(op, device), f"no shipped row of {op} runs on {device} here"


@pytest.mark.parametrize("op", sorted(spec.all_ops()))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_bench_verdict_on_the_shipped_rows(seed, device, op):
    """0 false refusals: every shipped row that runs on the device is timed with fresh content, checked calls and
    the memo probe, three times over (the draws of checked calls and content are random each time). Seed 0 on
    CPU is tests/contract/test_cheats.py's (smaller, in CPU CI); here it is timed again at these sizes."""
    from rapid_llm.bench.integrity import _PROBED

    _PROBED.clear()  # probe again on every pass
    numels = (4097 + seed, 1 << 20 if device == "cuda" else 1 << 16)
    timed = shipped.bench_every_row(op, device, numels, warmup=2, repeats=5)
    assert timed, f"no shipped row of {op} runs on {device} here"


def test_bench_refuses_calls_that_overlap_in_the_graph_by_name():
    """Back-to-back overlap from dependent launches counted as speed (cheat_rows.scale_overlapping_launches): its
    graph of back-to-back calls has programmatic edges between calls, plain_launches() or not; eager it is timed."""
    from rapid_llm.bench import dependent
    from rapid_llm.kernels.toolchain.fastpath.binding import plain_launches

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    fn = cheat_rows.scale_overlapping_launches
    x = torch.randn(1 << 16, device="cuda")
    assert torch.equal(fn(x, 2.0), x * 2.0)
    with plain_launches(), pytest.raises(BenchRefused) as caught:
        bench(fn, x, 2.0, graph=True, integrity=False, label="scale_overlapping_launches")
    assert caught.value.kind == dependent.KIND, str(caught.value)
    assert "scale_overlapping_launches" in str(caught.value)
    assert bench(fn, x, 2.0, reference=_floor, label="eager").median_us > 0  # eager timing is unchanged


def test_the_graph_edges_are_read_on_this_driver():
    """The detector sees the project's own dependent launches when they are on (so an unread edge is not why the
    shipped rows pass below), and none under plain launches."""
    from rapid_llm.bench import dependent
    from rapid_llm.kernels.toolchain.fastpath.binding import set_dependent_launch

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    row = spec.get_row("jit/rms_norm")
    fn = row.call_path()
    x, w = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16), torch.randn(4096, device="cuda",
                                                                                   dtype=torch.bfloat16)
    edges = {}
    for mode, on in (("dependent", True), ("plain", False)):
        before = set_dependent_launch(on)
        try:
            fn(x, w, 1e-6)
            torch.cuda.synchronize()
            graph = dependent.kept_graph()
            with torch.cuda.graph(graph):
                for _ in range(4):
                    fn(x, w, 1e-6)
            edges[mode] = dependent.programmatic_edges(graph)
        finally:
            set_dependent_launch(before)
    assert edges["dependent"] is not None and edges["dependent"] >= 3, edges
    assert edges["plain"] == 0, edges


@pytest.mark.parametrize("op", sorted(spec.all_ops()))
def test_no_dependent_overlap_verdict_on_the_shipped_rows(op):
    """0 false refusals: every graph-safe shipped row's graph figure, at a decode size and a large one."""
    assert shipped.graph_every_row(op, (4096, 1 << 20), warmup=2, repeats=5) > 0, f"no graph-safe row of {op}"
