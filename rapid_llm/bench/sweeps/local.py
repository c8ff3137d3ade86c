"""The default executor: one worker process per visible GPU on this machine (one CPU worker without a GPU).

Each worker is a fresh process (``python -m rapid_llm.bench.sweeps.worker``) with
``CUDA_VISIBLE_DEVICES`` pinned to its GPU, so it owns one CUDA context on one device
and times every row of a task there. A worker that dies (a kernel that faults, a
segfault, ``os._exit``) or outlives ``task_timeout_s`` takes only its task with it: the
task's records say ``crashed`` with the tail of the worker's stderr, a new worker takes
its place, and the sweep goes on.

Each task is run once per GPU kind among the workers (on a machine with two kinds,
both get every task; identical GPUs share the tasks between them).
"""
from __future__ import annotations

import collections
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from rapid_llm.bench.sweeps import worker as _wire
from rapid_llm.bench.sweeps.records import Environment, Record
from rapid_llm.bench.sweeps.tasks import Task, worker_env

__all__ = ["LocalPool", "visible_gpus", "crashed_records"]


def visible_gpus() -> list[str]:
    """The GPUs a pool may pin workers to: ``CUDA_VISIBLE_DEVICES``'s entries when set, else the devices torch
    counts (through NVML where it can, which starts no CUDA context here)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        entries = [e.strip() for e in given.split(",") if e.strip()]
        out = []
        for e in entries:
            if e.lstrip("-").isdigit() and int(e) < 0:
                break  # CUDA stops at the first invalid index
            out.append(e)
        return out
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no usable CUDA: the CPU worker serves
        return []


def crashed_records(task: Task, why: str, env: Environment | None, worker: str = "") -> list[Record]:
    """The records of a task whose worker died: one per named row, else one for the whole task."""
    env = env or Environment(gpu_kind="unknown", driver=None, cuda=None, torch="", commit="")
    rows = task.rows or ("(every row)",)
    return [Record(op=task.op, form=task.form, row=r, dtype=task.dtype, numel=task.numel, env=env, status="crashed",
                   detail=why, worker=worker) for r in rows]


class _Died(Exception):
    pass


class _Worker:
    """One worker process and its stderr file."""

    def __init__(self, label: str, env: dict[str, str], folder: Path, python: str) -> None:
        self.label = label
        self.stderr_path = folder / f"{label.replace(' ', '_')}.{time.monotonic_ns()}.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([python, "-m", "rapid_llm.bench.sweeps.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, env=env, bufsize=0)
        self.env: Environment | None = None

    def _read(self, n: int, deadline: float | None) -> bytes:
        chunks, left = [], n
        fd = self.proc.stdout.fileno()
        while left:
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                    raise TimeoutError
            chunk = os.read(fd, left)
            if not chunk:
                raise _Died
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def receive(self, timeout_s: float | None) -> Any:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        (size,) = _wire._HEADER.unpack(self._read(_wire._HEADER.size, deadline))
        import pickle

        return pickle.loads(self._read(size, deadline))

    def send(self, message: Any) -> None:
        try:
            _wire.send(self.proc.stdin, message)
        except (BrokenPipeError, OSError):
            raise _Died from None

    def stderr_tail(self, start: int = 0, n: int = 2000) -> str:
        try:
            data = self.stderr_path.read_bytes()[start:]
        except OSError:
            return ""
        text = data.decode(errors="replace").strip()
        return text if len(text) <= n else "..." + text[-n:]

    def stderr_size(self) -> int:
        try:
            return self.stderr_path.stat().st_size
        except OSError:
            return 0

    def stop(self, kill: bool = False) -> int | None:
        if kill and self.proc.poll() is None:
            self.proc.kill()
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._stderr.close()
        if self.proc.stdout:
            self.proc.stdout.close()
        return code


class LocalPool:
    """One worker process per visible GPU (or ``devices``), one CPU worker where there is none."""

    name = "local"

    def __init__(self, devices: Sequence[str] | None = None, *, task_timeout_s: float | None = None,
                 start_timeout_s: float = 300.0, python: str | None = None, env: dict[str, str] | None = None) -> None:
        self.devices = list(devices) if devices is not None else None
        self.task_timeout_s = task_timeout_s
        self.start_timeout_s = start_timeout_s
        self.python = python or sys.executable
        self.extra_env = dict(env or {})
        self.workers = 0

    def slots(self) -> list[str | None]:
        """The GPU each worker is pinned to; [None]: one CPU worker."""
        gpus = self.devices if self.devices is not None else visible_gpus()
        return list(gpus) or [None]

    def _environ(self, gpu: str | None, label: str) -> dict[str, str]:
        env = dict(os.environ)
        if gpu is None:
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        env.update(worker_env(cpu=gpu is None))
        env["RAPID_LLM_SWEEP_WORKER"] = label
        # the worker imports the same rapid_llm as this process, whatever its working directory
        package_root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
        env.update(self.extra_env)
        return env

    def run(self, tasks: Sequence[Task], on_records: Callable[[list[Record]], None] | None = None) -> list[Record]:
        """Run ``tasks`` (once per GPU kind present) and return every record; ``on_records`` hears each task's."""
        slots = self.slots()
        self.workers = len(slots)
        lock = threading.Lock()
        queues: dict[str, collections.deque[Task]] = {}
        out: list[Record] = []

        def emit(records: list[Record]) -> None:
            with lock:
                out.extend(records)
            if on_records is not None:
                on_records(records)

        with tempfile.TemporaryDirectory(prefix="rapid_llm_sweep_") as folder:
            alive: collections.Counter[str] = collections.Counter()
            start_failures: list[tuple[str, str]] = []

            def serve(slot: str | None, index: int) -> None:
                label = f"cpu {index}" if slot is None else f"gpu {slot}"
                env = self._environ(slot, label)
                kind: str | None = None
                while True:
                    w = _Worker(label, env, Path(folder), self.python)
                    try:
                        _, w.env = w.receive(self.start_timeout_s)
                    except (_Died, TimeoutError, ValueError) as exc:
                        why = ("did not start in time" if isinstance(exc, TimeoutError) else "died starting") + \
                              f" (exit {w.stop(kill=True)}): {w.stderr_tail()}"
                        with lock:
                            if kind is None:
                                start_failures.append((label, why))
                                return
                            alive[kind] -= 1  # the last worker of its kind takes the kind's tasks with it
                            left = list(queues[kind]) if alive[kind] == 0 else []
                            if left:
                                queues[kind].clear()
                        for t in left:
                            emit(crashed_records(t, f"worker {label} {why}", None, label))
                        return
                    if kind is None:
                        kind = w.env.gpu_kind
                        with lock:
                            queues.setdefault(kind, collections.deque(tasks))
                            alive[kind] += 1
                    while True:
                        with lock:
                            task = queues[kind].popleft() if queues[kind] else None
                        if task is None:
                            w.stop()
                            return
                        start = w.stderr_size()
                        try:
                            w.send(("task", task))
                            _, records = w.receive(self.task_timeout_s)
                        except (TimeoutError, _Died) as exc:
                            code = w.stop(kill=True)
                            why = (f"timed out after {self.task_timeout_s} s (killed, exit {code})"
                                   if isinstance(exc, TimeoutError) else f"exit {code}")
                            emit(crashed_records(task, f"worker {label} died ({why}); stderr: "
                                                 f"{w.stderr_tail(start) or '(empty)'}", w.env, label))
                            break  # a fresh worker takes its place
                        emit(records)

            threads = [threading.Thread(target=serve, args=(slot, i), daemon=True) for i, slot in enumerate(slots)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if not queues and start_failures:
            label, why = start_failures[0]
            raise RuntimeError(f"sweep: no worker started ({label} {why})")
        return out

    def __repr__(self) -> str:
        return f"LocalPool(devices={self.slots()!r})"
