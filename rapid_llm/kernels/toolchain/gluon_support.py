"""Toolchain probe for Gluon rows (``triton.experimental.gluon``). Never imports triton (that costs seconds).

Gluon is an extra: without it every other row runs as before, and a Gluon row
is filtered with the reason this probe gives. The reason is read from files,
not from an import: Triton's installed version (its ``__init__.py``) and
whether it ships Gluon at all. Gluon has no CPU interpreter (a ``@gluon.jit``
kernel ignores ``TRITON_INTERPRET`` and asks for a GPU driver), so a CPU
tensor is refused whatever the environment says.
"""
from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from typing import Any

from rapid_llm.kernels.registry.spec import Availability

__all__ = ["MIN_VERSION", "NO_INTERPRETER", "available", "check", "installed", "triton_version"]

#: The first Triton whose Gluon the rows are written for (layouts, ``gl.arange(..., layout=)``, ``gl.sum``).
MIN_VERSION = (3, 6)
NO_INTERPRETER = ("Gluon has no CPU interpreter (TRITON_INTERPRET runs @triton.jit kernels only): "
                  "a Gluon row runs on a CUDA GPU")

_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.M)


def triton_version(text: str) -> tuple[int, int] | None:
    """(major, minor) from the text of Triton's ``__init__.py``; None where it names none."""
    m = _VERSION.search(text)
    parts = re.match(r"(\d+)\.(\d+)", m[1]) if m else None
    return (int(parts[1]), int(parts[2])) if parts else None


def check(root: Path | None) -> Availability:
    """Whether the Triton package at ``root`` (None: no Triton) has the Gluon the rows are written for, and if
    not, why."""
    if root is None:
        return Availability(False, "triton is not installed (Gluon ships with Triton >= "
                                   f"{MIN_VERSION[0]}.{MIN_VERSION[1]}: pip install triton)")
    try:
        version = triton_version((root / "__init__.py").read_text(errors="replace"))
    except OSError:
        version = None
    this = "this Triton, of an unknown version," if version is None else f"Triton {version[0]}.{version[1]}"
    need = f"{MIN_VERSION[0]}.{MIN_VERSION[1]}"
    if not (root / "experimental" / "gluon" / "__init__.py").is_file():
        return Availability(False, f"{this} has no Gluon (triton.experimental.gluon); Gluon rows need Triton >= {need}")
    if version is None or version < MIN_VERSION:
        return Availability(False, f"Gluon rows are written for the Gluon API of Triton >= {need}; {this} may "
                                   "differ (pip install 'triton>=" + need + "')")
    return Availability(True)


@functools.cache
def installed() -> Availability:
    """:func:`check` of this Python's Triton (cached: found by its files, once per process)."""
    spec = importlib.util.find_spec("triton")
    return check(Path(spec.origin).parent if spec is not None and spec.origin else None)


def available(device: Any = None) -> Availability:
    """A Gluon row's probe: Gluon installed (see :func:`installed`), and a CUDA device to run on."""
    answer = installed()
    if not answer:
        return answer
    kind = getattr(device, "type", device) or "cuda"
    if kind == "cpu":
        return Availability(False, NO_INTERPRETER)
    import torch

    if not torch.cuda.is_available():
        return Availability(False, "no CUDA device visible (torch.cuda.is_available() is False)")
    return Availability(True)
