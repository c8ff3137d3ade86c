"""One answer per bad call on a GPU: the seeded bad and edge calls of every op, their tensors on CUDA, through K,
every row that runs there called directly (the floor, the compiled Triton rows and the CUDA rows) and
torch.ops.rapid_llm.

The cases and the verdicts are tests/contract/bad_input_cases.py's (CPU CI runs them on the CPU's rows, and a
JIT row's call path through CPU twins: tests/contract/test_jit_row_checks.py). Each case's tensors are made on
the CPU and moved with their aliasing kept (bad_input_cases.on_device), so x passed as residual, or out= one
element past its input, is the same call here.
"""
from __future__ import annotations

import pytest

from rapid_llm.kernels.registry import spec
from tests.contract import bad_input_cases as fuzz

pytestmark = pytest.mark.gpu

SEED = 52
PER_OP = 80


@pytest.mark.parametrize("op", sorted(fuzz.OPS))
def test_every_bad_call_gets_one_answer_from_every_cuda_path(op, record_property):
    from rapid_llm.kernels.toolchain import jit

    avail = jit.available()
    if not avail:
        pytest.skip(f"JIT toolchain unavailable: {avail.reason}")
    cuda_rows = [r.name for r in fuzz.rows_on(op, "cuda") if r.backend == "jit"]
    assert cuda_rows, f"{op}: its CUDA row is among the paths"
    counts, failures = fuzz.run_all(SEED, PER_OP, device="cuda", ops=(op,))
    line = f"{op}: {fuzz.summary(counts)}"
    record_property("bad_input_fuzz_cuda", line)
    print(line)
    assert sum(counts.values()) == PER_OP
    assert not failures, f"{line}\n" + "\n".join(failures[:40])


def test_a_cuda_row_runs_its_ops_checks():
    """The shipped CUDA rows' compiled call paths carry their op's checks (jit_row.op_checks). A row declared
    through a Python wrapper (moe_topk_gate's two outputs fit no out rule) calls the checks itself; the fuzz above
    holds it to the same answers."""
    for op in fuzz.OPS:
        row = next(r for r in spec.rows_for(op) if r.backend == "jit")
        if isinstance(row.target, str):
            continue
        bound = row.target.bound()
        if type(bound).__name__ != "OutFirst":
            pytest.skip(f"the compiled binding does not build here ({type(bound).__name__})")
        assert bound.check is spec.native_row(op).load().check, row.name
