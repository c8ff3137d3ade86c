"""A row's checks in a child process: a crash or a hang is reported and this process goes on; and
compute-sanitizer's reports parsed from captured output."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.verification import isolate
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.registry.spec import KernelSpec

MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at void scale_oob_kernel<float>(float *, const float *, float, long)+0x1b0 in /w/csrc/defects/oob.cu:21
=========     by thread (255,0,0) in block (16,0,0)
=========     Address 0x7f2e4c004000 is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""
RACECHECK = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at void race_kernel<float>(float *, const float *, long)+0x90 in /p/rapid_llm/kernels/shipped_cu/x/race.cu:14
=========     and Read access at void race_kernel<float>(float *, const float *, long)+0xd0 in /p/rapid_llm/kernels/shipped_cu/x/race.cu:16 [4 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def _row(name: str) -> str:
    spec.register(KernelSpec(name=f"external/{name}", op="scale", backend="external",
                             target=f"tests.unit.verification.isolation_rows:{name}", devices=("cpu",), dtypes=("fp32",)),
                  replace=True)
    return f"external/{name}"


@pytest.mark.parametrize("name, status", [("works", "passed"), ("aborts", "crashed")])
def test_a_child_reports_how_the_row_ran(name, status):
    result = isolate.run_child(isolate.recipe(spec.get_row(_row(name))), dtypes=["fp32"], sizes=[1, 4097])
    assert result.status == status, result.message
    assert result.broken == (status == "crashed")


#: The time limit of the jobs whose row never returns. The test proves the limit is kept and the child killed at
#: it, which a short limit proves as well as a long one: the row hangs for good, so no load on the machine turns a
#: hang into an answer. Each test first waits for the warm worker with the default limit (a worker still starting
#: gets the job's limit to come up, and importing torch on a busy machine can take longer than this), so the short
#: limit counts the hanging job alone.
HANG_LIMIT_S = 2


def _warm_worker() -> None:
    result = isolate.run_child(isolate.recipe(spec.get_row(_row("works"))), dtypes=["fp32"], sizes=[1])
    assert result.status == "passed", result.message


def test_a_hanging_row_is_killed_at_the_time_limit():
    _warm_worker()
    result = isolate.run_child(isolate.recipe(spec.get_row(_row("hangs"))), dtypes=["fp32"], sizes=[1],
                               timeout=HANG_LIMIT_S)
    assert result.status == "hung" and f"did not finish in {HANG_LIMIT_S} s" in result.message, result.message


def test_verify_of_a_crashing_row_fails_it_and_this_process_goes_on():
    name = _row("aborts")
    report = verify(name, dtypes=["fp32"], sizes=[1], isolate=True, device="cpu")
    assert not report.passed
    assert report.notes[0].startswith("broken: external/aborts crashed its process")
    assert spec.get_row(name).golden.verified is False
    assert torch.ones(2).add(1).tolist() == [2.0, 2.0]  # this process is fine


def test_a_row_a_child_cannot_rebuild_runs_here_and_says_so():
    spec.register(KernelSpec(name="external/local", op="scale", backend="external", target=lambda x, f, out=None:
                             torch.mul(x, f, out=out), devices=("cpu",), dtypes=("fp32",)))
    report = verify("external/local", dtypes=["fp32"], sizes=[1], isolate=True, device="cpu")
    assert report.passed and any("not isolated" in n for n in report.notes)


def test_sanitizer_reports_are_parsed_with_cell_lines():
    found = isolate.parse_sanitizer(MEMCHECK, "memcheck", isolate.Path("/w/csrc/defects/oob.cu"))
    assert [str(f) for f in found] == ["memcheck: Invalid __global__ write of size 4 bytes at oob.cu:21 (cell line 22)"]
    race = isolate.parse_sanitizer(RACECHECK, "racecheck", isolate.Path("/p/rapid_llm/kernels/shipped_cu/x/race.cu"))
    assert len(race) == 1 and race[0].where == "race.cu:14" and race[0].what.startswith("Error: Race reported")


RACECHECK_WARP = """========= COMPUTE-SANITIZER
========= Warning: (Warp Level Programming) Potential RAW hazard detected at __shared__ 0x440 in block (0,0,0) :
=========     Write Thread (16,0,0) at void rms_norm_race_kernel<float>(float *, const float *, const float *, int, float)+0x5f0 in rms_norm_race.cu:31
=========     Read Thread (0,0,0) at void rms_norm_race_kernel<float>(float *, const float *, const float *, int, float)+0x5d0 in rms_norm_race.cu:31
=========     Current Value : 0, Incoming Value : 0
=========
========= Warning: (Warp Level Programming) Potential RAW hazard detected at __shared__ 0x441 in block (0,0,0) :
=========     Write Thread (16,0,0) at void rms_norm_race_kernel<float>(float *, const float *, const float *, int, float)+0x5f0 in rms_norm_race.cu:31
=========     Read Thread (0,0,0) at void rms_norm_race_kernel<float>(float *, const float *, const float *, int, float)+0x5d0 in rms_norm_race.cu:31
=========
========= Error: process didn't terminate successfully
========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)
"""


def test_reports_that_differ_in_an_address_are_one_finding_at_a_relative_path():
    found = isolate.parse_sanitizer(RACECHECK_WARP, "racecheck", isolate.Path("/w/csrc/defects/rms_norm_race.cu"))
    assert [str(f) for f in found] == [
        "racecheck: Warning: (Warp Level Programming) Potential RAW hazard detected at __shared__ 0x... in block "
        "(0,0,0) : (2 reports) at rms_norm_race.cu:31 (cell line 32)"]


def test_without_compute_sanitizer_one_line_says_so(monkeypatch):
    monkeypatch.setattr(isolate, "sanitizer_path", lambda: None)
    runs = isolate.sanitize(isolate.recipe(spec.get_row(_row("works"))), tools=("memcheck", "racecheck"))
    assert {r.status for r in runs.values()} == {"unavailable"}
    assert runs["memcheck"].message.startswith("compute-sanitizer is not installed here")


def _negate(x, out=None):
    "-x, the floor of an op a 'notebook' declares."
    return torch.neg(x, out=out)


def _negate_inputs(shape, dtype, device, gen):
    return (torch.randn(shape, generator=gen).to(dtype=dtype, device=device),)


def _negate_oracle(x):
    return -x.double()


def _negate_case(numel, dtype, device):
    from rapid_llm.kernels.registry.opdecl import CaseArgs

    return CaseArgs((torch.randn(numel, device=device).to(dtype),))


def _declare_negate(native=_negate):
    from rapid_llm.kernels.registry.opdecl import Reference, declare_op

    declare_op("negate", native=native, reference=Reference(make_inputs=_negate_inputs, oracle=_negate_oracle),
               bench=_negate_case, devices=("cpu",))
    spec.register(KernelSpec(name="external/negate_torch", op="negate", backend="external", target="torch:neg",
                             devices=("cpu",), dtypes=("fp32",)))
    return spec.get_row("external/negate_torch")


def test_a_child_learns_an_op_declared_only_in_this_process():
    job = isolate.recipe(_declare_negate())
    assert job["declaration"].endswith(".py")  # the declaration, written out for the child
    result = isolate.run_child(job, dtypes=["fp32"], sizes=[1, 4097])
    assert result.status == "passed", result.message + result.report


def test_a_child_that_cannot_set_the_row_up_says_so_and_is_not_a_crash(tmp_path):
    job = isolate.recipe(_declare_negate())
    broken = tmp_path / "declaration.py"
    broken.write_text("raise ImportError('no such module: my_helpers')\n")
    result = isolate.run_child(dict(job, declaration=str(broken)), dtypes=["fp32"], sizes=[1])
    assert result.status == "not_set_up" and not result.broken
    assert result.message == ("the child process could not set up external/negate_torch: "
                              "ImportError: no such module: my_helpers")


def test_verify_says_in_one_line_why_an_op_cannot_reach_the_child():
    row = _declare_negate(native=lambda x, out=None: torch.neg(x, out=out))
    report = verify(row.name, dtypes=["fp32"], sizes=[1], isolate=True)
    assert any("the native floor is a lambda" in note for note in report.notes), report.notes


# ------------------------------------------------------------------ the warm worker


def _worker_pid() -> int:
    from rapid_llm.kernels.verification import worker

    plain = worker._workers.get(worker.PLAIN)
    assert plain is not None and plain.alive()
    return plain.proc.pid


def test_the_worker_stays_warm_between_verifies_and_says_where_the_time_went():
    name = _row("works")
    first = verify(name, dtypes=["fp32"], sizes=[1, 4097], isolate=True, device="cpu", record=False)
    pid = _worker_pid()
    second = verify(name, dtypes=["fp32"], sizes=[1, 4097], isolate=True, device="cpu", record=False)
    assert first.passed and second.passed
    assert _worker_pid() == pid  # the same process served both
    note = next(n for n in second.notes if n.startswith("first run in a child process"))
    assert "passed (worker warm, rebuild " in note and " s, checks " in note, note


# A crash ends its job at once: its limit is never waited out, and stays long enough that a slow crash on a loaded
# machine is not taken for a hang.
@pytest.mark.parametrize("name, status, limit", [("aborts", "crashed", 10), ("hangs", "hung", HANG_LIMIT_S)])
def test_a_worker_that_crashed_or_hung_is_replaced_and_the_next_job_runs(name, status, limit):
    _warm_worker()
    pid = _worker_pid()
    bad = isolate.run_child(isolate.recipe(spec.get_row(_row(name))), dtypes=["fp32"], sizes=[1], timeout=limit)
    assert bad.status == status, bad.message
    assert _worker_pid() != pid  # its replacement is already starting
    good = isolate.run_child(isolate.recipe(spec.get_row(_row("works"))), dtypes=["fp32"], sizes=[1])
    assert good.status == "passed", good.message


def test_a_job_sees_the_registry_of_its_own_recipe_only():
    """Jobs share a process but not a registry: a row a job registered is gone for the next one."""
    isolate.run_child(isolate.recipe(spec.get_row(_row("works"))), dtypes=["fp32"], sizes=[1])
    spec.register(KernelSpec(name="external/works", op="scale", backend="external",
                             target="tests.unit.verification.isolation_rows:aborts", devices=("cpu",), dtypes=("fp32",)),
                  replace=True)
    again = isolate.run_child(isolate.recipe(spec.get_row("external/works")), dtypes=["fp32"], sizes=[1])
    assert again.status == "crashed"  # the new target, not the first job's row


def test_a_changed_environment_gets_a_fresh_worker(monkeypatch):
    isolate.run_child(isolate.recipe(spec.get_row(_row("works"))), dtypes=["fp32"], sizes=[1])
    pid = _worker_pid()
    monkeypatch.setenv("RAPID_LLM_GUARD_BANDS", "0")
    result = isolate.run_child(isolate.recipe(spec.get_row(_row("works"))), dtypes=["fp32"], sizes=[1])
    assert result.status == "passed" and _worker_pid() != pid


@pytest.mark.parametrize("setting, started", [(None, {"memcheck"}), ("", set()), ("memcheck,racecheck",
                                                                                  {"memcheck", "racecheck"})])
def test_a_build_starts_the_memcheck_worker_beside_the_plain_one(monkeypatch, setting, started):
    """The first sanitized verify finds its worker started (RAPID_LLM_WARM_SANITIZERS says which tools)."""
    from rapid_llm.kernels.verification import worker

    if setting is None:
        monkeypatch.delenv("RAPID_LLM_WARM_SANITIZERS", raising=False)
    else:
        monkeypatch.setenv("RAPID_LLM_WARM_SANITIZERS", setting)
    monkeypatch.setattr(isolate, "sanitizer_path", lambda: "compute-sanitizer")
    monkeypatch.setattr(isolate, "sanitizer_wrapper", lambda sanitizer, tool: (("env",), (("RL_TEST_TOOL", tool),)))
    worker.shutdown()
    try:
        isolate.prewarm()
        tools = {dict(w[1]).get("RL_TEST_TOOL") for w in worker._workers} - {None}
        assert tools == started
        assert worker.PLAIN in worker._workers
    finally:
        worker.shutdown()
        worker._wanted.intersection_update({worker.PLAIN})
