"""Toolchain probe for CuTe DSL rows (nvidia-cutlass-dsl). Never imports cutlass (that costs a second or two).

The CuTe DSL is an extra (``pip install 'rapid_llm[cute]'``): without it every
other row runs as before, and a CuTe row is filtered with the reason this probe
gives. The reason is read from files, not from an import: the installed
distribution's version, its CUDA libraries wheel (``nvidia-cutlass-dsl-libs-cu13``
or ``-cu12``, which holds the compiler), and whether ``cutlass`` resolves to the
DSL's package (its wheel adds ``dsl_packages`` to ``sys.path`` through a ``.pth``
file, which an install with ``pip --target`` on ``PYTHONPATH`` does not run).
The DSL has no CPU interpreter: a CuTe kernel compiles without a GPU (tests do
that), but only runs on one.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
from pathlib import Path
from typing import Any

from rapid_llm.kernels.registry.spec import Availability

__all__ = ["MIN_VERSION", "NO_INTERPRETER", "DISTRIBUTION", "available", "check", "installed", "dsl_version",
           "dsl_root", "parse_version"]

#: The distribution that ships the CuTe DSL, and the first release the rows are written for (pointer kernel
#: arguments with an assumed alignment, ``cute.arch.alloc_smem``, ``make_rmem_tensor``, ``--gpu-arch``).
DISTRIBUTION = "nvidia-cutlass-dsl"
MIN_VERSION = (4, 8)
INSTALL_HINT = "pip install 'nvidia-cutlass-dsl[cu13]>=4.8' (or: pip install 'rapid_llm[cute]')"
NO_INTERPRETER = ("the CuTe DSL has no CPU interpreter (a CuTe kernel compiles without a GPU, it runs on one): "
                  "a CuTe row runs on a CUDA GPU")


def parse_version(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``4.8.1``; None where it names none."""
    parts = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(parts[1]), int(parts[2])) if parts else None


def dsl_version() -> str | None:
    """The installed nvidia-cutlass-dsl's version (its metadata, no import), or None."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def dsl_root() -> Path | None:
    """The folder of the installed ``nvidia_cutlass_dsl`` package (no import), or None."""
    spec = importlib.util.find_spec("nvidia_cutlass_dsl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def check(version: str | None, root: Path | None, cutlass_origin: str | None) -> Availability:
    """Whether an installed DSL (its ``version``, its package folder ``root``, and where ``import cutlass`` would
    load from) is one the rows are written for, and if not, why."""
    need = f"{MIN_VERSION[0]}.{MIN_VERSION[1]}"
    if root is None:
        return Availability(False, f"the CuTe DSL ({DISTRIBUTION}) is not installed: {INSTALL_HINT}")
    if version is None:  # a package folder no installed distribution owns: what pip uninstall leaves behind
        return Availability(False, f"the CuTe DSL ({DISTRIBUTION}) is not installed: {root} is a folder without "
                                   f"its distribution's metadata (left by an uninstall?): {INSTALL_HINT}")
    parsed = parse_version(version)
    if parsed is None or parsed < MIN_VERSION:
        this = f"of an unknown version ({version})" if parsed is None else version
        return Availability(False, f"{DISTRIBUTION} {this} is older than the {need} the CuTe rows are written for: "
                                   f"{INSTALL_HINT}")
    if not any((root / f"cu{major}" / "lib").is_dir() for major in (13, 12)):
        return Availability(False, f"{DISTRIBUTION} {version} lacks its CUDA libraries wheel (the compiler): "
                                   f"pip install nvidia-cutlass-dsl-libs-cu13=={version}")
    packages = root / "dsl_packages"
    if cutlass_origin is None or not Path(cutlass_origin).resolve().is_relative_to(packages.resolve()):
        where = "nothing" if cutlass_origin is None else cutlass_origin
        return Availability(False, f"'import cutlass' finds {where}, not the CuTe DSL's package: its .pth file did "
                                   f"not run (an install with pip --target); put {packages} on PYTHONPATH")
    return Availability(True)


@functools.cache
def installed() -> Availability:
    """:func:`check` of this Python's DSL (cached: found by its files, once per process)."""
    spec = importlib.util.find_spec("cutlass")
    return check(dsl_version(), dsl_root(), spec.origin if spec is not None else None)


def available(device: Any = None) -> Availability:
    """A CuTe row's probe: a CUDA device to run on, and the DSL installed (see :func:`installed`).

    A CPU tensor is refused first, whether the DSL is installed or not: no install would let it run, and the
    reason explain shows on a CPU machine is then the same with or without the extra."""
    kind = getattr(device, "type", device) or "cuda"
    if kind == "cpu":
        return Availability(False, NO_INTERPRETER)
    answer = installed()
    if not answer:
        return answer
    import torch

    if not torch.cuda.is_available():
        return Availability(False, "no CUDA device visible (torch.cuda.is_available() is False)")
    return Availability(True)
