"""sweep on a GPU: a cell's source travels to the pool's worker, is compiled and verified there, and is timed
beside the shipped row on the same device; its records name the GPU kind, driver and CUDA dispatch sees. The CPU
checks are in tests/unit/bench/test_sweep.py."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.bench.sweeps import LocalPool, sweep
from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch import measurements
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels.toolchain.digests import code_digest
from rapid_llm.kernels.toolchain.jit_row import JitRow
from tests.unit.bench.conftest import isolated_store  # noqa: F401 - autouse: each bench test gets its own store

pytestmark = pytest.mark.gpu

CELL = "jit/sweep_cell"


def _cell_text() -> str:
    """The shipped scale row's source, as a notebook cell would hold it (no row line)."""
    text = (platform.OPS_DIR / "elementwise" / "scale" / "scale.cu").read_text()
    return "\n".join(line for line in text.splitlines() if not line.startswith("// rapid_llm row:")) + "\n"


def test_a_cell_is_shipped_compiled_verified_and_timed_beside_the_shipped_row(tmp_path):
    source = tmp_path / "csrc" / "elementwise" / "sweep_cell.cu"
    source.parent.mkdir(parents=True)
    text = _cell_text()
    source.write_text(text)
    built = jit.build_jit("sweep_cell", source, text=text)
    with spec.isolated(discover=True):
        spec.register(KernelSpec(name=CELL, op="scale", backend="jit",
                                 target=JitRow(source, "scale_vec", launcher=built.module.scale_vec,
                                               built_from=built.compiled_source),
                                 available="rapid_llm.kernels.toolchain.jit:available", dtypes=("bf16",),
                                 devices=("cuda",), golden=GoldenRecord(verified=False, baseline="native/scale")))
        digest = code_digest(spec.get_row(CELL))
        result = sweep(["scale"], rows=["native/scale", "jit/scale", CELL], numels=(1 << 20,), dtypes=("bf16",),
                       forms=False, executor=LocalPool(), warmup=2, repeats=10)
    assert result.failures == [], result.table()
    by_row = {r.row: r for r in result.records}
    assert set(by_row) == {"native/scale", "jit/scale", CELL}
    assert by_row[CELL].source_digest == digest  # compiled on the worker from the text sent: the same code
    assert len({r.worker for r in result.records}) == 1
    env = by_row[CELL].env
    assert env.gpu_kind == torch.cuda.get_device_name() and env.cuda == torch.version.cuda and env.driver
    (path,) = result.merge(tmp_path / "ops")
    assert path.name == f"{platform.slug(env.gpu_kind)}.json"
    doc = measurements.load_file(path)
    assert doc["meta"]["driver"] == env.driver and doc["meta"]["l2_bytes"] > 0
    print("\n" + str(result))
