"""Where a build can be killed (SIGKILL), for test_build_kill (which arms a forked child), or by hand:
``python -m tests.unit.toolchain.kill_worker SOURCE POINT``.

POINT is where the process dies: a step of the cache's publish (``staged``, ``built``, ``sealed``,
``published``), right after a pass of the fast path (``host_pass``, ``device_pass``, ``link``), half-way
through writing the source's snapshot (``snapshot``) or right after the machine-wide host support is
built (``host_support``). Run with RAPID_LLM_CACHE_DIR set.
"""
from __future__ import annotations

import functools
import os
import signal
import sys

from rapid_llm.kernels.toolchain import cache, jit, snapshot
from rapid_llm.kernels.toolchain.fastpath import builder

PUBLISH_STEPS = ("staged", "built", "sealed", "published")
PASSES = ("host_pass", "device_pass", "link")
POINTS = (*PUBLISH_STEPS, *PASSES, "snapshot", "host_support")


def _die(*_args, **_kwargs) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _then_die(fn):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        fn(*args, **kwargs)
        _die()
    return wrapped


def arm(point: str) -> None:
    """Make this process die at ``point``."""
    if point in PUBLISH_STEPS:
        cache._phase = lambda name: _die() if name == point else None
    elif point in PASSES:
        setattr(builder, point, _then_die(getattr(builder, point)))
    elif point == "snapshot":  # the copy's staging folder is written, the rename never happens
        snapshot.os = type(os)("os_then_die")
        snapshot.os.__dict__.update(os.__dict__, rename=_die)
    elif point == "host_support":
        builder._HostSupportBuilder.build = _then_die(builder._HostSupportBuilder.build)
    else:
        raise SystemExit(f"unknown point {point!r}; one of {', '.join(POINTS)}")


if __name__ == "__main__":
    arm(sys.argv[2])
    jit.build_jit("killed", sys.argv[1])
    raise SystemExit(f"the build finished: {sys.argv[2]} was never reached")
