"""Each cheat kernel of tests/contract/cheats/ is caught with its named verdict (by verify or by bench), on CPU
where it runs there; no shipped row draws a verdict.

On CPU the shipped rows go through bench once, with one seed (test_rows.py verifies each of them with the first
seed); the other seeds, every row timed on CUDA, and the CUDA-only cheat are tests/gpu/contract/test_cheats.py's.
"""
from __future__ import annotations

import ctypes

import pytest
import torch

from rapid_llm.bench import BenchRefused, bench
from rapid_llm.bench.integrity import REFUSALS
from tests.contract.cheats import cheat_rows, shipped, shortcuts, tampering

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.verification.defects import DEFECT_KINDS
from rapid_llm.kernels.verification.golden import verify


@pytest.fixture(autouse=True)
def _fresh_memos():
    cheat_rows.forget()
    shortcuts.forget()
    yield
    tampering.forget()


#: Cheats verify catches: (row function, module, defect).
CHEATS = [("scale_in_bf16", "cheat_rows", "precision_loss"), ("scale_on_a_host_thread", "cheat_rows", "deferred_work"),
          ("scale_in_a_freed_block", "shortcuts", "unwritten")]


def cheat_row(fn: str, module: str = "cheat_rows") -> str:
    name = f"external/{fn}"
    spec.register(KernelSpec(name=name, op="scale", backend="external", target=f"tests.contract.cheats.{module}:{fn}",
                             dtypes=("fp32",), devices=("cpu",)), replace=True)
    return name


@pytest.mark.parametrize("fn, module, kind", CHEATS, ids=[c[0] for c in CHEATS])
def test_cheat_is_caught_by_name(fn, module, kind):
    assert kind in DEFECT_KINDS
    report = verify(cheat_row(fn, module), dtypes=["fp32"], device="cpu")
    assert not report.passed, str(report)
    kinds = {d.kind for d in report.defects}
    assert kind in kinds, f"expected {kind!r}, got {sorted(kinds)}\n{report}"
    assert "unwritten" not in kinds or kind != "deferred_work", str(report)  # the cause is named, not its symptom


def test_a_hard_coded_shape_fails_verify():
    """Whole tiles only: right at the benchmark's sizes, a tail left zero; verify's tail sizes find it."""
    report = verify(cheat_row("scale_hardcoded_size", "shortcuts"), dtypes=["fp32"], device="cpu")
    assert not report.passed, str(report)


#: Cheats the harness catches while timing on CPU: (row function, refusal). The persisting-L2 and native-timer
#: cheats need CUDA (tests/gpu/contract/test_cheats.py).
BENCH_CHEATS = [("scale_memo_by_pointer", "timed_output_wrong"),
                ("scale_memo_by_content", "content_memo"),
                ("scale_after_warmup", "timed_output_wrong"),
                ("scale_cached_reference", "timed_output_wrong"),
                ("scale_patching_event_timer", "timer_patched"),
                ("scale_patching_perf_counter", "timer_patched"),
                ("scale_patching_the_reference", "checker_tampered"),
                ("scale_loosening_the_checker", "checker_tampered"),
                ("scale_lazy_subclass", "lazy_result"),
                ("scale_overriding_eq", "lazy_result"),
                ("scale_skipping_close_launches", "timed_output_wrong"),
                ("scale_skipping_at_random", "timed_output_wrong")]


def _floor(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    return torch.mul(input, factor, out=out) if out is not None else input * factor


@pytest.mark.parametrize("fn, kind", BENCH_CHEATS, ids=[c[0] for c in BENCH_CHEATS])
def test_bench_refuses_the_cheat_by_name(fn, kind):
    assert kind in REFUSALS
    x = torch.randn(1 << 16)
    row = next(getattr(m, fn) for m in (cheat_rows, tampering, shortcuts) if hasattr(m, fn))
    with pytest.raises(BenchRefused) as caught:
        bench(row, x, 2.0, reference=_floor, label=fn)
    assert caught.value.kind == kind, str(caught.value)
    assert fn in str(caught.value) and kind in str(caught.value)
    assert torch.mul is torch.ops.aten.mul.Tensor or torch.mul.__name__ == "mul"  # what the row replaced is back


@pytest.mark.parametrize("fn", ["rms_norm_unit_rms", "rms_norm_subsampled"])
def test_an_answer_that_fits_one_input_law_is_refused(fn):
    """New content alternates two laws; each row is close enough on N(0, 1) inputs scaled near 1 (the first)."""
    from rapid_llm.bench.ops import floor_call, make_args

    case = make_args("rms_norm", 4 * 4096, torch.float32, "cpu")
    with pytest.raises(BenchRefused) as caught:
        bench(getattr(shortcuts, fn), *case.args, reference=floor_call("rms_norm"), label=fn, **case.kwargs)
    assert caught.value.kind == "timed_output_wrong", str(caught.value)


def test_bench_without_a_reference_still_catches_a_pointer_memo():
    x = torch.randn(4097)
    with pytest.raises(BenchRefused) as caught:
        bench(cheat_rows.scale_memo_by_pointer, x, 3.0)
    assert caught.value.kind == "timed_output_wrong"


def test_a_pointer_memo_is_named_when_no_timed_call_reused_an_address():
    """A rotation longer than the run (a small op on a GPU: hundreds of sets) gives every timed call addresses
    of its own: the memo never hits while timed, and the call at a checked call's addresses with new content
    names it."""
    from rapid_llm.bench.harness import _clone_set
    from rapid_llm.bench.integrity import Guard

    x = torch.randn(4097)
    sets = [((x, 3.0), {})] + [_clone_set((x, 3.0), {}) for _ in range(40)]
    guard = Guard(sets, warmup=2, repeats=10, device=x.device, clone_set=_clone_set)
    assert guard.total <= len(sets)  # no set is used twice
    guard.start()
    for position in range(guard.total):
        guard.before(position)
        args, kwargs = sets[guard.set_of(position)]
        guard.after(position, cheat_rows.scale_memo_by_pointer(*args, **kwargs))
    with pytest.raises(BenchRefused) as caught:
        guard.check(cheat_rows.scale_memo_by_pointer, "pointer memo", _floor)
    assert caught.value.kind == "pointer_memo", str(caught.value)


#: The CPU pass over the shipped rows: two sizes, each in one dtype (fp32 at the odd size, bf16 at the other),
#: warm-up 1 and 3 timed calls. What this test asserts is that bench refuses no honest row, and each refusal check
#: still runs at these counts: every call gets new content, the harness adds 0-4 warm-up calls at random, 2 of the 3
#: timed calls are checked (drawn at random, so a row cannot tell which), and the memo probe's passes have the
#: harness's own length whatever the repeats. Counts and sizes only move the timings, which nothing here reads. The
#: earlier runs (4097 and 1 << 16 elements, 2 warm-up and 5 timed calls: about 100 s a seed in Triton's
#: interpreter; then both sizes in both dtypes: 68 s for the file) gave way to this one (see the commit for its
#: figure); tests/gpu/contract/test_cheats.py keeps every dtype at every size, with those counts, for every seed.
CPU_WARMUP, CPU_REPEATS = 1, 3


def cpu_numels(op: str) -> tuple[int, int]:
    """An odd size (a tail in a row's last block; at most three tokens of a model-shaped op, whose Triton grid is a
    program per token in the interpreter) and two tokens of the op's bench model (two programs of a per-token Triton
    grid, two rows of a norm), or 8192 elements of an op without tokens."""
    token_numel = spec.get_decl(op).token_numel
    if not token_numel:
        return 4097, 1 << 13
    return min(4097, 3 * token_numel), 2 * token_numel


@pytest.mark.parametrize("op", spec.all_ops())
def test_no_bench_verdict_on_the_shipped_rows(op):
    """0 false refusals: every shipped row of the op that runs here is timed with fresh content, checked calls
    and the memo probe (the draws of checked calls and content are random each time)."""
    from rapid_llm.bench.integrity import _PROBED

    _PROBED.clear()  # probe again, whatever ran before in this process
    timed = shipped.bench_every_row(op, "cpu", cpu_numels(op), warmup=CPU_WARMUP, repeats=CPU_REPEATS, paired=True)
    assert timed, f"no row of {op} runs on CPU here in {' or '.join(shipped.BENCH_DTYPES)}"


def test_the_dependent_overlap_check_reads_edge_types_and_is_harmless_here():
    """dependent_overlap (rapid_llm.bench.dependent; the cheat itself needs a GPU: tests/gpu/contract): an edge
    lets its kernel start early when it is of the programmatic type or leaves a kernel's programmatic or
    launch-order port; a plain edge (all zero) does not."""
    from rapid_llm.bench import dependent
    from rapid_llm.bench.integrity import REFUSALS

    assert dependent.KIND in REFUSALS
    edges = (dependent.EdgeData * 4)()
    edges[1].type = 1  # CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
    edges[2].from_port = 2  # CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER
    assert dependent.count_programmatic(edges) == 2
    assert dependent.count_programmatic((dependent.EdgeData * 3)()) == 0
    assert ctypes.sizeof(dependent.EdgeData) == 8  # cuda.h's CUgraphEdgeData
