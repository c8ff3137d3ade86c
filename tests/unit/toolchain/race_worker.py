"""One process of the same-named-cells race (test_cell_race): runs ``%%cuda_jit cell`` once per round.

Usage: ``python -m tests.unit.toolchain.race_worker PROC ROUNDS OUT_JSON`` in the folder whose
``csrc/`` every process shares, with one RAPID_LLM_CACHE_DIR for all. Each round saves this process's
body for the round (``race_body``) to the same csrc/race/cell.cu as every other process, builds it, and
records the marker it meant, the binary the magic bound, and whether the build failed.
"""
from __future__ import annotations

import json
import sys
import traceback
import zlib


def marker(proc: int, rnd: int) -> str:
    """Even processes run one shared body per round (same content, racing for one key); odd ones their own."""
    return f"shared-r{rnd % 3}" if proc % 2 == 0 else f"p{proc}-r{rnd % 3}"


def factor(mark: str) -> int:
    """What the cell marked ``mark`` multiplies by: a GPU run tells the cells apart by their results too."""
    return 2 + zlib.crc32(mark.encode()) % 97


def race_body(mark: str) -> str:
    """A fast-path cell whose host code and device code each carry ``mark`` as bytes of the binary."""
    return rf"""// race: out = {factor(mark)} * input, fp32; marked {mark}
#include "common/rapid_llm.cuh"
#if RL_DEVICE
__device__ const char rl_device_mark[] = "RLDEV:{mark}:END";
__global__ void race_kernel(float* __restrict__ out, const float* __restrict__ in, int64_t n) {{
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = {factor(mark)}.0f * in[i] + (n < 0 ? rl_device_mark[i % 8] : 0);
}}
#endif
#if RL_HOST
extern "C" __attribute__((used, visibility("default"))) const char rl_host_mark[] = "RLHOST:{mark}:END";
__global__ void race_kernel(float* __restrict__ out, const float* __restrict__ in, int64_t n);
void cell(rl::Tensor out, rl::Tensor input) {{
  rl::check_cuda("race", {{out, input}});
  const int64_t n = input.numel();
  if (n == 0) return;
  rl::launch(race_kernel, rl::cdiv(n, 256), 256, 0, out.data<float>(), input.data<float>(), n);
}}
RL_EXPORT(cell)
#endif
"""


def _computes(cell, expected: int) -> bool:
    import torch

    x = torch.arange(1, 4097, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    cell(out, x)
    return bool(torch.equal(out, x * expected))


def main(proc: int, rounds: int, out: str) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("rapid_llm")
    magics = shell.magics_manager.registry["CudaJitMagics"]
    records = []
    for rnd in range(rounds):
        mark = marker(proc, rnd)
        record = {"round": rnd, "mark": mark}
        try:
            shell.run_cell_magic("cuda_jit", "cell --group race", race_body(mark))
            result = magics.builds["cell"]
            record.update(binary=result.module.__file__, cached=result.cached, build_dir=str(result.build_dir))
            if "cell" in shell.user_ns:  # bound: a GPU is here, so run it
                record["computed_own_cell"] = _computes(shell.user_ns["cell"], factor(mark))
        except BaseException:  # noqa: BLE001 - a failed build is a finding, counted by the test
            record["error"] = traceback.format_exc()[-2000:]
        records.append(record)
    with open(out, "w") as fh:
        json.dump(records, fh)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
