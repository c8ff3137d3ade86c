"""sweep on a local Ray cluster on CPU gives the same merged records as the local pool.

Ray is an optional extra (``pip install -e .[ray]``); without it this file skips with the reason.
"""
from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (the optional extra: pip install -e .[ray])")

from rapid_llm.bench.sweeps import LocalPool, RayExecutor, sweep  # noqa: E402

QUICK = dict(tokens=(1,), dtypes=("fp32",), warmup=1, repeats=5)
OPS = ["rms_norm", "silu_and_mul"]


#: Ray starts idle workers ahead of demand (one per CPU, and one for the first driver), each a Python process that
#: imports Ray: about 2 s of CPU apiece on CI's two cores, for workers this test never uses (its one actor gets a
#: process of its own when it is created). And Ray renices its workers to 15, so beside the other test workers on CI's
#: two cores the actor got a few per cent of a core: the same four tasks took 9-70 s across CI runs, 135 s beside two
#: busy processes, and 13.8 s there at the caller's priority (worker_niceness 0, as RayExecutor starts a cluster).
CLUSTER_CONFIG = {"enable_worker_prestart": False, "prestart_worker_first_driver": False, "worker_niceness": 0}


@pytest.fixture
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _system_config=CLUSTER_CONFIG)
    yield
    ray.shutdown()


def _merged(result, root) -> dict[str, dict]:
    """Each merged entry by file and key: what dispatch would read, without the measured values."""
    out = {}
    for path in result.merge(root):
        doc = json.loads(path.read_text())
        for key, e in doc["entries"].items():
            out[f"{path.relative_to(root).as_posix()}:{key}"] = (e["row"], e["source_digest"], e["commit"], e["torch"])
    return out


def test_ray_on_cpu_gives_the_local_pools_records(ray_cluster, tmp_path, record_property):
    on_ray = sweep(OPS, executor=RayExecutor(), **QUICK)
    local = sweep(OPS, executor=LocalPool(), **QUICK)
    assert on_ray.failures == [] and local.failures == []
    assert on_ray.executor == "ray" and on_ray.gpu_kinds() == ["cpu"]
    assert on_ray.keys() == local.keys()  # (kind, driver, CUDA, torch, digest, commit, op, form, row, dtype, numel)
    assert len({r.worker for r in on_ray.figures}) == 1  # one CPU actor served every task
    assert _merged(on_ray, tmp_path / "ray") == _merged(local, tmp_path / "local")
    line = (f"Ray sweep on a local CPU cluster: {len(on_ray.figures)} records, same keys, rows and digests as the "
            f"local pool's ({on_ray.seconds:.1f} s on Ray, {local.seconds:.1f} s local)")
    record_property("ray_sweep", line)  # the run's summary prints it (tests/conftest.py)
    print(f"\n{line}")
