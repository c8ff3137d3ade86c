#!/usr/bin/env bash
# Everything that only a CUDA machine exercises, with its logs kept under OUTDIR.
#
#   scripts/gpu_validate.sh OUTDIR tests   # the whole test suite (JIT rows, magic builds, capture)
#   scripts/gpu_validate.sh OUTDIR suite   # the same suite in 4 concurrent shards of test files, beside strict
#                                          # nbval of every notebook (for a machine with many cores)
#   scripts/gpu_validate.sh OUTDIR jit     # build times, fast path against torch's loader (JSON in OUTDIR, for
#                                          # benchmarks/results/jit/), and the per-call cost of both
#   scripts/gpu_validate.sh OUTDIR bench   # scale benchmark (its figures written into
#                                          # rapid_llm/kernels/ops/elementwise/scale/figures/<gpu>.json),
#                                          # harness checks, dispatch overhead, widget PNGs for docs/
#   scripts/gpu_validate.sh OUTDIR llm     # the LLM ops over tokens against torch.compile (each op's figures
#                                          # written into rapid_llm/kernels/ops/<group>/<op>/figures/<gpu>.json,
#                                          # the log for benchmarks/results/logs/)
#   scripts/gpu_validate.sh OUTDIR checks  # verify's defect kernels, the sanitizer, strided dispatch, a kernel's
#                                          # printf in its cell, SASS in inspect(), profile() under ncu,
#                                          # occupancy against the driver, notebook 08, dispatch overhead
#   scripts/gpu_validate.sh OUTDIR newop   # a notebook's op all the way (notebook 09 in a fresh kernel, verify
#                                          # in a child and under memcheck, promote into a copy, a new process),
#                                          # the shipped .cu rows compiled per arch (NVRTC here), notebook 09's
#                                          # outputs saved and checked with strict nbval
#   scripts/gpu_validate.sh OUTDIR models  # the decoder layer in six arms (JSON for benchmarks/results/models/),
#                                          # custom-op call cost, strided rows from CUDA graphs
#   scripts/gpu_validate.sh OUTDIR compare # compare's A/A and 3 % power experiment, notebook 04 (compare cells)
#                                          # re-executed and checked with strict nbval
#   scripts/gpu_validate.sh OUTDIR verify  # verify's speed (warm worker, fresh child, memcheck), the cheat kernels
#                                          # against bench and verify, notebook 07 executed (outputs saved) and
#                                          # checked with strict nbval
#   scripts/gpu_validate.sh OUTDIR parallel # the whole suite over WORKERS pytest-xdist workers (default 8, tests
#                                          # dealt one at a time), compare's timing tests alone after it, then
#                                          # strict nbval of every notebook over the workers (one notebook each)
#   scripts/gpu_validate.sh OUTDIR shards FILE...  # the given test files dealt over 4 concurrent pytest shards
#                                          # (largest first), for a re-run of part of the suite
#   scripts/gpu_validate.sh OUTDIR quant   # scaled_fp8_quant and merge_attn_states: every GPU test, vLLM's
#                                          # matrices included, and their figures over tokens (written into
#                                          # their ops' figures/<gpu>.json)
#
# <gpu> is the GPU kind as the figures files name it (nvidia_h200 on an H200); figures written into the
# package are the committed ones: review them with git diff before committing.
# Run from the project root. RAPID_LLM_CACHE_DIR, when set, is shared by the steps so the
# JIT sources are built once; the build-time benchmark always uses caches of its own.
set -uo pipefail
out=${1:?usage: scripts/gpu_validate.sh OUTDIR tests|suite|parallel|shards|jit|bench|llm|checks|newop|models|compare|verify|quant}
stage=${2:?usage: scripts/gpu_validate.sh OUTDIR tests|suite|parallel|shards|jit|bench|llm|checks|newop|models|compare|verify|quant}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
export RAPID_LLM_CACHE_DIR=${RAPID_LLM_CACHE_DIR:-$(mktemp -d -t rapid_llm_gpu_XXXX)}
status=0
step() {  # step NAME COMMAND...: run, tee the log, remember a failure
  local name=$1; shift
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log" || status=1
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/gpu.log"
python -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a "$out/gpu.log"
gpu=$(python -c "from rapid_llm.kernels import platform; print(platform.slug(platform.device_label('cuda')))")

case $stage in
  tests)
    step pytest python -m pytest tests -q -rs -s -p no:cacheprovider
    ;;
  suite)
    # Files dealt largest first over the shards; timing-sensitive files (compare's verdicts) run alone later.
    mapfile -t files < <(find tests -name 'test_*.py' ! -path tests/unit/bench/test_compare.py -print0 | xargs -0 ls -S)
    for shard in 0 1 2 3; do
      picked=()
      for i in "${!files[@]}"; do (( i % 4 == shard )) && picked+=("${files[$i]}"); done
      step "pytest_shard$shard" python -m pytest -q -rs -p no:cacheprovider --durations=10 "${picked[@]}" &
    done
    step nbval_all python -m pytest -q -p no:cacheprovider --nbval notebooks &
    wait
    step compare_tests python -m pytest -q -rs -p no:cacheprovider tests/unit/bench/test_compare.py
    grep -h "passed\|failed\|error" "$out"/pytest_shard*.log "$out"/nbval_all.log "$out"/compare_tests.log | tail -n 12
    ;;
  parallel)
    python -c "import xdist" 2>/dev/null || { echo "the parallel stage needs pytest-xdist (pip install pytest-xdist)" >&2; exit 2; }
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}  # CPU tests in every worker: torch's threads would oversubscribe
    step pytest_parallel python -m pytest tests -n "${WORKERS:-8}" -q -rs -p no:cacheprovider --durations=25 \
      --ignore=tests/e2e/browser --ignore=tests/unit/bench/test_compare.py
    step compare_tests python -m pytest -q -rs -p no:cacheprovider tests/unit/bench/test_compare.py
    step nbval_all python -m pytest -n "${WORKERS:-8}" --dist loadfile -q -p no:cacheprovider --nbval notebooks
    grep -h "passed\|failed\|error" "$out"/pytest_parallel.log "$out"/compare_tests.log "$out"/nbval_all.log | tail -n 12
    ;;
  shards)
    mapfile -t files < <(ls -S "${@:3}")
    for shard in 0 1 2 3; do
      picked=()
      for i in "${!files[@]}"; do (( i % 4 == shard )) && picked+=("${files[$i]}"); done
      (( ${#picked[@]} )) && step "pytest_shard$shard" python -m pytest -q -rs -p no:cacheprovider --durations=5 \
        "${picked[@]}" &
    done
    wait
    grep -h "passed\|failed\|error" "$out"/pytest_shard*.log | tail -n 8
    ;;
  jit)
    step bench_build python benchmarks/jit/bench_build.py --out "$out/build_$gpu.json"
    step bench_call python benchmarks/jit/bench_call.py
    ;;
  bench)
    step bench_scale python benchmarks/bench_op.py scale --results
    step check_harness python benchmarks/bench_op.py --check-harness
    step dispatch_overhead python benchmarks/kernels/bench_dispatch_overhead.py
    step widgets python -m rapid_llm.notebook.widgets docs/img --results "rapid_llm/kernels/ops/elementwise/scale/figures/$gpu.json"
    ;;
  llm)
    step llm_ops python benchmarks/bench_llm_ops.py --results
    ;;
  checks)
    step strided python -m pytest -q -rs -p no:cacheprovider tests/gpu/unit/dispatch/test_dispatch.py -k "strided and cuda"
    step defects_gpu python -m pytest -q -rs -p no:cacheprovider tests/gpu/unit/verification/test_defect_kernels.py
    step defect_table python scripts/defect_table.py tests/unit/verification/defects
    step inside_a_kernel python -m pytest -q -rs -s -p no:cacheprovider tests/gpu/unit/notebook/test_inside_a_kernel.py \
      tests/gpu/unit/inspection/test_profiling.py
    step notebook_08 python scripts/run_notebooks.py notebooks/08_inside_a_kernel.ipynb
    step dispatch_overhead python benchmarks/kernels/bench_dispatch_overhead.py
    ;;
  newop)
    step new_op python -m pytest -q -rs -s -p no:cacheprovider tests/gpu/unit/notebook/test_new_op.py \
      tests/unit/notebook/test_magic_compile_only.py tests/unit/toolchain/test_cu_compile.py tests/unit/verification/test_isolate.py \
      tests/unit/toolchain/test_promote.py
    step notebook_09 python scripts/run_notebooks.py notebooks/09_new_op.ipynb
    step nbval_09 python -m pytest -q -p no:cacheprovider --nbval notebooks/09_new_op.ipynb
    ;;
  models)
    step bench_block python benchmarks/models/bench_block.py --repeats 30 --out "$out/block_$gpu.json"
    step custom_op_overhead python benchmarks/kernels/bench_custom_op_overhead.py --op rms_norm --pairs 7 --cpp-floor
    step strided_graph python benchmarks/kernels/bench_strided.py --graph
    step layer_tests python -m pytest -q -rs -p no:cacheprovider tests/contract/test_custom_ops.py tests/gpu/contract/test_custom_ops.py
    ;;
  compare)
    step compare_power python benchmarks/bench_compare_power.py "$out/compare"
    step compare_tests python -m pytest -q -rs -p no:cacheprovider tests/unit/bench/test_compare.py
    step notebook_04 python scripts/run_notebooks.py notebooks/04_benchmarking.ipynb
    step nbval_04 python -m pytest -q -p no:cacheprovider --nbval notebooks/04_benchmarking.ipynb
    ;;
  verify)
    step cheat_tests python -m pytest -q -rs -p no:cacheprovider tests/contract/test_cheats.py tests/gpu/contract/test_cheats.py \
      tests/unit/bench/test_harness.py tests/gpu/unit/bench/test_harness.py
    step cheat_table python scripts/cheat_table.py tests/contract/cheats/cheat_rows.py
    step verify_times python benchmarks/kernels/bench_verify.py --cells scale_vec rms_norm_cell --edits 10 --fresh 3 \
      --memcheck 10 --memcheck-fresh 3 --out "$out/verify_times.json"
    step notebook_07 python scripts/run_notebooks.py notebooks/07_find_wrong_kernels.ipynb
    step nbval_07 python -m pytest -q -p no:cacheprovider --nbval notebooks/07_find_wrong_kernels.ipynb
    ;;
  quant)
    step quant_tests python -m pytest -q -rs -p no:cacheprovider tests/ops/test_scaled_fp8_quant.py \
      tests/ops/test_merge_attn_states.py tests/gpu/ops/test_scaled_fp8_quant.py tests/gpu/ops/test_merge_attn_states.py \
      tests/unit/verification/test_compare_modes.py
    step quant_bench python benchmarks/bench_llm_ops.py --ops scaled_fp8_quant merge_attn_states --dtype bf16 --results
    ;;
  *)
    echo "unknown stage $stage (tests, suite, parallel, shards, jit, bench, llm, checks, newop, models, compare, verify or quant)" >&2; exit 2 ;;
esac
exit $status
