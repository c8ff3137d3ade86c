"""The one owner of facts several layers share: dtype names, device labels, size classes, paths.

Each fact is defined here once and imported everywhere else. If the label
that writes a measurement and the label that reads it ever differed,
measured dispatch would silently stop working; one definition prevents that.
Nothing here touches CUDA at import time; torch is imported where needed.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = [
    "DTYPE_NAMES", "dtype_name", "describe", "shape_str", "torch_dtype", "device_label", "size_bucket", "sm_version",
    "cache_dir", "project_root", "PACKAGE_DIR", "OPS_DIR", "CUDA_INCLUDE", "FIGURES", "op_folders", "slug", "cuda_tool", "nvcc_path", "cuda_home", "write_atomic",
    "locked", "lazy_exports",
    "SUPPORTED_ARCHS", "supported_archs",
]

#: The GPU architectures (compute capabilities) the project's kernels are built and checked for: Ampere,
#: Hopper, Blackwell. CI compile-checks every shipped source for each one the installed toolkit can target.
SUPPORTED_ARCHS = ("8.0", "9.0", "10.0")

#: Short dtype names used in rows, mapped to torch attribute names (strings: no torch import here).
DTYPE_NAMES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "fp8e4m3": "float8_e4m3fn",
    "fp8e5m2": "float8_e5m2",
    "int8": "int8",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}

#: The installed package; its ops, one folder each (``ops/<group>/<op>/``: the declaration, reference, rows,
#: ``.cu`` sources and ``figures/<gpu kind>.json``, package data a wheel carries); and the include root of the
#: headers every CUDA source may use (``#include "common/rapid_llm.cuh"``).
PACKAGE_DIR = Path(__file__).resolve().parent.parent
OPS_DIR = PACKAGE_DIR / "kernels" / "ops"
CUDA_INCLUDE = PACKAGE_DIR / "kernels" / "cuda"
FIGURES = "figures"  # the folder of an op's measured figures, one file per GPU kind


def op_folders(root: Path | None = None) -> list[Path]:
    """Every op folder under ``root`` (default: the package's ops), ``<group>/<op>/``, sorted."""
    root = OPS_DIR if root is None else root
    return sorted(p.parent for p in root.glob("*/*/__init__.py"))


@functools.cache
def _torch_to_name() -> dict[Any, str]:
    import torch

    return {getattr(torch, attr): short for short, attr in DTYPE_NAMES.items() if hasattr(torch, attr)}


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` (or ``"bfloat16"``, or ``"bf16"``) -> ``"bf16"``; ValueError for others."""
    if isinstance(dtype, str):
        if dtype in DTYPE_NAMES:
            return dtype
        import torch

        dtype = getattr(torch, dtype, dtype)
    try:
        return _torch_to_name()[dtype]
    except (KeyError, TypeError):
        raise ValueError(f"dtype {dtype} has no short name in rapid_llm (known: {', '.join(DTYPE_NAMES)})") from None


def shape_str(t: Any) -> str:
    """``[4, 8]``: a tensor's shape in messages, as a .cu launcher's ``rl::Tensor::shape_str`` spells it."""
    return f"[{', '.join(str(s) for s in t.shape)}]"


def describe(t: Any) -> str:
    """``[4, 8] bf16 on cuda:0``: a tensor in messages, in the words of a .cu launcher's ``rl::Tensor::describe``,
    so a Python row and a CUDA row refusing one input say the same thing."""
    try:
        dtype = dtype_name(t.dtype)
    except ValueError:
        dtype = str(t.dtype).replace("torch.", "")
    return f"{shape_str(t)} {dtype} on {t.device}"


def must_match(op: str, name: str, t: Any, ref_name: str, ref: Any) -> str:
    """``op: out must match x's shape and dtype, got A vs B``: the one sentence every row (and each .cu
    launcher's RL_CHECK) says when a tensor must have another's shape and dtype."""
    return f"{op}: {name} must match {ref_name}'s shape and dtype, got {describe(t)} vs {describe(ref)}"


def torch_dtype(short: str) -> Any:
    """``"bf16"`` -> ``torch.bfloat16``."""
    import torch

    if short not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {short!r}; expected one of {', '.join(DTYPE_NAMES)}")
    return getattr(torch, DTYPE_NAMES[short])


@functools.lru_cache(maxsize=None)
def device_label(device: Any) -> str:
    """The name measurements are stored and looked up under: the GPU's name, or "cpu"."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return device.type
    if not torch.cuda.is_available():
        return "cuda (no device visible)"
    return torch.cuda.get_device_name(device)


def size_bucket(numel: int) -> int:
    """The power-of-two size class (``numel.bit_length()``) that dispatch caches and measurements key by."""
    return int(numel).bit_length()


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(index)


def sm_version(device: Any = None) -> int:
    """The SM number of a CUDA device (90 on H100/H200); 0 when there is no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return 0
    device = torch.device("cuda") if device is None else torch.device(device)
    if device.type != "cuda":
        return 0
    major, minor = _capability(device.index if device.index is not None else torch.cuda.current_device())
    return major * 10 + minor


def cache_dir(kind: str) -> Path:
    """``$RAPID_LLM_CACHE_DIR/<kind>``, else ``$XDG_CACHE_HOME/rapid_llm/<kind>`` (made on first write)."""
    root = os.environ.get("RAPID_LLM_CACHE_DIR")
    if root:
        return Path(root) / kind
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "rapid_llm" / kind


def project_root(start: Any = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: cwd) holding a pyproject.toml."""
    here = Path(start if start is not None else os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    return None


def slug(text: str) -> str:
    """A file-name-safe form of a device label: "NVIDIA H200" -> "nvidia_h200"."""
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower() or "unknown"


def cuda_tool(name: str) -> str | None:
    """A CUDA toolkit program (nvcc, ncu, compute-sanitizer, cuobjdump, nvdisasm), looked for in one order:
    $CUDA_HOME/bin, $CUDA_PATH/bin (a toolkit chosen on purpose), PATH, beside PATH's nvcc, then
    /usr/local/cuda/bin, where installers put the toolkit without adding it to PATH; else None."""
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(variable)
        if home and (Path(home) / "bin" / name).exists():
            return str(Path(home) / "bin" / name)
    found = shutil.which(name)
    if found:
        return found
    nvcc = shutil.which("nvcc")
    for folder in ([Path(nvcc).resolve().parent] if nvcc else []) + [Path("/usr/local/cuda/bin")]:
        if (folder / name).exists():
            return str(folder / name)
    return None


def supported_archs() -> tuple[str, ...]:
    """The :data:`SUPPORTED_ARCHS` the installed nvcc can target (``nvcc --list-gpu-arch``); () without nvcc.

    An older toolkit lacks the newest architectures (sm_100 needs CUDA 12.8);
    a check asks for these rather than failing on an arch nobody could build.
    Asked once per nvcc (one quick process), never at import.
    """
    return _targetable(nvcc_path())


def nvcc_path() -> str | None:
    """The nvcc every build and probe uses (:func:`cuda_tool`'s order)."""
    return cuda_tool("nvcc")


@functools.cache
def cuda_home() -> Path | None:
    """The toolkit root whose headers device code includes, in :func:`cuda_tool`'s order: $CUDA_HOME,
    $CUDA_PATH, the folder above the nvcc it finds, /usr/local/cuda; the first with the runtime headers."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = nvcc_path()
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if c and (Path(c) / "include" / "cuda_runtime.h").is_file():
            return Path(c)
    return None


@functools.cache
def _targetable(nvcc: str | None) -> tuple[str, ...]:
    if nvcc is None:
        return ()
    try:
        listed = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    known = set(re.findall(r"compute_(\d+)", listed))
    return tuple(a for a in SUPPORTED_ARCHS if a.replace(".", "") in known)


def write_atomic(path: Any, text: str) -> bool:
    """Write ``text`` to ``path`` through a temporary file and a rename; False when it already held it.

    A reader (a compiler, an editor, another process) sees the old file or the new one, never half of
    one, and a failed write leaves the old file as it was. An unchanged file is not touched.
    """
    path = Path(path)
    data = text.encode("utf-8")
    mode = 0o644  # mkstemp's 0600 would hide the file from a build run as another user
    try:
        if path.read_bytes() == data:
            return False
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


@contextlib.contextmanager
def locked(path: Path, kind: str = "file") -> Iterator[None]:
    """An exclusive lock on read-modify-write cycles of ``path`` across processes. The lock file lives in the
    cache (``locks/``), never beside ``path``: a committed file gets no lock file next to it."""
    name = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:24]
    lock = cache_dir("locks") / f"{kind}_{name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def lazy_exports(package: str, exports: dict[str, tuple[str, str]], namespace: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for names that load on first use: ``exports`` maps a name to
    (module, attribute); a loaded name is kept in ``namespace`` (the package's globals), so it loads once.
    What keeps a package's import free of torch (and Ray) until a name is used."""
    import importlib

    def __getattr__(name: str) -> Any:
        if name in exports:
            module, attr = exports[name]
            value = getattr(importlib.import_module(module), attr)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
