#!/usr/bin/env bash
# On a CUDA machine (sm_90+) with the CuTe DSL, from the project root: check and time cute/rms_norm. Logs go to
# OUTDIR, one per step, and a summary to OUTDIR/run.log.
#   0. the DSL: from .cute-site/ when scripts/install_cute_wheels.sh put it there (an offline machine), else the
#      Python's own; the probe's answer and explain's verdict for the row;
#   1. the GPU tests of the row (oracle in every dtype at aligned, odd and strided shapes, checks, verify, graph
#      replay, a fresh process reloading the build without the DSL: its load time is printed) and of a notebook
#      cell's kernel (cute_launcher: torch's results, a row that passes verify, its host cost per call);
#   2. bench_op.py rms_norm --verify at T = 1..16384, hidden 4096, bf16, every row (the copy roofline, host_us);
#   3. benchmarks/bench_cute_paths.py: host cost per call of the row against the DSL's own call paths.
# RESULTS=1 adds --results to step 2 (writes the op's figures: what to commit). STEPS picks steps (default
# "probe tests bench paths"), e.g. STEPS="bench paths" for a second run on the same machine.
set -uo pipefail
out=${1:?usage: scripts/gpu_cute.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -d .cute-site/nvidia_cutlass_dsl ]; then
  site=$(cd .cute-site && pwd)
  export PYTHONPATH="$site:$site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
fi
limit=${STEP_TIMEOUT:-300}
steps=" ${STEPS:-probe tests bench paths} "
want() { [[ $steps == *" $1 "* ]]; }
step() { local name=$1; shift; echo "=== $name" | tee -a "$out/run.log"; local t0=$SECONDS
  timeout -s INT "$limit" "$@" > "$out/$name.log" 2>&1; echo "rc=$? in $((SECONDS - t0)) s" | tee -a "$out/run.log"
  tail -n "${TAIL:-15}" "$out/$name.log"; }
want probe && step probe python - <<'PY'
import torch
import rapid_llm.kernels as K
from rapid_llm.kernels.toolchain import cute_support
print("nvidia-cutlass-dsl", cute_support.dsl_version(), "installed:", cute_support.installed())
print("device:", torch.cuda.get_device_name(), torch.cuda.get_device_capability(), "torch", torch.__version__)
print(K.explain("rms_norm", dtype="bf16", device=torch.device("cuda"), numel=4096 * 16384))
PY
want tests && step tests python -m pytest -q -s -p no:cacheprovider tests/gpu/ops/test_rms_norm_cute.py \
  tests/gpu/unit/toolchain/test_cute_cells.py tests/unit/toolchain/test_cute_build.py \
  tests/unit/toolchain/test_cute_cells.py
want tests && grep -h "reload in a fresh process\|host cost per call" "$out/tests.log" | tee -a "$out/run.log"
want bench && step bench_rms_norm python benchmarks/bench_op.py rms_norm --verify --tokens 1 16 128 1024 4096 16384 \
  --dtypes bf16 ${RESULTS:+--results}
want paths && step call_paths python benchmarks/bench_cute_paths.py
want paths && tail -n 12 "$out/call_paths.log" >> "$out/run.log"
exit 0
