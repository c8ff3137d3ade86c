"""Test-session set-up: Triton's interpreter on CPU-only machines, an isolated cache."""
from __future__ import annotations

import os
import shlex
import tempfile

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

# Triton reads this when a kernel is decorated, so it must be set before any
# row module is imported: it is what lets CI run Triton rows for real on CPU.
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# JIT builds and benchmark results go to a throw-away directory unless the
# caller points somewhere on purpose (a GPU run that wants warm builds).
os.environ.setdefault("RAPID_LLM_CACHE_DIR", tempfile.mkdtemp(prefix="rapid_llm_test_cache_"))

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason=NO_CUDA_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> torch.device:
    """The device rows are exercised on: CUDA when there is one, else CPU (Triton interpreted)."""
    return torch.device("cuda" if HAS_CUDA else "cpu")


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
