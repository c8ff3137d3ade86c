#!/usr/bin/env bash
# On a CUDA machine, from the project root: the peer benchmark (kept beside the project as .peer/, its wheels in
# .peer-wheels/; benchmarks/results/peer/README.md) at each model's shapes, one run a model:
#   bash scripts/gpu_peer_models.sh OUTDIR [llama3-8b llama3.2-1b llama3-70b]
# .peer/run.sh installs the peers into PEER_DIR (default /tmp/peer) and builds FlashInfer's modules first, once
# (a one-cell run); each model's run writes OUTDIR/<model>/bench_peers.{log,json}, the JSON naming its model, so
# `python benchmarks/peer_cells.py OUTDIR/*/bench_peers.json` reads them together. BUDGET_S (default 70) is each
# run's time budget; CAP_S (default BUDGET_S + 40) its hard cap.
set -uo pipefail
out=${1:?usage: scripts/gpu_peer_models.sh OUTDIR [MODEL ...]}
shift
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(llama3-8b llama3.2-1b llama3-70b)
budget=${BUDGET_S:-70}
cap=${CAP_S:-$((budget + 40))}
peer=${PEER_DIR:-/tmp/peer}
export PYTHONUNBUFFERED=1
# What .peer/run.sh sets for its run, for the later ones.
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PEER_BENCH_SCRATCH=${PEER_BENCH_SCRATCH:-/tmp/peer-bench}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$PEER_BENCH_SCRATCH/fi-workspace}
if [ ! -f "$peer/.peer-bench-installed" ]; then  # install the peers and build FlashInfer's modules, once
  mkdir -p "$out/install"
  BUDGET_S=5 CAP_S=$cap bash .peer/run.sh "$out/install" --ops rms_norm --tokens 1 > "$out/install/run.txt" 2>&1
fi
for model in "${models[@]}"; do
  dir=$out/$model
  mkdir -p "$dir"
  t0=$SECONDS
  PYTHONPATH=$peer:$PWD${PYTHONPATH:+:$PYTHONPATH} timeout -k 10 "$cap" python benchmarks/kernels/peer_model.py \
    --peer-bench .peer --model "$model" --budget-s "$budget" --json "$dir/bench_peers.json" > "$dir/bench_peers.log" 2>&1
  echo "$model: rc=$? in $((SECONDS - t0)) s" | tee -a "$out/run.log"
done
