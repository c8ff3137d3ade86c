"""The peer benchmark with a flush that also evicts what a kernel asked L2 to keep (``evict_last``).

    python benchmarks/peer_full_flush.py --peer-bench PEER_DIR [--sweep-l2 4] [bench_peers.py arguments]

The peer benchmark flushes L2 before every timed call by zeroing a 256 MiB buffer. That leaves in L2 data that
a kernel loaded with the L2 ``evict_last`` policy while the calls keep reading it, and Inductor's reductions
load that way (its rms_norm kernel: x and the weight, ``tl.load(..., eviction_policy='evict_last')``). So
torch.compile's calls are timed with x in L2: at Llama-3-8B T = 1024 on an H200 its rms_norm measured 8.56 us
under that flush and 10.13 under this one (``--check``; benchmarks/results/logs/peer_full_flush_check_nvidia_h200.log;
l2_flush says what this flush does).

This runs the peer benchmark unchanged but for its timer: before the 256 MiB zeroing, each flush reads
``--sweep-l2`` times the device's L2 size with the ``evict_last`` policy, so every implementation's call
starts with none of its data in L2, whatever policy it loaded it with. The sweep and the zeroing run before
the call's start event, as the plain flush does, and the timer holds the GPU longer before each group of
calls to cover the sweep's launch. --model sets the shapes (kernels/peer_bench.py); other arguments go
to bench_peers.py (``--json``, ``--budget-s`` ...). Run it where ``run.sh`` has installed the peers, with the
environment run.sh sets.

``--check`` shows the effect on rms_norm instead: our row's time after the plain flush, after one call of
torch.compile's kernel on the same x then the plain flush, and the same with this flush; and torch.compile's
own figure under both flushes.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))
import peer_bench  # noqa: E402  (the peer benchmark's loader, and the model shapes it is set to)
import l2_flush  # noqa: E402


def install(bp: ModuleType, sweep_l2: float) -> None:
    """Replace the peer benchmark's GpuTimer by one whose flush is :class:`l2_flush.FullFlush`."""
    base = bp.GpuTimer

    class FullFlushTimer(base):  # type: ignore[misc, valid-type]
        def __init__(self, device: Any, samples: int) -> None:
            super().__init__(device, samples)
            self.flush_buf = l2_flush.FullFlush(self.flush_buf, sweep_l2)
            print(f"peer_full_flush: each flush reads {sweep_l2:g} x L2 ({self.flush_buf.sweep_mib} MiB) with "
                  "evict_last, then zeroes the benchmark's 256 MiB", flush=True)

        def _hold(self, us: float) -> None:  # a group of 10 calls now also launches 10 sweeps
            super()._hold(us + 10 * l2_flush.SWEEP_HOST_US * 1.5)

    bp.GpuTimer = FullFlushTimer


def check(bp: ModuleType, sweep_l2: float, model: str) -> int:
    """Our rms_norm row and torch.compile's, timed after each flush (see the module docstring)."""
    import torch

    if not torch.cuda.is_available():
        print("peer_full_flush --check: needs a CUDA device")
        return 2
    import rapid_llm.kernels as K

    peer_bench.set_model(bp, model)
    plain = bp.GpuTimer("cuda", 40)
    install(bp, sweep_l2)
    full = bp.GpuTimer("cuda", 40)
    eps = bp.EPS
    compiled = torch.compile(bp.PLAIN["rms_norm"], dynamic=False)
    print(f"{model} rms_norm, us per call (the peer benchmark's timer, median of 40): our row (dispatch) and "
          "torch.compile's, after each flush")
    for t in (16, 128, 1024, 4096):
        s = bp.make_inputs("rms_norm", t, "cuda")
        x, w = s["x"], s["w"]
        src = torch.empty(2 * x.numel(), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        for _ in range(3):
            compiled(x, w, eps)
            K.rms_norm(x, w, eps)
        torch.cuda.synchronize()

        def ours(timer: Any, after: str) -> str:
            if after == "compiled":
                compiled(x, w, eps)  # one call: Inductor's kernel reads x with evict_last
            else:
                plain.time(lambda: dst.copy_(src))  # a copy's timing: nothing of x marked
            return f"{timer.time(lambda: K.rms_norm(x, w, eps))['median_us']:.2f}"

        cells = [("ours, plain flush", ours(plain, "copy")),
                 ("ours after one compiled call, plain flush", ours(plain, "compiled")),
                 ("the same, full flush", ours(full, "compiled")),
                 ("torch.compile, plain flush", f"{plain.time(lambda: compiled(x, w, eps))['median_us']:.2f}"),
                 ("torch.compile, full flush", f"{full.time(lambda: compiled(x, w, eps))['median_us']:.2f}")]
        print(f"T={t:5d}: " + "; ".join(f"{name} {us}" for name, us in cells), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=True)
    p.add_argument("--peer-bench", required=True, help="the folder of the peer benchmark (its bench_peers.py)")
    p.add_argument("--sweep-l2", type=float, default=l2_flush.DEFAULT_SWEEP_L2,
                   help="the evict_last sweep, in multiples of L2")
    p.add_argument("--check", action="store_true", help="show the effect on rms_norm instead of running the benchmark")
    p.add_argument("--model", default="llama3-8b", choices=list(peer_bench.MODELS), help="the model's shapes")
    a, rest = p.parse_known_args(argv)
    if a.sweep_l2 <= 1.0:
        p.error("--sweep-l2 must be more than 1 (l2_flush.FullFlush says why)")
    bp = peer_bench.load(a.peer_bench)
    if a.check:
        return check(bp, a.sweep_l2, a.model)
    keep = peer_bench.set_model(bp, a.model)
    install(bp, a.sweep_l2)
    return bp.main([*rest, *keep])


if __name__ == "__main__":
    raise SystemExit(main())
