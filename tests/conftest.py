"""Test-session set-up: Triton's interpreter on CPU-only machines, an isolated cache."""
from __future__ import annotations

import atexit
import os
import shlex
import shutil
import tempfile

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

# Triton reads this when a kernel is decorated, so it must be set before any
# row module is imported: it is what lets CI run Triton rows for real on CPU.
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

#: What a machine without a GPU adds to every nvcc command (nvcc reads NVCC_APPEND_FLAGS; the build cache keys on
#: it): NVVM (cicc) and ptxas without optimisation. Device code built here cannot run here; building it checks that
#: it compiles (the C++ front end, NVVM and ptxas all run, on the same kernels), and their optimisers were most of
#: the time: all ten shipped rows 50.9 s at -O3, 15.1 s with both at -O0 (the sampler's 17.9 -> 2.1 s). The GPU
#: suite builds every row with its own flags, for every arch (tests/gpu/unit/toolchain/test_cu_compile_archs.py).
CPU_DEVICE_PASS_FLAGS = "-Xcicc=-O0 -Xptxas=-O0"
if not HAS_CUDA and "NVCC_APPEND_FLAGS" not in os.environ:
    os.environ["NVCC_APPEND_FLAGS"] = CPU_DEVICE_PASS_FLAGS

# JIT builds and benchmark results go to a throw-away directory unless the
# caller points somewhere on purpose (a GPU run that wants warm builds); the
# process that made it removes it when it exits (each xdist worker makes its own).
if "RAPID_LLM_CACHE_DIR" not in os.environ:
    os.environ["RAPID_LLM_CACHE_DIR"] = tempfile.mkdtemp(prefix="rapid_llm_test_cache_")
    atexit.register(shutil.rmtree, os.environ["RAPID_LLM_CACHE_DIR"], ignore_errors=True)

NO_CUDA_REASON = "needs a CUDA device (torch.cuda.is_available() is False)"

# Under pytest-xdist each worker is a process of its own, and torch gives each as many CPU threads as the
# machine has cores: 14 workers on 16 cores ran 224 threads, and CPU-side work (float64 oracles, the harness's
# CPU timing loops) slowed by up to 100x. The workers share the cores instead.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if _WORKERS > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))


def _dist_given(config: pytest.Config) -> bool:
    args = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
            *config.getini("addopts")]
    return any(a in ("--dist", "-d", "--distload") or a.startswith("--dist=") for a in args)


def pytest_configure(config: pytest.Config) -> None:
    """``-n N`` alone schedules by work stealing. xdist's default ("load") hands each worker runs of consecutive
    tests, so a file of long tests (the sanitizer's, the cheat sweeps: up to 85 s each on an H100 under -n 14) can
    run end to end on one worker while the others sit idle; an idle worker steals queued tests instead. A --dist
    given is kept."""
    if getattr(config.option, "dist", "no") == "load" and not hasattr(config, "workerinput") \
            and not _dist_given(config):
        config.option.dist = "worksteal"


# GPU-only tests live in tests/gpu/ (and are marked gpu): without CUDA a run over tests/ does not collect them,
# so its skip count is the CPU suite's own. Naming tests/gpu or a file in it still collects it; the marker then
# skips each test with the reason.
collect_ignore = [] if HAS_CUDA else ["gpu"]


#: The GPU suite's longest tests (seconds each on an H100 at -n 15, from --durations), longest first. Work stealing
#: deals each worker a contiguous share of the collection, and a worker runs its share in order: one of these at
#: the end of a share starts late and ends the run alone (the suite took 301.6 s there, 205 s of test time a worker).
#: So each goes to the head of a share of its own (spread_longest). A test that is gone is passed over.
GPU_LONGEST_FIRST = (
    "tests/gpu/unit/verification/test_defect_kernels.py::test_race_is_seen_by_racecheck",  # 86 s
    "tests/gpu/unit/notebook/test_magic_end_to_end.py::test_seed_cell_builds_through_torch_and_survives_a_kill",  # 84
    "tests/benchmarks/test_bench_scripts.py::test_strided_script_times_each_row_and_the_layout_alone",  # 83 s
    "tests/gpu/unit/notebook/test_new_op.py::test_a_new_op_declared_in_a_kernel_ships_whole_and_a_new_process_"
    "dispatches_it",  # 78 s
    "tests/gpu/unit/verification/test_defect_kernels.py::test_uninitialised_shared_read_is_seen",  # 58 s
    "tests/gpu/contract/test_cheats.py::test_no_cheat_verdict_on_the_shipped_rows[2-cuda-scaled_fp8_quant]",  # 47 s
    "tests/gpu/ops/test_rms_norm.py::test_gluon_row_inspects_with_registers_and_its_layout_in_the_ir",  # 45 s
    "tests/gpu/unit/bench/test_tune.py::test_tune_a_cuda_row_pins_a_verified_winner",  # 45 s
    "tests/gpu/ops/test_moe_topk_gate.py::test_every_row_passes_the_routing_mode_on_cuda[triton/moe_topk_gate]",  # 44
    "tests/gpu/ops/test_top_k_top_p_sampling.py::test_every_row_passes_the_sampling_mode_on_cuda"
    "[triton/top_k_top_p_sampling]",  # 43 s
)


def share_starts(n_items: int, n_workers: int) -> list[int]:
    """Where each worker's first share begins: xdist's work stealing sends node i len(pending) // (nodes - i) of
    what is left, in collection order."""
    starts, at = [], 0
    for i in range(n_workers):
        starts.append(at)
        at += (n_items - at) // (n_workers - i)
    return starts


def spread_longest(items: list, longest: tuple[str, ...], n_workers: int, nodeid=lambda item: item.nodeid) -> list:
    """``items`` with the ``longest`` (in that order, those present) moved to the heads of the first shares, one a
    share; more of them than workers go second in a share. Every worker collects the same list, so every worker
    computes the same order (xdist refuses to run collections that differ)."""
    rank = {name: i for i, name in enumerate(longest)}
    firsts = sorted((item for item in items if nodeid(item) in rank), key=lambda item: rank[nodeid(item)])
    starts = share_starts(len(items), n_workers)
    placed = {starts[j % n_workers] + j // n_workers: item for j, item in enumerate(firsts)}
    if len(placed) < len(firsts) or len(items) < 2 * n_workers:  # shares too small to hold them: keep the order
        return list(items)
    rest = iter(item for item in items if nodeid(item) not in rank)
    return [placed[at] if at in placed else next(rest) for at in range(len(items))]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        if _WORKERS > 1 and hasattr(config, "workerinput") and not _dist_given(config):
            items[:] = spread_longest(items, GPU_LONGEST_FIRST, _WORKERS)
        return
    skip = pytest.mark.skip(reason=NO_CUDA_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> torch.device:
    """The device rows are exercised on (tests.rows.DEVICE): CUDA when there is one, else CPU (Triton interpreted)."""
    from tests.rows import DEVICE

    return DEVICE


@pytest.fixture(autouse=True)
def release_cached_gpu_memory():
    """Cached CUDA blocks go back to the device after each test: a large benchmark's pools would otherwise stay
    with its process, and several test processes sharing one GPU run each other out of memory."""
    yield
    if HAS_CUDA and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@pytest.fixture(autouse=True)
def no_sanitizer_prewarm(monkeypatch):
    """A test's cell build starts no compute-sanitizer worker beside the plain one (each holds a CUDA context
    and seconds of instrumented start-up); a test that sanitizes starts its tool's worker on demand, and the
    test of the prewarm sets the variable itself. Notebooks under nbval keep the user's default."""
    monkeypatch.setenv("RAPID_LLM_WARM_SANITIZERS", "")


@pytest.fixture(autouse=True)
def fresh_registry():
    """Each test gets a registry of its own, holding the shipped ops: nothing a test registers,
    re-verifies or declares can leak into the next one."""
    from rapid_llm.kernels.registry import spec

    with spec.isolated(discover=True):
        yield


@pytest.fixture(params=["compiled", "portable"])
def call_impl(request, monkeypatch):
    """Both op call paths: the compiled dispatcher (fastcall) and the portable Python one, same answers."""
    from rapid_llm.kernels.dispatch import dispatcher as dispatch

    if request.param == "portable":
        monkeypatch.setattr(dispatch, "_FastOp", None)
        monkeypatch.setattr(dispatch, "portable_reason", "chosen by the test")
    elif dispatch._fast_op_type() is None:
        pytest.skip(f"the compiled dispatcher does not build here: {dispatch.portable_reason}")
    from rapid_llm.kernels.dispatch import custom_ops

    monkeypatch.setattr(dispatch, "_ops", {})
    # The custom ops and rapid_llm.kernels each keep the op objects they were handed: one kept during the test
    # would be an op of this test's table, which no registry change reaches after it (a later test then read the
    # old declaration's answer through K.<op> or torch.ops.rapid_llm.<op>).
    monkeypatch.setattr(custom_ops, "_live_ops", {})
    import rapid_llm.kernels as K
    from rapid_llm.kernels.registry import spec

    cached_before = {name for name in spec.all_ops() if name in vars(K)}
    for name in cached_before:
        monkeypatch.delattr(K, name)  # put back when the test ends
    yield request.param
    for name in spec.all_ops():
        if name not in cached_before:
            vars(K).pop(name, None)


#: The user properties whose value is a line for the run's summary.
SUMMARY_LINES = ("bad_input_fuzz", "ray_sweep")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The summary lines some tests record (SUMMARY_LINES: the bad-input fuzz's, tests/contract/test_bad_input.py;
    the Ray sweep's, tests/unit/bench/test_sweep_ray.py) in the summary of any run that includes them. It lives here, not beside the test: under xdist only the conftests of the command line's folders reach the
    controller that writes the summary (a test's recorded properties travel to it with the test's report)."""
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name in SUMMARY_LINES and getattr(report, "when", "call") == "call":
                    terminalreporter.write_line(value)
