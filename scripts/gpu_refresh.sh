#!/usr/bin/env bash
# After the shipped rows change: re-measure and re-render what depends on them, on a CUDA machine,
# from the project root:
#   1. notebook 01 builds, verifies and promotes scale_vec (into a scratch copy of the package: the
#      tutorials never change the checkout; to ship a cell, call promote() yourself);
#   2. benchmarks/bench_op.py re-measures every row of scale and rewrites its committed figures
#      (rapid_llm/kernels/ops/elementwise/scale/figures/<gpu>.json, <gpu> the GPU kind: nvidia_h200 on an H200);
#   3. notebooks 01-09 are executed with those figures, then checked with strict nbval;
#   4. explain on the GPU, with the default store and with an empty one (the same row must win);
#   5. the test suite.
# Logs and the files to commit go to OUTDIR.
set -uo pipefail
out=${1:?usage: scripts/gpu_refresh.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 RAPID_LLM_CACHE_DIR=${RAPID_LLM_CACHE_DIR:-$(mktemp -d -t rapid_llm_gpu_XXXX)}
log="$out/gpu_run.log"
gpu=$(python -c "from rapid_llm.kernels import platform; print(platform.slug(platform.device_label('cuda')))")
figures="rapid_llm/kernels/ops/elementwise/scale/figures/$gpu.json"
say() { echo "=== $*" | tee -a "$log"; }
say "notebook 01 (promote)"; python scripts/run_notebooks.py notebooks/01_add_jit_kernel.ipynb 2>&1 | grep -v WARNING | tee -a "$log"
say "bench_op scale"; python benchmarks/bench_op.py scale --results 2>&1 | tee -a "$log"
say "notebooks (a fresh build cache, so the stored outputs show real build times)"
nb_cache=$(mktemp -d -t rapid_llm_nb_XXXX)
RAPID_LLM_CACHE_DIR=$nb_cache python -c "from rapid_llm.kernels.toolchain.fastpath.builder import warm; warm()"
RAPID_LLM_CACHE_DIR=$nb_cache python scripts/run_notebooks.py notebooks/0*.ipynb 2>&1 | grep -v WARNING | tee -a "$log"
cp notebooks/0*.ipynb "$figures" "$out"/
say "nbval"; python -m pytest --nbval notebooks -q -p no:cacheprovider 2>&1 | tail -5 | tee -a "$log"
say "explain"; python - <<'PY' 2>&1 | tee -a "$log"
import os, subprocess, sys, tempfile
code = ("import torch, rapid_llm.kernels as K; x = torch.ones(1 << 28, device='cuda', dtype=torch.bfloat16); "
        "print(K.explain('scale', x)); y = torch.ones(1 << 20, device='cuda', dtype=torch.bfloat16); "
        "print(K.explain('scale', y))")
for label, env in (("default store", dict(os.environ)),
                   ("empty local store", dict(os.environ, RAPID_LLM_CACHE_DIR=tempfile.mkdtemp()))):
    print(f"--- {label}")
    print(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)
PY
say "tests"; timeout "${TESTS_TIMEOUT:-240}" python -m pytest tests -q -rfEs -p no:cacheprovider 2>&1 | tail -25 | tee -a "$log"
