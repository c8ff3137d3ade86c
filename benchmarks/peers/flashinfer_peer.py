"""FlashInfer as bench_new_op_peers.py's peer: its environment, its JIT builds, and its calls of the three new ops.

FlashInfer JIT-compiles each module on first use (nvcc through ninja, into FLASHINFER_WORKSPACE_BASE), unless
its package holds the module prebuilt (flashinfer/data/aot/<name>/<name>.so: prebuild_flashinfer.sh makes the
sampling and page modules for sm_90a, run_new_ops.sh puts them there). Three modules answer our ops:

* ``sampling`` (csrc/sampling.cu, renorm.cu): ``top_k_top_p_sampling_from_probs`` / ``_from_logits``, per-row
  ``top_k`` / ``top_p`` tensors, a fixed ``seed`` and ``offset`` (so a call is deterministic), and two orders:
  ``top_k_first`` (its default: top_k_renorm_probs, then top_p_sampling_from_probs; from logits top_k_mask_logits,
  a softmax, then top-p) and ``joint`` (one rejection-sampling kernel that applies both at once, the kernel of its
  blog's figure, after a softmax from logits). Ids come back int32.
* ``page`` (csrc/page.cu): ``append_paged_kv_cache``. Its cache layout, NHD [max_num_pages, page_size, H, D] for
  each of key and value, is vLLM's flash layout [num_blocks, block_size, H, D] that ``reshape_and_cache_flash``
  writes; the addressing differs: FlashInfer places token t at position ``positions[t]`` of request
  ``batch_indices[t]``, whose pages are ``kv_indices[kv_indptr[b]:kv_indptr[b + 1]]`` (page
  ``kv_indices[kv_indptr[b] + positions[t] // page_size]``, offset ``positions[t] % page_size``), where vLLM gives
  the flat slot ``slot_mapping[t]`` (block ``slot // block_size``, offset ``slot % block_size``) and -1 for a padded
  token, which FlashInfer cannot express (a padded token is left out of its inputs). ``page_table`` turns a slot
  mapping into FlashInfer's form (outside the timed call); FlashInfer takes no fp8 scale on this path.
* ``dsv3_fused_routing`` (csrc/fused_moe/noAuxTcKernels.cu): ``fused_topk_deepseek``, DeepSeek-V3's gate (sigmoid,
  + bias, 8 groups scored by their two best, top 4 groups, top 8 experts, renormalised, times a scaling factor: 1
  here). Its bias has the logits' dtype (ours is fp32), its weights come back in that dtype (ours fp32), and it
  launches with programmatic dependent launch unless told not to (``launch_with_pdl=False`` here: back to back
  calls would otherwise overlap one another).
"""
from __future__ import annotations

import importlib
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

#: Module name -> (its JIT spec's generator, the getter that loads it and registers its ops), each as
#: (module, function). The spec's build (nvcc through ninja) runs in a background thread; the getter (a no-op
#: ninja check, the load, torch.library registrations) in the main thread, where nothing else is compiling.
MODULES = {
    "page": (("flashinfer.jit.page", "gen_page_module"), ("flashinfer.page", "get_page_module")),
    "dsv3_fused_routing": (("flashinfer.jit.dsv3_optimizations", "gen_dsv3_fused_routing_module"),
                           ("flashinfer.fused_moe.fused_routing_dsv3", "get_dsv3_fused_routing_module")),
    "sampling": (("flashinfer.jit.sampling", "gen_sampling_module"), ("flashinfer.sampling", "get_sampling_module")),
}
#: The module each op's FlashInfer call needs.
MODULE_OF = {"reshape_and_cache_flash": "page", "moe_topk_gate": "dsv3_fused_routing",
             "top_k_top_p_sampling": "sampling"}
#: Headers the modules include from the CUDA toolkit that a toolkit assembled from wheels may lack (sampling.cuh:
#: curand; nv_internal's cudaUtils.h: cublas). Looked for in $CUDA_HOME/include, then torch's nvidia wheels.
TOOLKIT_HEADERS = ("curand.h", "curand_kernel.h", "cublasLt.h", "cublas_v2.h")


def _nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    for cand in ([os.path.join(home, "bin", "nvcc")] if home else []) + ["/usr/local/cuda/bin/nvcc",
                                                                       shutil.which("nvcc") or ""]:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def prepare_env(scratch: Path, has_cuda: bool) -> dict[str, Any]:
    """Set what FlashInfer's JIT needs before it is imported; return what was found and set.

    CUDA_HOME: the toolkit folder holding bin/nvcc and include/cuda_runtime.h (FlashInfer's own guess,
    dirname(dirname(`which nvcc`)), is wrong where nvcc on PATH is a wrapper script). ninja on PATH (the ninja
    wheel's, if none). FLASHINFER_WORKSPACE_BASE under ``scratch`` unless set. Without a GPU to ask,
    FLASHINFER_CUDA_ARCH_LIST=9.0a. Toolkit headers the modules include are looked for in torch's nvidia wheels
    where the toolkit lacks them (added with -isystem)."""
    info: dict[str, Any] = {}
    nvcc = _nvcc()
    info["nvcc"] = nvcc
    if not os.environ.get("CUDA_HOME"):
        cands = ["/usr/local/cuda"] + ([str(Path(nvcc).resolve().parent.parent)] if nvcc else [])
        home = next((c for c in cands if (Path(c) / "bin" / "nvcc").exists()
                     and (Path(c) / "include" / "cuda_runtime.h").is_file()), None)
        if home:
            os.environ["CUDA_HOME"] = home
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    info["CUDA_HOME"] = cuda_home
    if shutil.which("ninja") is None:
        try:
            import ninja  # type: ignore

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        except Exception as exc:  # noqa: BLE001 - the builds then fail and say so
            info["ninja_error"] = f"{type(exc).__name__}: {exc}"
    info["ninja"] = shutil.which("ninja")
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", str(scratch / "fi-workspace"))
    info["FLASHINFER_WORKSPACE_BASE"] = os.environ["FLASHINFER_WORKSPACE_BASE"]
    if not has_cuda:
        os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    info["FLASHINFER_CUDA_ARCH_LIST"] = os.environ.get("FLASHINFER_CUDA_ARCH_LIST")
    missing = [h for h in TOOLKIT_HEADERS if not (Path(cuda_home) / "include" / h).is_file()]
    added = []
    for h in list(missing):
        for p in sys.path:
            for sub in ("nvidia/cu13/include", "nvidia/cu12/include", "nvidia/curand/include", "nvidia/cublas/include"):
                d = Path(p or ".") / sub
                if (d / h).is_file():
                    missing.remove(h)
                    if str(d) not in added:
                        added.append(str(d))
                    break
            if h not in missing:
                break
    if added:
        flags = " ".join(f"-isystem {d}" for d in added)
        for var in ("FLASHINFER_EXTRA_CUDAFLAGS", "FLASHINFER_EXTRA_CFLAGS"):
            os.environ[var] = (os.environ.get(var, "") + " " + flags).strip()
    info["toolkit_headers_added_from"] = added
    info["toolkit_headers_missing"] = missing
    return info


def import_flashinfer() -> tuple[Any | None, str | None, dict[str, Any]]:
    """(the flashinfer module, None, facts) or (None, why not, facts)."""
    t0 = time.perf_counter()
    try:
        import flashinfer  # type: ignore
    except Exception as exc:  # noqa: BLE001 - a peer that does not import is skipped with its reason
        return None, f"import flashinfer failed: {type(exc).__name__}: {exc}", {}
    facts = {"version": getattr(flashinfer, "__version__", "?"), "file": getattr(flashinfer, "__file__", "?"),
             "import_s": round(time.perf_counter() - t0, 2)}
    return flashinfer, None, facts


class Builds:
    """FlashInfer's JIT modules compiled in background threads (nvcc through ninja: subprocesses, so the main
    thread times other arms meanwhile); ``wait(name, seconds)`` loads the module once its build is done and gives
    it, or the reason it is not there."""

    def __init__(self, names: list[str], missing_headers: list[str]) -> None:
        self.built: dict[str, tuple[str | None, float]] = {}
        self.loaded: dict[str, tuple[Any | None, str | None]] = {}
        self.prebuilt: list[str] = []
        self.started = time.perf_counter()
        self._threads = {}
        self.no_curand = any(h.startswith("curand") for h in missing_headers)
        for name in names:
            (where, gen), _ = MODULES[name]
            try:  # imported here, in one thread: two threads importing one package's modules can deadlock
                make_spec = getattr(importlib.import_module(where), gen)
            except Exception as exc:  # noqa: BLE001
                self.built[name] = (f"{where}.{gen}: {type(exc).__name__}: {exc}", 0.0)
                continue
            t = threading.Thread(target=self._build, args=(name, make_spec), daemon=True, name=f"fi-build-{name}")
            self._threads[name] = t
            t.start()

    def _build(self, name: str, make_spec: Any) -> None:
        t0 = time.perf_counter()
        try:
            spec = make_spec()
            if spec.aot_artifacts:  # prebuilt (prebuild_flashinfer.sh): the getter loads it, nothing to compile
                self.prebuilt.append(name)
            elif name == "sampling" and self.no_curand:
                self.built[name] = ("the CUDA toolkit has no curand headers (sampling.cuh includes <curand.h>), no "
                                    "nvidia wheel on sys.path ships them, and no prebuilt sampling module", 0.0)
                return
            else:
                spec.build(verbose=False, need_lock=True)
            self.built[name] = (None, time.perf_counter() - t0)
        except BaseException as exc:  # noqa: BLE001 - a build error is the peer's reason to be skipped
            text = " ".join(str(exc).split())
            self.built[name] = (f"JIT build failed: {type(exc).__name__}: {text[-1500:]}", time.perf_counter() - t0)

    def wait(self, name: str, seconds: float) -> tuple[Any | None, str | None]:
        if name in self.loaded:
            return self.loaded[name]
        t = self._threads.get(name)
        if t is not None:
            t.join(max(0.0, seconds))
        if name not in self.built:
            return None, f"JIT build of {name} still running after {time.perf_counter() - self.started:.0f} s (budget)"
        why, _ = self.built[name]
        module = None
        if why is None:
            _, (where, getter) = MODULES[name]
            try:
                module = getattr(importlib.import_module(where), getter)()
            except Exception as exc:  # noqa: BLE001
                why = f"loading the built module failed: {type(exc).__name__}: {' '.join(str(exc).split())[-1500:]}"
        self.loaded[name] = (module, why)
        return module, why

    def times(self) -> dict[str, Any]:
        """Seconds each module's build took ('prebuilt' for one loaded from flashinfer/data/aot)."""
        return {k: "prebuilt" if k in self.prebuilt else round(v[1], 1) for k, v in self.built.items() if v[0] is None}


# ------------------------------------------------------------------------------------------- the calls


def page_table(slot_mapping: torch.Tensor, block_size: int) -> dict[str, torch.Tensor]:
    """FlashInfer's addressing of the slots of ``slot_mapping`` (padded tokens, -1, left out): request b holds
    the tokens of one block, in the order the slots name them, and its one page is that block; a token's
    position is its slot's offset in the block. int32 tensors on the slots' device, plus ``tokens``: the
    indices of the written tokens (all of them when nothing is padded)."""
    slots = slot_mapping.to("cpu", torch.int64)
    tokens = torch.nonzero(slots >= 0).flatten()
    written = slots[tokens]
    blocks, batch = torch.unique(written // block_size, return_inverse=True)
    dev = slot_mapping.device
    i32 = dict(dtype=torch.int32, device=dev)
    return {"batch_indices": batch.to(**i32), "positions": (written % block_size).to(**i32),
            "kv_indices": blocks.to(**i32), "kv_indptr": torch.arange(blocks.numel() + 1, **i32),
            "kv_last_page_len": torch.full((blocks.numel(),), block_size, **i32), "tokens": tokens.to(dev)}


def append_paged_kv_cache(fi: Any) -> Any:
    """FlashInfer's paged append as a call on (key, value, key_cache, value_cache, batch_indices, positions,
    kv_indices, kv_indptr, kv_last_page_len)."""
    def call(key, value, key_cache, value_cache, batch_indices, positions, kv_indices, kv_indptr, last_len):
        fi.append_paged_kv_cache(key, value, batch_indices, positions, (key_cache, value_cache), kv_indices,
                                 kv_indptr, last_len, "NHD")
    return call


def sampling(fi: Any, from_logits: bool, order: str) -> Any:
    """FlashInfer's top-k + top-p sampling as a call on (x, top_k, top_p): a fixed seed (1234 unless given) and
    offset, so two calls on the same content draw the same ids."""
    fn = fi.sampling.top_k_top_p_sampling_from_logits if from_logits else fi.sampling.top_k_top_p_sampling_from_probs

    def call(x, top_k, top_p, seed: int = 1234):
        return fn(x, top_k, top_p, filter_apply_order=order, deterministic=True, seed=seed, offset=0)
    return call


def dsv3_gate(k: int, num_groups: int, topk_groups: int) -> Any:
    """FlashInfer's DeepSeek-V3 gate as a call on (logits, bias in the logits' dtype, weights out, ids out)."""
    from flashinfer.fused_moe import fused_topk_deepseek  # type: ignore

    def call(logits, bias, weights, ids):
        fused_topk_deepseek(logits, bias, num_groups, topk_groups, k, 1.0, weights, ids, launch_with_pdl=False)
    return call
