"""Sweeps on a Ray cluster: the same tasks as the local pool, run by Ray actors pinned to one GPU each.

An actor (``num_gpus=1``) keeps its process, its CUDA context and what it built for
the whole sweep (a Ray GPU *task* gets a fresh process each time by default, paying
torch's import and CUDA's start again); each runs one task at a time, all its rows on
its one device. Where the cluster's nodes carry Ray's accelerator labels
(``accelerator_type:H100``), each kind gets actors of its own (``accelerator_type=``)
and every task runs once per kind; the label is kept in each record's environment,
and the figures file is named by the device name the worker's torch reports (what
dispatch looks up). A cluster without GPUs gets CPU actors, which time the rows a
CPU can run (Triton's interpreter serving).

An actor that dies takes only its task (``crashed``, with Ray's error) and is replaced.
Ray is optional: ``pip install -e .[ray]``.
"""
from __future__ import annotations

import collections
import os
from typing import Any, Callable, Sequence

from rapid_llm.bench.sweeps.local import crashed_records
from rapid_llm.bench.sweeps.records import Record
from rapid_llm.bench.sweeps.tasks import Task, worker_env

__all__ = ["RayExecutor", "require_ray", "RAY_EXTRA"]

RAY_EXTRA = "pip install -e .[ray]  (or pip install 'ray>=2.40')"


def require_ray() -> Any:
    """The ray module, or an ImportError that names the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"executor='ray' needs Ray, which is not installed here: {RAY_EXTRA}; "
                          "executor='local' (the default) runs one worker per visible GPU without it") from exc
    return ray


class _SweepActor:
    """The body of a Ray actor: one device, one task at a time (rapid_llm.bench.sweeps.tasks.run_task)."""

    def __init__(self, accelerator: str | None, label: str) -> None:
        self.accelerator = accelerator
        self.label = label

    def hello(self) -> Any:
        from rapid_llm.bench.sweeps.tasks import environment

        return environment(self.accelerator)

    def run(self, task: Task) -> list[Record]:
        from rapid_llm.bench.sweeps.tasks import run_task

        return run_task(task, self.accelerator, worker=self.label)


class RayExecutor:
    """Run a sweep's tasks on Ray: ``address`` None joins the running cluster or starts a local one."""

    name = "ray"

    def __init__(self, address: str | None = None, *, gpus_per_kind: int | None = None, cpu_workers: int = 1,
                 accelerator_types: Sequence[str] | None = None, runtime_env: dict[str, Any] | None = None,
                 init_kwargs: dict[str, Any] | None = None) -> None:
        self.ray = require_ray()
        self.address = address
        self.gpus_per_kind = gpus_per_kind
        self.cpu_workers = cpu_workers
        self.accelerator_types = list(accelerator_types) if accelerator_types is not None else None
        self.runtime_env = dict(runtime_env or {})
        self.init_kwargs = dict(init_kwargs or {})
        self.workers = 0

    def _connect(self) -> bool:
        """Join (or start) a cluster; True when this executor started it and so shuts it down."""
        if self.ray.is_initialized():
            return False
        kwargs = {"include_dashboard": False, "log_to_driver": False, **self.init_kwargs}
        if self.address is None and not os.environ.get("RAY_ADDRESS"):
            # A cluster of its own: Ray would renice its workers to 15, and on a busy machine the workers that time
            # the kernels would then wait behind every other process.
            kwargs["_system_config"] = {"worker_niceness": 0, **kwargs.get("_system_config", {})}
        self.ray.init(address=self.address, **kwargs)
        return True

    def _shapes(self) -> list[tuple[str | None, bool, int]]:
        """(accelerator label or None, uses a GPU, how many actors) for each kind of device to sweep."""
        totals = self.ray.cluster_resources()
        gpus = int(totals.get("GPU", 0))
        if gpus == 0:
            return [(None, False, max(1, self.cpu_workers))]
        labels: dict[str, int] = collections.Counter()
        for node in self.ray.nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources", {})
            for key in res:
                if key.startswith("accelerator_type:"):
                    labels[key.split(":", 1)[1]] += int(res.get("GPU", 0))
        kinds = self.accelerator_types or sorted(labels)
        if not kinds:
            return [(None, True, self.gpus_per_kind or gpus)]
        return [(k, True, min(self.gpus_per_kind or labels.get(k, 1), labels.get(k, 1)) or 1) for k in kinds]

    def _actor(self, accelerator: str | None, gpu: bool, label: str) -> Any:
        env = dict(self.runtime_env)
        env["env_vars"] = {**worker_env(cpu=not gpu), **env.get("env_vars", {})}
        options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 1} if gpu else {"num_cpus": 1}
        if accelerator is not None:
            options["accelerator_type"] = accelerator
        cls = self.ray.remote(max_restarts=0, max_task_retries=0)(_SweepActor)
        return cls.options(runtime_env=env, **options).remote(accelerator, label)

    def run(self, tasks: Sequence[Task], on_records: Callable[[list[Record]], None] | None = None) -> list[Record]:
        """Run ``tasks`` once per device kind of the cluster; every record."""
        ray = self.ray
        started = self._connect()
        out: list[Record] = []

        def emit(records: list[Record]) -> None:
            out.extend(records)
            if on_records is not None:
                on_records(records)

        try:
            shapes = self._shapes()
            self.workers = sum(n for _, _, n in shapes)
            pending: dict[Any, tuple[Any, Task, str, str | None, bool]] = {}
            queues = {kind: collections.deque(tasks) for kind, _, _ in shapes}
            made: collections.Counter[str | None] = collections.Counter()
            envs: dict[str | None, Any] = {}

            def submit(actor: Any, kind: str | None, gpu: bool, label: str) -> None:
                if queues[kind]:
                    task = queues[kind].popleft()
                    pending[actor.run.remote(task)] = (actor, task, label, kind, gpu)

            for kind, gpu, n in shapes:
                for i in range(n):
                    label = f"ray {kind or ('gpu' if gpu else 'cpu')} {i}"
                    made[kind] += 1
                    submit(self._actor(kind, gpu, label), kind, gpu, label)
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                ref = done[0]
                actor, task, label, kind, gpu = pending.pop(ref)
                try:
                    records = ray.get(ref)
                    if records:
                        envs[kind] = records[0].env
                    emit(records)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
                    text = str(exc)
                    emit(crashed_records(task, f"Ray worker {label} died: {text[-1500:]}", envs.get(kind), label))
                    ray.kill(actor, no_restart=True)
                    made[kind] += 1
                    label = f"ray {kind or ('gpu' if gpu else 'cpu')} {made[kind] - 1}"
                    actor = self._actor(kind, gpu, label)
                except ray.exceptions.RayTaskError as exc:  # run_task itself raised: the task's failure
                    emit(crashed_records(task, f"error in Ray worker {label}: {str(exc)[-1500:]}", envs.get(kind),
                                         label))
                submit(actor, kind, gpu, label)
        finally:
            if started:
                ray.shutdown()
        return out

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r})"
