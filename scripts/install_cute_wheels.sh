#!/usr/bin/env bash
# Install the CuTe DSL (nvidia-cutlass-dsl and its CUDA 13 libraries) from wheels brought in by hand, with no
# index: for a machine without network access where one transfer carries less than the 92 MB libraries wheel.
#
# From the project root, with the folders of .cute-wheels/ copied in (a/, b/, c/: each small enough for one
# transfer; see docs/cute-rows.md for how they are made): joins the split wheel, checks every wheel against
# the SHA256SUMS one of them holds, and installs them with pip --no-index --no-deps --target into TARGET (default
# .cute-site/, which git ignores). A dependency this Python already has (cuda-bindings, cuda-pathfinder,
# protobuf, typing-extensions, apache-tvm-ffi) is left out, so nothing the installed torch uses is shadowed.
#
# --target runs no .pth file, so the DSL's package folder must be put on PYTHONPATH; the last line printed is
# the export to run (scripts/gpu_cute.sh does it by itself when .cute-site/ exists).
set -euo pipefail
wheels=${WHEELS:-.cute-wheels}
target=${1:-.cute-site}
python=${PYTHON:-python}
parts=("$wheels"/*/)
[ -d "${parts[0]}" ] || { echo "install_cute_wheels: no folders in $wheels (a/, b/, ...) to install from" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for part in "${parts[@]}"; do cp "$part"* "$work"/; done
[ -f "$work/SHA256SUMS" ] || { echo "install_cute_wheels: no SHA256SUMS in $wheels's folders" >&2; exit 2; }
for first in "$work"/*.whl.part00; do
  [ -e "$first" ] || continue
  whole=${first%.part00}
  cat "$whole".part* > "$whole"
  rm -f "$whole".part*
done
(cd "$work" && sha256sum --check --quiet SHA256SUMS) || { echo "install_cute_wheels: a wheel does not match SHA256SUMS" >&2; exit 3; }

# The wheels of distributions this Python already has at a version the DSL accepts are skipped.
have() { "$python" - "$1" "$2" <<'PY'
import importlib.metadata as m, re, sys
try:
    found = tuple(int(p) for p in re.findall(r"\d+", m.version(sys.argv[1]))[:3])
except m.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if found >= tuple(int(p) for p in sys.argv[2].split(".")) else 1)
PY
}
todo=()
for wheel in "$work"/*.whl; do
  case $(basename "$wheel") in
    cuda_bindings-*) have cuda-bindings 12.8 && continue ;;
    cuda_pathfinder-*) have cuda-pathfinder 1.1 && continue ;;
    protobuf-*) have protobuf 4.21.12 && continue ;;
    typing_extensions-*) have typing-extensions 4.10 && continue ;;
    apache_tvm_ffi-*) have apache-tvm-ffi 0.1 && continue ;;  # optional: the DSL's TVM-FFI call path
  esac
  todo+=("$wheel")
done
mkdir -p "$target"
"$python" -m pip install -q --no-index --no-deps --upgrade --target "$target" "${todo[@]}"
site=$(cd "$target" && pwd)
echo "installed into $site: $(for w in "${todo[@]}"; do basename "$w" | cut -d- -f1-2; done | tr '\n' ' ')"
echo "export PYTHONPATH=$site:$site/nvidia_cutlass_dsl/dsl_packages\${PYTHONPATH:+:\$PYTHONPATH}"
