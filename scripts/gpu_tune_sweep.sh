#!/usr/bin/env bash
# On a CUDA machine, from the project root: tune the shipped tunable rows, then sweep every op, so the committed
# figures measure the pinned variants. Writes into the checkout (what to commit) and OUTDIR (logs, and
# tuned_and_figures.tar of the pin tables and figures files written):
#   1. the host cost of the CUDA rows' argument checks (bench_row_checks.py);
#   2. tune jit/rms_norm and triton/rms_norm over their declared variants: pins in ops/norm/rms_norm/tuned/;
#   3. sweep.py --results --replace: every op's figures for this GPU kind, ops/<group>/<op>/figures/<gpu>.json
#      (scale, which has no token shape, through bench_op.py --results);
#   4. bench_tune.py: the 108-candidate CUDA rms_norm (benchmarks/tune/), the verified-autotune figure.
# Each step has its own time limit (STEP_TIMEOUT, seconds); a step that fails is logged and the next runs.
# SWEEP_ARGS adds arguments to step 3 (e.g. "--task-timeout 60": a task past it is killed and named, the sweep goes on).
# TUNE=0 leaves step 2 out (the pins already committed for this GPU kind hold, or none); BENCH_TUNE=0 leaves step 4 out (it measures tune itself, not the figures; one GPU kind's run shows it).
set -uo pipefail
out=${1:?usage: scripts/gpu_tune_sweep.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
limit=${STEP_TIMEOUT:-240}
step() { local name=$1; shift; echo "=== $name" | tee -a "$out/run.log"; local t0=$SECONDS
  timeout -s INT "$limit" "$@" > "$out/$name.log" 2>&1; echo "rc=$? in $((SECONDS - t0)) s" | tee -a "$out/run.log"
  tail -n "${TAIL:-25}" "$out/$name.log"; }
step row_checks python benchmarks/kernels/bench_row_checks.py --device cuda
[ "${TUNE:-1}" = 0 ] || step tune_shipped python - <<'PY'
from rapid_llm.bench.tune import tune
for row in ("jit/rms_norm", "triton/rms_norm"):
    print(tune(row, replace=True).summary(), flush=True)
PY
written() { git ls-files -mo --exclude-standard -- 'rapid_llm/kernels/ops/*/*/figures/*.json' \
  'rapid_llm/kernels/ops/*/*/tuned/*.json' | tar -cf "$out/tuned_and_figures.tar" -T -; }
written
# shellcheck disable=SC2086  (SWEEP_ARGS: more sweep.py arguments, e.g. --task-timeout 60)
step sweep python benchmarks/sweep.py --results --replace --json "$out/sweep.json" ${SWEEP_ARGS:-}
written
step bench_op_scale python benchmarks/bench_op.py scale --results
written
git status --porcelain -- rapid_llm/kernels/ops | tee -a "$out/run.log"
[ "${BENCH_TUNE:-1}" = 0 ] || step bench_tune python benchmarks/bench_tune.py --json "$out/bench_tune.json"
