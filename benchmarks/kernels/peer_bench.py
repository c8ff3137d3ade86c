"""The peer benchmark as the scripts beside it use it: its module loaded from the folder kept beside the
repository (``bench_peers.py``), set to a model's shapes, and the ops' calls on its inputs.

bench_compile_forms.py, profile_vs_liger.py and peer_full_flush.py time or profile what the peer benchmark
times, at the shapes of ``--model`` (MODELS), so their figures sit beside its runs.
"""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: --model: (hidden, intermediate, q heads, kv heads, head size)
MODELS = {"llama3-8b": (4096, 14336, 32, 8, 128), "llama3.2-1b": (2048, 8192, 32, 8, 64),
          "llama3-70b": (8192, 28672, 64, 8, 128)}


def load(folder: str) -> Any:
    """The peer benchmark's module, from ``folder``/bench_peers.py."""
    path = Path(folder) / "bench_peers.py"
    if not path.is_file():
        raise SystemExit(f"no bench_peers.py in {folder} (the peer benchmark's folder)")
    spec = importlib.util.spec_from_file_location("bench_peers", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_peers"] = module
    spec.loader.exec_module(module)
    return module


def set_model(peer: Any, model: str) -> list[str]:
    """Point the peer benchmark's module at ``model``'s shapes, the rope cache's width included (its builder may
    take the head size as a default fixed when it was defined). Returns the arguments its ``main`` needs to keep
    them: its own ``--model`` where the copy has one (it sets the shapes again when it parses its arguments)."""
    peer.HIDDEN, peer.INTER, peer.Q_HEADS, peer.KV_HEADS, peer.HEAD = MODELS[model]
    build = getattr(peer, "_rope_cache_as_defined", None) or peer.rope_cache
    peer._rope_cache_as_defined = build

    def rope_cache(device: Any, max_pos: int = peer.MAX_POS, rot: int | None = None) -> Any:
        return build(device, max_pos, peer.HEAD if rot is None else rot)

    peer.rope_cache = rope_cache
    return ["--model", model] if hasattr(peer, "MODELS") else []


def call_for(peer: Any, op: str, fn: Callable[..., Any]) -> Callable[[dict], Any]:
    """One call of ``fn`` (the op's calling convention) on a state of the peer benchmark's inputs."""
    if op == "rms_norm":
        return lambda s: fn(s["x"], s["w"], peer.EPS)
    if op == "fused_add_rms_norm":
        return lambda s: fn(s["x"], s["residual"], s["w"], peer.EPS)
    if op == "silu_and_mul":
        return lambda s: fn(s["x"])
    return lambda s: fn(s["positions"], s["q"], s["k"], peer.HEAD, s["cache"], True)


def liger_impl(peer: Any, op: str) -> tuple[Callable[[dict], None] | None, Callable[[dict], Any]] | None:
    """Liger-Kernel's call of ``op`` as the peer benchmark makes it (its preparation, untimed, first), or None
    where Liger-Kernel does not import."""
    try:
        from liger_kernel.ops import (LigerFusedAddRMSNormFunction, LigerRMSNormFunction, LigerRopeFunction,
                                      LigerSiLUMulFunction)
    except Exception as exc:  # noqa: BLE001
        print(f"liger: {exc}")
        return None
    if op == "rms_norm":
        return None, lambda s: LigerRMSNormFunction.apply(s["x"], s["w"], peer.EPS)
    if op == "fused_add_rms_norm":
        return None, lambda s: LigerFusedAddRMSNormFunction.apply(s["x"], s["residual"], s["w"], peer.EPS)
    if op == "silu_and_mul":
        def prep(s: dict) -> None:
            x = s["x"]
            s["a"], s["b"] = x[:, :peer.INTER].contiguous(), x[:, peer.INTER:].contiguous()
        return prep, lambda s: LigerSiLUMulFunction.apply(s["a"], s["b"])

    def prep(s: dict) -> None:  # rope: Hugging Face's form, each token's cos/sin gathered before the call
        cs = s["cache"].index_select(0, s["positions"])
        s["cos"] = cs[:, : peer.HEAD // 2].contiguous()[None]
        s["sin"] = cs[:, peer.HEAD // 2:].contiguous()[None]

    def run(s: dict) -> Any:
        t = s["q"].shape[0]
        q4 = s["q"].view(1, t, peer.Q_HEADS, peer.HEAD).transpose(1, 2)
        k4 = s["k"].view(1, t, peer.KV_HEADS, peer.HEAD).transpose(1, 2)
        return LigerRopeFunction.apply(q4, k4, s["cos"], s["sin"], None, 1, peer.HEAD)
    return prep, run
