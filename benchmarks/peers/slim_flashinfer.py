#!/usr/bin/env python3
"""Repack FlashInfer's wheel (101 MB) into a slim tree that imports and JIT-builds only what
bench_new_op_peers.py times: the sampling module (top_k_top_p_sampling_from_probs / _from_logits), the page
module (append_paged_kv_cache) and DeepSeek-V3's fused routing (fused_topk_deepseek).

    python3 benchmarks/peers/slim_flashinfer.py SRC_WHEEL OUT_DIR

Writes OUT_DIR/flashinfer_python-<version>+slim.tar.xz: the tree ``pip install --target`` would lay down
(dist-info included), xz -9. Unpack it into a folder on PYTHONPATH.

What it keeps: every *.py file; every non-source file outside flashinfer/data; flashinfer/data/include and
flashinfer/data/cccl whole (the vendored CCCL comes first on the JIT's include path); and of
flashinfer/data/csrc the three modules' sources (flashinfer/jit/{sampling,page,dsv3_optimizations}.py), the
headers directly in csrc/, csrc/fused_moe/moeTopKFuncs.cuh and csrc/nv_internal (TensorRT-LLM's common code the
routing module compiles). The list was read from ``nvcc -M`` of each source: beyond CCCL, FlashInfer's include/
and csrc/'s own headers they include nothing of the wheel (cutlass and spdlog are not needed).
"""
from __future__ import annotations

import io
import lzma
import os
import posixpath
import re
import sys
import tarfile
import zipfile

#: csrc files (relative to flashinfer/data/csrc) the three modules compile or include beyond csrc/*.h, *.cuh.
KEEP_CSRC = {"sampling.cu", "renorm.cu", "flashinfer_sampling_binding.cu", "page.cu", "flashinfer_page_binding.cu",
             "fused_moe/noAuxTcKernels.cu", "fused_moe/moeTopKFuncs.cuh"}
KEEP_CSRC_DIRS = ("nv_internal/",)
KEEP_DATA_DIRS = {"include", "cccl"}
#: Source and binary-kernel files: dropped outside data/ (modules this benchmark never builds compile them).
SOURCE_EXT = {".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cxx", ".inl", ".inc", ".ipp",
              ".ptx", ".cubin", ".fatbin", ".jinja", ".o", ".a", ".so"}
DATA = "flashinfer/data/"


def keep(path: str, dist: str) -> bool:
    """Whether the slim tree keeps the wheel's file ``path``."""
    if path.startswith(dist + "/"):
        return posixpath.basename(path) != "RECORD"
    if path.endswith(".py"):
        return True
    if path.startswith(DATA):
        rest = path[len(DATA):]
        top = rest.split("/", 1)[0]
        if top in KEEP_DATA_DIRS:
            return True
        if top != "csrc":
            return False
        sub = rest[len("csrc/"):]
        if sub in KEEP_CSRC or sub.startswith(KEEP_CSRC_DIRS):
            return True
        return "/" not in sub and sub.endswith((".h", ".cuh"))
    return posixpath.splitext(path)[1].lower() not in SOURCE_EXT


def slim(src: str, out: str) -> str:
    """Write the slim tree of wheel ``src`` into ``out`` as a .tar.xz; return its path."""
    zin = zipfile.ZipFile(src)
    names = [i for i in zin.infolist() if not i.is_dir()]
    dist = next(n.filename.split("/")[0] for n in names if n.filename.split("/")[0].endswith(".dist-info"))
    project, version = re.match(r"(.+)-([^-]+)\.dist-info$", dist).groups()
    new_version = version if "+" in version else version + "+slim"
    new_dist = f"{project}-{new_version}.dist-info"
    kept = sorted((i for i in names if keep(i.filename, dist)), key=lambda i: i.filename)
    os.makedirs(out, exist_ok=True)
    dst = os.path.join(out, f"{project}-{new_version}.tar.xz")
    with tarfile.open(dst + ".part", "w:xz", preset=9 | lzma.PRESET_EXTREME, format=tarfile.PAX_FORMAT) as tar:
        for info in kept:  # sorted: similar files sit together for xz
            data, name = zin.read(info), info.filename
            if name.startswith(dist + "/"):
                name = new_dist + name[len(dist):]
                if posixpath.basename(name) == "METADATA":
                    data = re.sub(rb"(?m)^Version: .*$", f"Version: {new_version}".encode(), data, count=1)
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 1767225600
            tar.addfile(ti, io.BytesIO(data))
    os.replace(dst + ".part", dst)
    print(f"kept {len(kept)} of {len(names)} files; wrote {dst}: {os.path.getsize(dst) / 2**20:.1f} MiB "
          f"(from {os.path.getsize(src) / 2**20:.1f} MiB)")
    return dst


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: slim_flashinfer.py SRC_WHEEL OUT_DIR")
    slim(sys.argv[1], sys.argv[2])
