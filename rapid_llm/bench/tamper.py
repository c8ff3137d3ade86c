"""What a row changed in the process while it was timed: the timer's entry points, or what the check relies on.

A row's code runs in the harness's process, so besides computing its result it can replace functions: the
timer's (``torch.cuda.Event.elapsed_time``, ``time.perf_counter``, the code of ``cudaEventElapsedTime``), or
those the reference and the check call (``torch.mul`` under the op's floor, ``integrity.compare``, the
agreement bound), after which a wrong result agrees with a reference that is just as wrong. A :class:`Watch`
taken before the row's first call names any of these afterwards and puts the Python ones back:

* ``timer_patched``: an entry point of :data:`rapid_llm.bench.clock.TIMER_ENTRIES` is not the object held at
  import, the code of a runtime or driver timing function changed (address or first bytes), or torch's
  elapsed time for the first timed interval disagrees with the driver's;
* ``checker_tampered``: a name of ``torch``, ``torch.nn.functional``, ``torch.Tensor``, the harness's own
  modules or the reference's module was rebound (a class also may not gain one: ``torch.Tensor.__eq__``).

Figures never depend on the entry points (the harness times with its held references, rapid_llm.bench.clock);
refusing says which row did it, and restoring keeps every later measurement in the process honest.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from rapid_llm.bench import clock
from rapid_llm.bench.integrity import BenchRefused

__all__ = ["Watch", "AGREE_MS"]

#: torch's elapsed time and the driver's, for one interval, agree within this (ms) or 1 % when honest.
AGREE_MS = 2e-3


def _namespaces(reference: Callable[..., Any] | None) -> dict[str, Any]:
    """Modules and classes the check and the reference call through, by name."""
    spaces: dict[str, Any] = {"torch": torch, "torch.nn.functional": torch.nn.functional, "torch.Tensor": torch.Tensor,
                              "torch.testing": torch.testing}
    for name in ("rapid_llm.bench.integrity", "rapid_llm.bench.harness", "rapid_llm.bench.tamper",
                 "rapid_llm.bench.clock"):
        if name in sys.modules:
            spaces[name] = sys.modules[name]
    integrity = sys.modules.get("rapid_llm.bench.integrity")
    if integrity is not None:
        spaces["rapid_llm.bench.integrity.Guard"] = integrity.Guard
    module = getattr(reference, "__module__", None)
    if module and module in sys.modules and not module.startswith("torch"):
        spaces[module] = sys.modules[module]
    return spaces


def _snapshot(spaces: dict[str, Any]) -> dict[str, tuple[Any, dict[str, Any]]]:
    return {name: (space, dict(vars(space))) for name, space in spaces.items()}


def _rebound(name: str, space: Any, was: dict[str, Any]) -> list[str]:
    """Names of ``space`` bound to another object than ``was`` held; for a class, names it gained too (a module
    gains names legitimately: a submodule imported lazily)."""
    now = vars(space)
    out = [f"{name}.{k}" for k, v in was.items() if now.get(k, was) is not v]
    if isinstance(space, type):
        out += [f"{name}.{k}" for k in now if k not in was]
    return out


class Watch:
    """Taken before a row's first call (``Watch(reference)``); :meth:`check` after any of its calls."""

    def __init__(self, reference: Callable[..., Any] | None = None, device: torch.device | None = None) -> None:
        self.spaces = _snapshot(_namespaces(reference))
        self.native = clock.native_snapshot() if device is not None and device.type == "cuda" else {}

    def check(self, label: str, intervals: tuple[Any, Any] | None = None) -> None:
        """Raise BenchRefused (``timer_patched``, then ``checker_tampered``) naming what changed, after putting
        back the Python objects. ``intervals`` is a (start, end) event pair of the run, read both ways."""
        replaced = clock.python_replaced()
        if replaced:
            clock.restore()
            raise BenchRefused("timer_patched", "", f"{', '.join(replaced)} replaced while the row ran (put back)")
        native = clock.native_changed(self.native) if self.native else []
        if native:
            raise BenchRefused("timer_patched", "", f"the code of {', '.join(native)} changed while the row ran")
        if intervals is not None:
            ours, torchs = clock.elapsed_ms(*intervals), clock.torch_elapsed_ms(*intervals)
            if abs(ours - torchs) > max(AGREE_MS, 0.01 * ours):
                raise BenchRefused("timer_patched", "", f"torch's elapsed time for a timed call says {torchs:.4f} "
                                                        f"ms, the driver's cuEventElapsedTime {ours:.4f} ms")
        rebound = [n for name, (space, was) in self.spaces.items() for n in _rebound(name, space, was)]
        if rebound:
            for name, (space, was) in self.spaces.items():
                _put_back(space, was)
            raise BenchRefused("checker_tampered", "", f"{', '.join(rebound[:6])} rebound while the row ran (put "
                                                       "back)")


def _put_back(space: Any, was: dict[str, Any]) -> None:
    now = vars(space)
    for k, v in was.items():
        if now.get(k, was) is not v:
            setattr(space, k, v)
    if isinstance(space, type):  # names a module gained are left: a lazily imported submodule is one
        for k in [k for k in now if k not in was]:
            delattr(space, k)
