#!/usr/bin/env bash
# The new ops (reshape_and_cache_flash, top_k_top_p_sampling, moe_topk_gate) against FlashInfer and torch.compile
# of their floor, on one GPU machine, offline. From the project root:
#
#   bash benchmarks/peers/run_new_ops.sh OUTDIR [bench_new_op_peers.py args]
#
# Needs .peer-new-ops/ (benchmarks/peers/fetch_new_op_wheels.sh, run where the package registry is reachable, and
# prebuild_flashinfer.sh for the prebuilt sampling, page and routing modules; 21.7 MiB, git-ignored, carried to the GPU
# machine). Installs it into $PEER_DIR (default /tmp/peer-new-ops) with
# pip --no-index --no-deps --target (apache-tvm-ffi, and a fallback only where python3 cannot import it),
# unpacks the slim FlashInfer there, then runs benchmarks/bench_new_op_peers.py under a hard cap (CAP_S, default
# 250 s; the script stops starting new arms after BUDGET_S, default 215 s, so the cap is a last resort). Writes
# OUTDIR/env.log, pip.log, bench_new_op_peers.log (the table at its end), .json (every figure) and .txt (the table).
set -u
out=${1:?usage: bash benchmarks/peers/run_new_ops.sh OUTDIR [bench_new_op_peers.py args]}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
whl=${PEER_NEW_OPS:-$root/.peer-new-ops}
peer=${PEER_DIR:-/tmp/peer-new-ops}
t0=$(date +%s)

export PYTHONPATH=$peer:$root${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH:$peer/bin
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export PEER_BENCH_SCRATCH=${PEER_BENCH_SCRATCH:-/tmp/peer-bench}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$PEER_BENCH_SCRATCH/fi-workspace}

{
  date -u
  nvidia-smi -L 2>&1 | head -4
  echo "python3: $(command -v python3) $(python3 --version 2>&1)"
  echo "nvcc: $(command -v nvcc) $(nvcc --version 2>/dev/null | tail -1)"
  echo "ninja: $(command -v ninja)"
  echo "CUDA_HOME=$CUDA_HOME PYTHONPATH=$PYTHONPATH"
  ls -la "$whl" "$whl/fallback" 2>&1
} > "$out/env.log" 2>&1

if [ ! -f "$peer/.installed" ]; then
  mkdir -p "$peer"
  tvm=$(ls "$whl"/apache_tvm_ffi-*.whl 2>/dev/null | head -1)
  if [ -n "$tvm" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$peer" "$tvm" \
      >> "$out/pip.log" 2>&1 || echo "pip install of $tvm failed (see pip.log)" | tee -a "$out/env.log"
  else
    echo "no apache_tvm_ffi wheel in $whl" | tee -a "$out/env.log"
  fi
  txz=$(ls "$whl"/flashinfer_python-*.tar.xz 2>/dev/null | head -1)
  if [ -n "$txz" ]; then
    tar -xJf "$txz" -C "$peer" 2>> "$out/pip.log" \
      || python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$txz" "$peer" \
         >> "$out/pip.log" 2>&1 || echo "unpacking $txz failed (see pip.log)" | tee -a "$out/env.log"
  else
    echo "no slim FlashInfer in $whl: FlashInfer will be skipped" | tee -a "$out/env.log"
  fi
  # FlashInfer's modules prebuilt for sm_90a (prebuild_flashinfer.sh): its own AOT folder, loaded instead of a JIT
  # build (one that fails to load is JIT-built as usual)
  if [ -d "$whl/aot" ] && [ -d "$peer/flashinfer/data" ]; then
    cp -r "$whl/aot" "$peer/flashinfer/data/" && echo "prebuilt FlashInfer modules: $(ls "$whl/aot" | tr '\n' ' ')" \
      | tee -a "$out/env.log"
  fi
  # fallbacks: only what python3 cannot already import (what `import flashinfer` needs beyond torch, ninja for
  # its JIT; tvm_ffi needs typing_extensions >= 4.13)
  for pair in "import packaging.version:packaging" "import requests:requests" "import urllib3:urllib3" \
              "import idna:idna" "import certifi:certifi" "import charset_normalizer:charset_normalizer" \
              "import pynvml:nvidia_ml_py" "import tqdm:tqdm" "import ninja:ninja" \
              "from typing_extensions import get_annotations:typing_extensions"; do
    check=${pair%%:*}; dist=${pair#*:}
    if ! python3 -c "$check" 2>/dev/null; then
      f=$(ls "$whl"/fallback/${dist}-*.whl 2>/dev/null | head -1)
      if [ -n "$f" ]; then
        echo "fallback: installing $(basename "$f") (python3 failed: $check)" | tee -a "$out/env.log"
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$peer" "$f" \
          >> "$out/pip.log" 2>&1
      else
        echo "fallback: python3 failed '$check' and no wheel for it is carried" | tee -a "$out/env.log"
      fi
    fi
  done
  touch "$peer/.installed"
fi
echo "install: $(( $(date +%s) - t0 )) s" | tee -a "$out/env.log"

timeout -k 10 "${CAP_S:-250}" python3 "$root/benchmarks/bench_new_op_peers.py" --budget-s "${BUDGET_S:-215}" \
  --json "$out/bench_new_op_peers.json" --table "$out/bench_new_op_peers.txt" "$@" 2>&1 \
  | tee "$out/bench_new_op_peers.log"
rc=${PIPESTATUS[0]}
echo "bench_new_op_peers rc=$rc; run_new_ops.sh total $(( $(date +%s) - t0 )) s" | tee -a "$out/env.log"
exit "$rc"
