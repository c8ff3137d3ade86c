"""A CUDA (JIT) row answers a bad call as every other row does: its call path runs the op's checks first.

The CUDA code cannot run here, so each op's JIT row gets a CPU twin (bad_input_cases.jit_twins): a JitRow of the
same source, launcher name and out rule whose launcher computes with the floor and records any call the op's
checks refuse. The seeded fuzz then runs K (which dispatches to the twin), the twin called directly and
torch.ops.rapid_llm through a JIT row's call path, the compiled one (fastcall's OutFirst) and the portable one:
every bad call gets one answer, and none reaches a launcher. tests/gpu/contract/test_bad_input.py runs the same
cases through the real CUDA rows on a GPU.
"""
from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels.registry import spec
from tests.contract import bad_input_cases as fuzz

SEED = 52
PER_OP = 80  # 7 ops: 560 cases


def _bind_portable(twins: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The twins bound without the compiled binding (what a machine without a C compiler runs); only their
    binding, which each keeps: the rest of the process keeps its compiled paths."""
    from rapid_llm.kernels.toolchain.fastpath import binding

    def unavailable():
        raise RuntimeError("no C compiler (this test)")

    with monkeypatch.context() as m:
        m.setattr(binding, "fastcall", unavailable)
        for name in twins:
            spec.get_row(name).target.bound()


def _compiled() -> None:
    from rapid_llm.kernels.toolchain.fastpath.binding import fastcall

    try:
        fastcall()
    except (ImportError, RuntimeError, OSError) as exc:
        pytest.skip(f"the compiled binding does not build here: {exc}")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU twins stand in for CUDA rows where none can run; on "
                    "a GPU, tests/gpu/contract/test_bad_input.py runs the CUDA rows themselves")
@pytest.mark.parametrize("call_path", ["compiled", "portable"])
def test_jit_rows_answer_every_bad_call_as_the_floor(call_path, monkeypatch):
    if call_path == "compiled":
        _compiled()
    fuzz.reached.clear()
    with fuzz.jit_twins() as twins:
        if call_path == "portable":
            _bind_portable(twins, monkeypatch)
        bound = type(spec.get_row(twins[0]).call_path()).__name__
        assert (bound == "OutFirst") == (call_path == "compiled"), bound
        assert K.resolve("rms_norm", torch.ones(2, 8), torch.ones(8), 1e-6).name == "jit/cpu_twin_of_rms_norm"
        counts, failures = fuzz.run_all(SEED, PER_OP)
    line = fuzz.summary(counts)
    assert sum(counts.values()) >= 500
    assert not failures, f"{line}\n" + "\n".join(failures[:40])
    assert fuzz.reached == [], f"calls the op's checks refuse reached a launcher: {fuzz.reached[:10]}"


@pytest.mark.parametrize("make, words", [
    (lambda x, r, w: (x, x, w, 1e-6), "fused_add_rms_norm: x is written and must not share memory with residual"),
    (lambda x, r, w: (x, r, w, -1e-6), "fused_add_rms_norm: eps must be >= 0, got -1e-06"),
    (lambda x, r, w: (x, r, w, float("nan")), "fused_add_rms_norm: eps must be finite, got nan"),
    (lambda x, r, w: (x, r, w, 1e-6, 0), "fused_add_rms_norm() takes 4 positional arguments but 5 were given"),
])
def test_a_refused_call_leaves_its_arguments_and_the_launcher_alone(make, words):
    """The issue's cases: fused_add_rms_norm(x, x, w, eps), a negative or NaN eps, an argument too many."""
    fuzz.reached.clear()
    with fuzz.jit_twins():
        row = spec.get_row("jit/cpu_twin_of_fused_add_rms_norm")
        for path in (K.fused_add_rms_norm, row.load(), row.call_path()):
            x, r, w = torch.randn(3, 8), torch.randn(3, 8), torch.randn(8)
            before = x.clone(), r.clone()
            with pytest.raises((ValueError, TypeError)) as caught:
                path(*make(x, r, w))
            assert str(caught.value) == words
            assert torch.equal(x, before[0]) and torch.equal(r, before[1])
    assert fuzz.reached == []


def test_a_jit_row_of_registered_code_gets_its_ops_checks():
    """A JitRow made apart from the registered one (a test's, a child process's, a registry discovered anew) but of
    the same source, launcher and out rule runs the op's checks too."""
    from rapid_llm.kernels.toolchain.jit_row import JitRow

    fuzz.reached.clear()
    with fuzz.jit_twins():
        twin = spec.get_row("jit/cpu_twin_of_fused_add_rms_norm").target
        apart = JitRow(twin.source, twin.fn, out=twin.out, launcher=twin._launcher)
        x, w = torch.randn(3, 8), torch.randn(8)
        with pytest.raises(ValueError, match="^fused_add_rms_norm: x is written and must not share memory with"):
            apart(x, x, w, 1e-6)
    assert fuzz.reached == []


def test_every_ops_check_reads_metadata_only_or_says_where_it_reads_values():
    """A JIT row's compiled call path asks its op's check once per kind of call (fastcall_checked.inc): sound only
    while a check reads no tensor's values, which it shows by running no torch op on the call's tensors (a shape,
    a stride, a data pointer are no torch op). A check that reads values on a device marks it
    (rapid_llm.kernels.registry.check_marks), and its calls there are checked every time."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from rapid_llm.bench.ops import make_args
    from rapid_llm.kernels.registry.check_marks import values_read_on

    class Reads(TorchDispatchMode):
        def __init__(self, tensors):
            super().__init__()
            self.ids, self.ops = {id(t) for t in tensors}, []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(id(t) in self.ids for t in tree_leaves((args, kwargs or {}))):
                self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    found = {}
    for op in sorted(spec.all_ops()):
        check = getattr(spec.native_row(op).load(), "check", None)
        if check is None or "cpu" in values_read_on(check):
            continue
        decl = spec.get_decl(op)
        for form in (None, *decl.forms):
            case = make_args(op, 4096, torch.float32, "cpu", form)
            tensors = [t for t in tree_leaves((case.args, case.kwargs)) if isinstance(t, torch.Tensor)]
            with Reads(tensors) as reads:
                check(*case.args, **case.kwargs)
            if reads.ops:
                found[f"{op} ({form or 'bench case'})"] = reads.ops
    assert not found, f"checks that read tensor values (mark them with check_marks.reads_values_on): {found}"


def test_a_check_that_reads_values_is_asked_every_call_where_it_reads_them():
    """reshape_and_cache_flash's check reads the slots of CPU tensors: a slot out of range after good calls of the
    same shapes is still refused by the twin's compiled call path, before the launch."""
    from rapid_llm.bench.ops import make_args

    _compiled()
    fuzz.reached.clear()
    with fuzz.jit_twins():
        path = spec.get_row("jit/cpu_twin_of_reshape_and_cache_flash").call_path()
        case = make_args("reshape_and_cache_flash", 4096, torch.float32, "cpu")
        path(*case.args, **case.kwargs)
        path(*case.args, **case.kwargs)
        key, value, key_cache, value_cache, slots, k_scale, v_scale = case.args
        bad = slots.clone()
        bad[0] = key_cache.shape[0] * key_cache.shape[1]
        with pytest.raises(ValueError, match="^reshape_and_cache_flash: slot_mapping holds slot"):
            path(key, value, key_cache, value_cache, bad, k_scale, v_scale)
    assert fuzz.reached == []
