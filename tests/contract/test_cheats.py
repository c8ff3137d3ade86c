"""Each cheat kernel of tests/contract/cheats/ is caught with its named verdict (by verify or by bench), on CPU
where it runs there; no shipped row draws a verdict."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.bench import BenchRefused, bench
from rapid_llm.bench.integrity import REFUSALS
from tests.contract.cheats import cheat_rows

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.verification.defects import DEFECT_KINDS
from rapid_llm.kernels.verification.golden import verify


@pytest.fixture(autouse=True)
def _fresh_memos():
    cheat_rows.forget()


CHEATS = [("scale_in_bf16", "precision_loss"), ("scale_on_a_host_thread", "deferred_work")]


def cheat_row(fn: str) -> str:
    name = f"external/{fn}"
    spec.register(KernelSpec(name=name, op="scale", backend="external", target=f"tests.contract.cheats.cheat_rows:{fn}",
                             dtypes=("fp32",), devices=("cpu",)))
    return name


@pytest.mark.parametrize("fn, kind", CHEATS, ids=[c[0] for c in CHEATS])
def test_cheat_is_caught_by_name(fn, kind):
    assert kind in DEFECT_KINDS
    report = verify(cheat_row(fn), dtypes=["fp32"], device="cpu")
    assert not report.passed, str(report)
    kinds = {d.kind for d in report.defects}
    assert kind in kinds, f"expected {kind!r}, got {sorted(kinds)}\n{report}"
    assert "unwritten" not in kinds or kind != "deferred_work", str(report)  # the cause is named, not its symptom


@pytest.mark.parametrize("seed_offset", [1, 2])
def test_no_cheat_verdict_on_the_shipped_rows(seed_offset, monkeypatch):
    """0 false verdicts: every shipped row that runs here passes verify with no defect, over three seeds (the
    first is test_rows.py's run of every row; these are the other two)."""
    import zlib

    crc32 = zlib.crc32  # verify seeds its cases from crc32 of the op and dtype: shift them for another seed
    monkeypatch.setattr(zlib, "crc32", lambda data: crc32(data) + 1000 * seed_offset)
    for op in spec.all_ops():
        for row in spec.rows_for(op):
            if "cpu" not in row.devices or not row.probe("cpu"):
                continue
            report = verify(row.name, device="cpu", record=False, sizes=(1, 4097))
            assert report.passed and report.defects == (), str(report)


#: Cheats the harness catches while timing: (row function, refusal, device).
BENCH_CHEATS = [("scale_memo_by_pointer", "timed_output_wrong", "cpu"),
                ("scale_memo_by_content", "content_memo", "cpu"),
                ("scale_after_warmup", "timed_output_wrong", "cpu"),
                ("scale_cached_reference", "timed_output_wrong", "cpu"),
                ("scale_with_persisting_l2", "persisting_l2", "cuda")]


def _floor(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    return torch.mul(input, factor, out=out) if out is not None else input * factor


@pytest.mark.parametrize("fn, kind, device", [pytest.param(*c, marks=[pytest.mark.gpu] if c[2] == "cuda" else [])
                                              for c in BENCH_CHEATS], ids=[c[0] for c in BENCH_CHEATS])
def test_bench_refuses_the_cheat_by_name(fn, kind, device):
    assert kind in REFUSALS
    x = torch.randn(1 << 16, device=device)
    with pytest.raises(BenchRefused) as caught:
        bench(getattr(cheat_rows, fn), x, 2.0, reference=_floor, label=fn)
    assert caught.value.kind == kind, str(caught.value)
    assert fn in str(caught.value) and kind in str(caught.value)


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


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_bench_verdict_on_the_shipped_rows(seed, device):
    """0 false refusals: every shipped row that runs here is timed with fresh content, checked calls and the
    memo probe, three times over (the draws of checked calls and content are random each time)."""
    from rapid_llm.bench.integrity import _PROBED
    from rapid_llm.bench.ops import floor_call, make_args
    from rapid_llm.kernels import platform

    _PROBED.clear()  # probe again on every pass
    timed = 0
    for op in spec.all_ops():
        for row in spec.rows_for(op):
            if device not in row.devices or not row.probe(device):
                continue
            for dtype in ("fp32", "bf16"):
                if dtype not in row.dtypes:
                    continue
                for numel in (4097 + seed, 1 << 20 if device == "cuda" else 1 << 16):  # the interpreter is slow
                    case = make_args(op, numel, platform.torch_dtype(dtype), device)
                    bench(row.call_path(), *case.args, warmup=2, repeats=5, reference=floor_call(op),
                          label=f"{row.name} {dtype} numel={numel}", **case.kwargs)
                    timed += 1
    assert timed, f"no shipped row runs on {device} here"
