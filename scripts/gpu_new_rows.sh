#!/usr/bin/env bash
# On a CUDA machine, from the project root: verify and time the rows that ship golden-unverified until a GPU has
# run them (gluon/rms_norm and the CUDA rows of reshape_and_cache_flash, moe_topk_gate, top_k_top_p_sampling), at
# the shapes their figures are judged by, and the decode step of benchmarks/models. Logs go to OUTDIR, one per
# step; --results steps write figures into the ops' folders (what to commit).
#   1. verify every unverified row here and print each report (the per-dtype max |diff| a golden record needs);
#   2. bench_op.py --verify for rms_norm (the Gluon row beside the others) and the three new ops;
#   3. benchmarks/models/bench_decode.py: the decode step's arms, then the layer's two forms under reduce-overhead.
set -uo pipefail
out=${1:?usage: scripts/gpu_new_rows.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
limit=${STEP_TIMEOUT:-150}
step() { local name=$1; shift; echo "=== $name" | tee -a "$out/run.log"; local t0=$SECONDS
  timeout -s INT "$limit" "$@" > "$out/$name.log" 2>&1; echo "rc=$? in $((SECONDS - t0)) s" | tee -a "$out/run.log"
  tail -n "${TAIL:-15}" "$out/$name.log"; }
step verify python - <<'PY'
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify
for name in ("gluon/rms_norm", "jit/reshape_and_cache_flash", "jit/moe_topk_gate", "jit/top_k_top_p_sampling"):
    try:
        print(verify(name, record=False), flush=True)
    except Exception as exc:  # noqa: BLE001 - each row's answer is reported, the next still runs
        print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
PY
step bench_rms_norm python benchmarks/bench_op.py rms_norm --verify --tokens 1 16 128 1024 4096 16384 --dtypes bf16 \
  ${RESULTS:+--results}
step bench_cache python benchmarks/bench_op.py reshape_and_cache_flash --verify --tokens 1 16 64 128 1024 16384 \
  --dtypes bf16 ${RESULTS:+--results}
step bench_gate python benchmarks/bench_op.py moe_topk_gate --verify --tokens 1 16 64 128 1024 --dtypes bf16 \
  ${RESULTS:+--results}
step bench_sampling python benchmarks/bench_op.py top_k_top_p_sampling --verify --sizes 131072 1048576 16777216 \
  --dtypes fp32 ${RESULTS:+--results}
[ "${DECODE:-1}" = 0 ] && exit 0  # DECODE=0: the rows only
step decode python benchmarks/models/bench_decode.py --device cuda
step decode_layer_forms python benchmarks/models/bench_decode.py --device cuda --layer-forms
