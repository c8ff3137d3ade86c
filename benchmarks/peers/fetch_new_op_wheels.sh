#!/usr/bin/env bash
# Download what run_new_ops.sh needs on an offline GPU machine (Python 3.12, x86_64) into .peer-new-ops/ of the
# project root (git-ignored through .git/info/exclude; carried to the GPU machine): FlashInfer slimmed to its
# sampling, page and DeepSeek-V3 routing modules (slim_flashinfer.py: 14 MiB instead of 97), apache-tvm-ffi
# (FlashInfer's binding layer), and small pure fallbacks for FlashInfer's imports, installed there only where the
# machine's Python lacks them. About 18 MiB in all (21.7 MiB with prebuild_flashinfer.sh's modules).
#
#   bash benchmarks/peers/fetch_new_op_wheels.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dest=${PEER_NEW_OPS:-$root/.peer-new-ops}
version=${FLASHINFER_VERSION:-0.7.4}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dest/fallback"
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
          --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
          --platform manylinux1_x86_64 --platform any -d "$1" "${@:2}" 2>&1 | grep -v "is ignored" || true; }
get "$tmp" "flashinfer-python==$version"
get "$dest" "apache-tvm-ffi"
get "$dest/fallback" packaging requests urllib3 idna certifi charset-normalizer nvidia-ml-py tqdm ninja \
  typing-extensions
python3 "$here/slim_flashinfer.py" "$(ls "$tmp"/flashinfer_python-*.whl | head -1)" "$dest"
grep -qx '/.peer-new-ops/' "$root/.git/info/exclude" 2>/dev/null || echo '/.peer-new-ops/' >> "$root/.git/info/exclude"
du -sh "$dest"
