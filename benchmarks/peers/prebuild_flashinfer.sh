#!/usr/bin/env bash
# Build FlashInfer's sampling, page and DeepSeek-V3 routing modules for sm_90a (H100, H200) on a machine without a
# GPU, into .peer-new-ops/aot/<module>/<module>.so, where run_new_ops.sh installs them as FlashInfer's own AOT modules
# (flashinfer/data/aot: loaded instead of a JIT build; a module that fails to load is JIT-built as usual). The
# sampling module is the slow one (sampling.cu alone takes minutes of nvcc), so this saves the GPU machine's time.
#
#   SITE=DIR EXTRA_INCLUDE="DIR ..." [MODULES="page sampling dsv3_fused_routing"] \
#     bash benchmarks/peers/prebuild_flashinfer.sh
#
# SITE: a folder holding the slim FlashInfer (tar -xJf .peer-new-ops/flashinfer_python-*.tar.xz -C SITE) and an
# apache-tvm-ffi for this machine's Python (pip install --target SITE apache-tvm-ffi) and FlashInfer's import-time
# dependencies. EXTRA_INCLUDE: folders of the toolkit headers the modules include where the toolkit lacks them:
# cuRAND's (sampling) and cuBLAS's (the routing module's TensorRT-LLM utilities), e.g. the include folders of the
# nvidia-curand and nvidia-cublas wheels. The link names -lcuda; without a driver an empty stub with its soname
# stands in (the modules' .so list no libcuda: as-needed linking drops it). Runs nvcc at low priority, one job
# at a time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
site=${SITE:?SITE=folder with the slim flashinfer and apache-tvm-ffi}
dest=${PEER_NEW_OPS:-$root/.peer-new-ops}/aot
work=${WORKSPACE:-$(mktemp -d)}
stub=$work/stub-lib
mkdir -p "$stub" "$dest"
echo 'int rapid_llm_stub_cuda(void) { return 0; }' > "$stub/empty.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 "$stub/empty.c" -o "$stub/libcuda.so"
export PYTHONPATH=$site CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=${MAX_JOBS:-1}
export FLASHINFER_WORKSPACE_BASE=$work FLASHINFER_EXTRA_LDFLAGS="-L$stub"
flags=""
for d in ${EXTRA_INCLUDE:-}; do flags="$flags -isystem $d"; done
export FLASHINFER_EXTRA_CUDAFLAGS="$flags" FLASHINFER_EXTRA_CFLAGS="$flags"
for module in ${MODULES:-page sampling dsv3_fused_routing}; do
  nice -n 19 python3 - "$module" "$dest" <<'PY'
import shutil, sys, time
from pathlib import Path
module, dest = sys.argv[1], Path(sys.argv[2])
t0 = time.perf_counter()
if module == "page":
    from flashinfer.jit.page import gen_page_module as gen
elif module == "sampling":
    from flashinfer.jit.sampling import gen_sampling_module as gen
else:
    from flashinfer.jit.dsv3_optimizations import gen_dsv3_fused_routing_module as gen
spec = gen()
spec.build(verbose=False)
(dest / module).mkdir(parents=True, exist_ok=True)
shutil.copy2(spec.jit_library_path, dest / module / f"{module}.so")
print(f"{module}: {dest / module / (module + '.so')} in {time.perf_counter() - t0:.0f} s")
PY
done
du -sh "$dest"
