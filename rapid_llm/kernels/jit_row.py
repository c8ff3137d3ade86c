"""A .cu file is a row: the generic JIT target, and rows that .cu files declare about themselves.

A shipped source under ``kernels/csrc/<group>/`` becomes a row by carrying one
line, written by ``promote()`` (or by hand)::

    // rapid_llm row: {"name": "jit/scale", "op": "scale", "fn": "scale_vec", "dtypes": ["bf16", "fp16", "fp32"],
    //                 "golden": {"verified": true, "max_abs_diff": 0.0, "baseline": "native/scale"}}

(on a single line). The registry reads these lines when it discovers the
shipped ops; no per-op Python wrapper exists. :class:`JitRow` serves shipped
rows and ``%%cuda_jit`` rows alike: ``op(input, *args, out=None)`` allocates
``out`` like the input and calls the launcher ``fn(out, input, *args)``.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Callable

import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels import spec as _spec
from rapid_llm.kernels.spec import GoldenRecord, KernelSpec, RegistryError

__all__ = ["JitRow", "HEADER_PREFIX", "read_header", "write_header", "row_from_header", "register_cu_rows",
           "source_digest", "remember_verification", "recall_verification"]

HEADER_PREFIX = "// rapid_llm row: "
_empty_like = torch.empty_like
_CONTIGUOUS = torch.contiguous_format
_HEADER_RE = re.compile(r"^// rapid_llm row: (\{.*\})\s*$", re.M)
_FIELDS = ("name", "op", "fn", "dtypes", "golden", "graph_safe", "min_sm", "priority", "description")


def source_digest(text: str) -> str:
    """What a verification is keyed by: the source without its row line (promote rewrites that line)."""
    return hashlib.sha256(_HEADER_RE.sub("", text).encode()).hexdigest()


class JitRow:
    """Row target: launcher ``fn`` of the module built from ``source``, called out-first.

    The module is built (or loaded from the disk cache) on the first call;
    afterwards a call is the allocation of ``out`` and the launcher call.
    """

    def __init__(self, source: str | Path, fn: str, *, launcher: Callable[..., Any] | None = None,
                 digest: str | None = None, not_built: str | None = None) -> None:
        self.source = Path(source)
        self.fn = fn
        self.digest = digest
        self.not_built = not_built  # why this machine did not build it (a %%cuda_jit cell without CUDA)
        self._launcher = launcher
        #: the source's digest when its launcher was built here (promote checks the file is still that code)
        self.built_digest = source_digest(self.source.read_text()) if launcher is not None else None
        self.__name__ = self.__qualname__ = fn
        self.__doc__ = f"{fn}(input, *args, out=None): allocates out like input, then {fn}(out, input, *args)."

    def launcher(self) -> Callable[..., Any]:
        """The built launcher (building the source on first use)."""
        if self.not_built is not None:
            raise RuntimeError(f"{self.source.name} was not built on this machine: {self.not_built}")
        if self._launcher is None:
            from rapid_llm.kernels.jit import load_jit

            module = load_jit(self.source.stem, str(self.source))
            try:
                self._launcher = getattr(module, self.fn)
            except AttributeError:
                raise RegistryError(f"{self.source} exports no function {self.fn!r}") from None
        return self._launcher

    def __call__(self, input: Any, *args: Any, out: Any = None) -> Any:
        launcher = self._launcher or self.launcher()
        if out is None:  # empty_like is the cheapest allocation from Python (new_empty(shape) costs 2.5x)
            out = _empty_like(input, memory_format=_CONTIGUOUS)
        launcher(out, input, *args)
        return out

    def __repr__(self) -> str:
        shown = self.source.relative_to(platform.CSRC) if self.source.is_relative_to(platform.CSRC) else self.source.name
        return f"JitRow({str(shown)!r}, {self.fn!r})"


def read_header(text: str, where: str = "source") -> dict[str, Any] | None:
    """The row a source declares about itself, or None when it declares none."""
    match = _HEADER_RE.search(text)
    if match is None:
        return None
    try:
        fields = json.loads(match[1])
    except ValueError as exc:
        raise RegistryError(f"{where}: the rapid_llm row line is not valid JSON ({exc})") from None
    unknown = sorted(set(fields) - set(_FIELDS))
    if unknown or not {"name", "op", "fn"} <= set(fields):
        raise RegistryError(f"{where}: the rapid_llm row line needs name, op and fn"
                            + (f"; unknown fields: {', '.join(unknown)}" if unknown else ""))
    return fields


def write_header(text: str, fields: dict[str, Any]) -> str:
    """``text`` with its row line set to ``fields`` (replaced, or added as the first line)."""
    line = HEADER_PREFIX + json.dumps({k: fields[k] for k in _FIELDS if k in fields}, ensure_ascii=True)
    if _HEADER_RE.search(text):
        return _HEADER_RE.sub(line, text, count=1)
    return f"{line}\n{text}"


def row_from_header(fields: dict[str, Any], source: Path) -> KernelSpec:
    golden = fields.get("golden") or {}
    per_dtype = tuple((d, float(v)) for d, v in golden.get("per_dtype", ()))
    return KernelSpec(
        name=fields["name"], op=fields["op"], backend="jit", target=JitRow(source, fields["fn"]),
        available="rapid_llm.kernels.jit:available", dtypes=tuple(fields.get("dtypes", ("bf16", "fp16", "fp32"))),
        devices=("cuda",),
        golden=GoldenRecord(verified=bool(golden.get("verified", False)), max_abs_diff=golden.get("max_abs_diff"),
                            baseline=golden.get("baseline"), per_dtype=per_dtype),
        priority=fields.get("priority"), graph_safe=bool(fields.get("graph_safe", True)),
        min_sm=fields.get("min_sm"), description=fields.get("description", f"{source.name}, launcher {fields['fn']}()"),
    )


def _verification_path(digest: str) -> Path:
    return platform.cache_dir("verified") / f"{digest[:32]}.json"


def remember_verification(digest: str, golden: GoldenRecord) -> None:
    """Keep a passing verification of a source (keyed by its digest) across kernel restarts."""
    path = _verification_path(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{id(golden)}")
    tmp.write_text(json.dumps({"digest": digest, "max_abs_diff": golden.max_abs_diff, "baseline": golden.baseline,
                               "per_dtype": [list(p) for p in golden.per_dtype]}))
    tmp.replace(path)


def recall_verification(digest: str) -> GoldenRecord | None:
    """The passing verification remembered for a source with this digest, or None."""
    try:
        data = json.loads(_verification_path(digest).read_text())
        if data.get("digest") != digest:
            return None
        return GoldenRecord(verified=True, max_abs_diff=data["max_abs_diff"], baseline=data["baseline"],
                            per_dtype=tuple((d, float(v)) for d, v in data["per_dtype"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def register_cu_rows(root: Path | None = None) -> list[KernelSpec]:
    """Register every row that a .cu file under ``root`` (default: the shipped sources) declares."""
    root = platform.CSRC if root is None else root
    out = []
    for path in sorted(root.glob("*/*.cu")):
        fields = read_header(path.read_text(errors="replace"), str(path))
        if fields is not None:
            out.append(_spec.register(row_from_header(fields, path), replace=True))
    return out
