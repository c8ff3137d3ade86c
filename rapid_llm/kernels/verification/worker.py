"""The warm child: one Python process, torch imported and CUDA started, kept ready for verify's first runs.

A fresh child per ``verify`` pays Python's start, torch's import and CUDA's
start-up (4-5 s on a GPU machine) before the checks even begin, for every
edit of a cell. The worker pays them once, in the background: it is started
when a cell's row is built (:func:`prewarm`), or by the first ``verify`` that
needs it, and then takes one job at a time over its stdin
(``python -m rapid_llm.kernels.verification.isolate_child --serve``).

Isolation is what it was: the job runs in another process, so a crash or a
hang there never touches the caller's CUDA context. A worker that crashed,
hung (killed at the time limit) or whose CUDA context a job left unusable is
discarded and a replacement starts at once, so the next ``verify`` finds one
warm again. A worker whose environment no longer matches this process's
(working directory, the ``RAPID_LLM_*``, ``CUDA_*``, ``TRITON_*`` and
``PYTORCH_*`` variables, ``PYTHONPATH``) is replaced before it is used. It
holds a CUDA context of its own (a few hundred MB of device memory) while it
lives, and exits with this process (its stdin closes).

A worker can also run under a wrapper command: ``verify(row, sanitize=...)``
keeps one warm worker per compute-sanitizer tool (memcheck's starts beside
the plain one when a cell is built, see rapid_llm.kernels.verification.isolate.prewarm;
another tool's with the first sanitized verify that asks for it, and by
:func:`prewarm` after that), so a sanitized verify pays the instrumented
start-up (4 s for memcheck's worker on an H200) once, in the background, not per call. A sanitizer worker whose
job was reported on is replaced, like one whose context was lost.
"""
from __future__ import annotations

import atexit
import json
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

__all__ = ["Answer", "ask", "prewarm", "start_seconds", "replace", "shutdown", "Wrapper", "PLAIN", "ENV_PREFIXES",
           "RESULT_MARK", "READY_MARK"]

#: The prefix of a child's result line, the one line a parent reads (a fresh child's or the worker's).
RESULT_MARK = "RAPID_LLM_CHILD_RESULT "
#: The prefix of the worker's line saying it has started.
READY_MARK = "RAPID_LLM_CHILD_READY "
#: Environment variables a worker's behaviour depends on: a change replaces the worker.
ENV_PREFIXES = ("RAPID_LLM_", "CUDA_", "TRITON_", "PYTORCH_", "PYTHONPATH")
_EOF = None  # what the reader thread queues when the worker's stdout closes


@dataclass(frozen=True)
class Answer:
    """What the worker said to one job: its result line (None if it died or hung), and the times."""

    result: dict[str, Any] | None
    status: str  # "answered" | "crashed" | "hung" | "no_start"
    output: str  # everything else it printed while on this job (a kernel's printf, a traceback)
    wait_s: float  # waiting for the worker to be ready (about 0 when it was warm)
    job_s: float  # from sending the job to its answer


#: A wrapper command and the environment it adds: () and {} for the plain worker.
Wrapper = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]
PLAIN: Wrapper = ((), ())


def _env_key(wrapper: Wrapper) -> tuple:
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)))
    return (sys.executable, os.getcwd(), env, wrapper)


class _Worker:
    """One ``--serve`` child: its process, a thread that reads its stdout into a queue, its stderr in a file."""

    def __init__(self, wrapper: Wrapper) -> None:
        self.wrapper = wrapper
        self.key = _env_key(wrapper)
        self.started = time.perf_counter()
        self.stderr: IO[bytes] = tempfile.TemporaryFile()
        command, extra_env = wrapper
        self.proc = subprocess.Popen(
            [*command, sys.executable, "-m", "rapid_llm.kernels.verification.isolate_child", "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, bufsize=1,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **dict(extra_env)))
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.ready = False
        self.start_s = math.nan  # the worker's own start-up (torch's import, CUDA's start), from its ready line
        threading.Thread(target=self._read, daemon=True, name="rapid_llm-verify-worker").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(_EOF)

    def wait_ready(self, timeout: float) -> tuple[bool, str]:
        """(ready, what it printed instead) within ``timeout`` seconds."""
        if self.ready:
            return True, ""
        seen: list[str] = []
        deadline = time.perf_counter() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.perf_counter()))
            except queue.Empty:
                return False, "\n".join(seen)
            if line is _EOF:
                return False, "\n".join(seen + [self.stderr_text()])
            if line.startswith(READY_MARK):
                self.ready = True
                self.start_s = float(json.loads(line[len(READY_MARK):]).get("start_s", math.nan))
                return True, ""
            seen.append(line)

    def stderr_size(self) -> int:
        return self.stderr.seek(0, os.SEEK_END)

    def stderr_text(self, since: int = 0) -> str:
        """What the worker wrote to stderr (from byte ``since``: one job's share)."""
        self.stderr.seek(since)
        return self.stderr.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self.stderr.close()


_lock = threading.Lock()
_workers: dict[Wrapper, _Worker] = {}
#: Wrappers asked for in this process: prewarm() keeps them warm too.
_wanted: set[Wrapper] = {PLAIN}


def _current(wrapper: Wrapper) -> _Worker:
    """The worker for this environment and wrapper, started if there is none (or it died, or the environment moved)."""
    worker = _workers.get(wrapper)
    if worker is not None and (not worker.alive() or worker.key != _env_key(wrapper)):
        worker.kill()
        worker = None
    if worker is None:
        worker = _workers[wrapper] = _Worker(wrapper)
    return worker


def prewarm(also: tuple[Wrapper, ...] = ()) -> None:
    """Start the workers this process has used (the plain one at least), and ``also`` these, in the background,
    where none runs."""
    with _lock:
        _wanted.update(also)
        for wrapper in sorted(_wanted):
            _current(wrapper)


def start_seconds(wrapper: Wrapper = PLAIN) -> float:
    """How long that worker took to start (its own figure; NaN while it has not said it is ready)."""
    worker = _workers.get(wrapper)
    return worker.start_s if worker is not None else math.nan


def ask(job: dict[str, Any], timeout: float, wrapper: Wrapper = PLAIN) -> Answer:
    """Run one recipe in the worker: its answer, or why there is none (it crashed, or hung past ``timeout``).

    ``timeout`` counts the job alone; a worker that is still starting gets as long again to be ready.
    ``wrapper`` picks the worker run under that command (a sanitizer tool's).
    """
    with _lock:
        _wanted.add(wrapper)
        worker = _current(wrapper)
        t0 = time.perf_counter()
        ready, said = worker.wait_ready(timeout)
        wait_s = time.perf_counter() - t0
        if not ready:
            _discard(worker)
            return Answer(None, "no_start", said or f"the worker did not start within {timeout:g} s", wait_s, 0.0)
        t1 = time.perf_counter()
        mark = worker.stderr_size()
        try:
            assert worker.proc.stdin is not None
            worker.proc.stdin.write(json.dumps(job) + "\n")
            worker.proc.stdin.flush()
        except OSError:
            _discard(worker)
            return Answer(None, "crashed", worker.stderr_text(mark), wait_s, 0.0)
        output: list[str] = []
        deadline = t1 + timeout
        while True:
            try:
                line = worker.lines.get(timeout=max(0.0, deadline - time.perf_counter()))
            except queue.Empty:
                _discard(worker)
                return Answer(None, "hung", "\n".join(output), wait_s, time.perf_counter() - t1)
            if line is _EOF:
                code = worker.proc.wait()
                text = "\n".join(output + [worker.stderr_text(mark), f"(exit status {code})"])
                _discard(worker)
                return Answer(None, "crashed", text, wait_s, time.perf_counter() - t1)
            if line.startswith(RESULT_MARK):
                result = json.loads(line[len(RESULT_MARK):])
                if result.get("device_error"):
                    _discard(worker)  # it exits by itself; its context is gone
                return Answer(result, "answered", "\n".join(output), wait_s, time.perf_counter() - t1)
            output.append(line)


def _discard(worker: _Worker) -> None:
    """Kill ``worker`` and start its replacement, so the next verify finds one warm (lock held)."""
    worker.kill()
    if _workers.get(worker.wrapper) is worker:
        del _workers[worker.wrapper]
    _current(worker.wrapper)


def replace(wrapper: Wrapper) -> None:
    """Replace that wrapper's worker (a sanitizer worker whose job was reported on: its print limit and its
    state are spent)."""
    with _lock:
        worker = _workers.get(wrapper)
        if worker is not None:
            _discard(worker)


def shutdown() -> None:
    """Stop every worker (at exit, and for tests)."""
    with _lock:
        for worker in list(_workers.values()):
            worker.kill()
        _workers.clear()


atexit.register(shutdown)
