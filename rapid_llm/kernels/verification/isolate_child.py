"""The child side of rapid_llm.kernels.verification.isolate: rebuild one row, verify it, print the result as one JSON line.

    python -m rapid_llm.kernels.verification.isolate_child '<recipe json>'   # one job, then exit
    python -m rapid_llm.kernels.verification.isolate_child --serve           # the warm worker

After the checks it asks the device for one more small operation: a kernel
that faulted leaves the CUDA context unusable even when the checks caught
its exception, and the parent must hear that the row would have broken its
process.

``--serve`` pays torch's import and CUDA's start once, says so on a ready
line, then takes one recipe per stdin line, each in a registry of its own
(the shipped ops, plus what the recipe declares), and answers each with its
result line. It exits at end of input, and after a job that left its CUDA
context unusable (the parent starts a fresh one).
"""
from __future__ import annotations

import base64
import json
import pickle
import sys
import time
from typing import Any

from rapid_llm.kernels.verification.worker import READY_MARK, RESULT_MARK


def register(job: dict[str, Any]) -> str:
    """Register the row a recipe describes (rapid_llm.kernels.verification.isolate.recipe) in this process; its name."""
    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.toolchain.jit_row import JitRow
    from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

    spec.all_ops()  # discover the shipped ops first: the row's op and its baseline come from there
    if job.get("declaration"):  # an op the parent's notebook declared: its declaration, written out
        load_declaration(job["op"], job["declaration"])
    golden = GoldenRecord(verified=False, baseline=job.get("baseline"))
    if job["kind"] == "jit":
        flags = tuple(job.get("flags", ("-O3",)))  # the row's own: a build with other flags is other code
        if job.get("lineinfo") and "-lineinfo" not in flags:
            flags += ("-lineinfo",)
        target = JitRow(job.get("build_from", job["source"]), job["fn"], out=job["out"], flags=flags,
                        config=job.get("config", {}))
        row = KernelSpec(name=job["name"], op=job["op"], backend="jit", target=target,
                         available="rapid_llm.kernels.toolchain.jit:available", dtypes=tuple(job["dtypes"]),
                         devices=("cuda",), golden=golden, layouts=tuple(job["layouts"]))
    else:
        row = KernelSpec(name=job["name"], op=job["op"], backend=job["backend"], target=job["target"],
                         available=job.get("available"), dtypes=tuple(job["dtypes"]),
                         devices=tuple(job["devices"]), golden=golden, layouts=tuple(job["layouts"]))
    spec.register(row, replace=True)
    return row.name


def load_declaration(op: str, path: str) -> None:
    """Import the module that declares ``op`` (rapid_llm.kernels.registry.opsource wrote it)."""
    import importlib.util

    module_spec = importlib.util.spec_from_file_location(f"rapid_llm_declared_{op}", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot import the declaration of {op!r} from {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)


def set_up(job: dict[str, Any]) -> str:
    """Register the row and build it now, so that a failure here is told apart from the kernel's own."""
    from rapid_llm.kernels.registry import spec

    name = register(job)
    spec.get_row(name).call_path()
    return name


def device_error() -> str | None:
    """None when the CUDA context still works (or there is none), else the error it gives."""
    import torch

    if not torch.cuda.is_initialized():
        return None
    try:
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    except Exception as exc:  # the context is gone: say so in the device's words
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Set the recipe's row up and verify it: the result line's fields, with the time each step took."""
    from rapid_llm.kernels.verification.golden import verify

    t0 = time.perf_counter()
    try:
        name = set_up(job)
    except Exception as exc:  # noqa: BLE001 - any failure to set up is reported, in one line
        first = (str(exc).strip().splitlines() or [""])[0]
        return {"setup_error": f"{type(exc).__name__}: {first}"}
    t1 = time.perf_counter()
    report = verify(name, dtypes=job.get("dtypes_to_check"), sizes=job.get("sizes"), record=False, isolate=False)
    t2 = time.perf_counter()
    return {"passed": report.passed, "report": str(report), "summary": str(report).splitlines()[0],
            "device_error": device_error(), "golden": report.record.to_json(),
            "report_pickle": base64.b64encode(pickle.dumps(report)).decode(),  # the parent adopts it when it passed
            "setup_s": round(t1 - t0, 4), "checks_s": round(t2 - t1, 4)}


def main(job: dict[str, Any]) -> int:
    print(RESULT_MARK + json.dumps(run_job(job)), flush=True)
    return 0


def serve() -> int:
    """The warm worker: start once, then one job per input line (see the module's docstring)."""
    t0 = time.perf_counter()
    import torch

    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.verification import golden  # noqa: F401 - its import is start-up, not a job's time

    spec.all_ops()
    if torch.cuda.is_available():
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    print(READY_MARK + json.dumps({"start_s": round(time.perf_counter() - t0, 3)}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        with spec.isolated(discover=True):
            result = run_job(json.loads(line))
        print(RESULT_MARK + json.dumps(result), flush=True)
        if result.get("device_error"):
            return 0  # this context is gone: the parent starts a fresh worker
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main(json.loads(sys.argv[1])))
