"""An L2 flush that also evicts lines a kernel loaded with the ``evict_last`` policy.

Zeroing a buffer larger than L2 before each timed call (the peer benchmark's flush) leaves in L2 data that a
kernel loaded with the ``evict_last`` policy, while the calls keep reading it: Inductor's rms_norm kernel loads
x and the weight that way, and on an H200 at Llama-3-8B T = 1024 our row,
timed on the same x after one call of that kernel, measured 8.48 us against 9.12 without it; torch.compile's
own figure was 8.56 us under that flush and 10.13 when the flush first read four times L2 with ``evict_last``
(benchmarks/results/logs/peer_full_flush_check_nvidia_h200.log). That read evicted them (its own lines, the
newest of that priority, take their place: what was measured, not a documented rule). :class:`FullFlush` runs it before the zeroing it stands in for, so every
timed call starts with none of its data in L2, whatever policy it loaded it with.
"""
from __future__ import annotations

from typing import Any

#: Microseconds of host time a flush's sweep adds to each timed call (a Triton launch): timers that hold the GPU
#: while the host queues a group of calls add this per call.
SWEEP_HOST_US = 60.0
#: The sweep, in multiples of the device's L2 size.
DEFAULT_SWEEP_L2 = 4.0


def _sweep_kernel() -> Any:
    """The Triton kernel of the sweep (defined on first use: importing Triton is heavy)."""
    import triton
    import triton.language as tl

    @triton.jit
    def evict_last_sweep(src, n, sink, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(src + offs, mask=offs < n, other=0, eviction_policy="evict_last")
        tl.store(sink + tl.arange(0, BLOCK), v, mask=v != 0)  # src is zeros: never taken, so never dropped

    return evict_last_sweep


class FullFlush:
    """Stands in for a flush buffer: ``zero_()`` reads ``sweep_l2`` times L2 with ``evict_last``, then zeroes
    ``plain`` (the flush it replaces), on the current stream."""

    BLOCK = 4096

    def __init__(self, plain: Any, sweep_l2: float = DEFAULT_SWEEP_L2) -> None:
        if sweep_l2 <= 1.0:
            raise ValueError(f"the evict_last sweep must exceed L2 (got {sweep_l2:g} x L2): a sweep within it "
                             "leaves older evict_last lines there")
        import torch

        self.plain = plain
        l2 = torch.cuda.get_device_properties(plain.device).L2_cache_size
        self.sweep = torch.zeros(int(sweep_l2 * l2) // 4, dtype=torch.int32, device=plain.device)
        self.sink = torch.empty(self.BLOCK, dtype=torch.int32, device=plain.device)
        self.kernel = _sweep_kernel()
        self.grid = (-(-self.sweep.numel() // self.BLOCK),)

    @property
    def sweep_mib(self) -> int:
        return self.sweep.numel() * 4 >> 20

    def zero_(self) -> Any:
        self.kernel[self.grid](self.sweep, self.sweep.numel(), self.sink, BLOCK=self.BLOCK)
        return self.plain.zero_()
