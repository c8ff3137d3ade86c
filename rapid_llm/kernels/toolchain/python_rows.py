"""A Python row (Gluon, Triton or CuTe DSL) shipped as one module of its op folder that declares itself on its
first line.

``promote()`` writes a notebook's Gluon, Triton or CuTe DSL row as ``ops/<group>/<op>/<name>.py``: the kernel and its
launcher by their source, and a first line ``# rapid_llm row: {...}`` naming the row, its launcher and its
golden record, as a ``.cu`` row declares itself. The registry reads that line without importing the module
(the module imports Triton, which costs seconds), so shipping such a row touches no shared file. A module
without the line is an ordinary module of the op (the rows its declaration lists, helpers).
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec, RegistryError
from rapid_llm.kernels.toolchain.jit_row import row_line_fields

__all__ = ["HEADER_PREFIX", "BACKENDS", "read_header", "write_header", "row_from_header", "module_of",
           "register_py_rows"]

HEADER_PREFIX = "# rapid_llm row: "
_HEADER_RE = re.compile(r"^# rapid_llm row: (\{.*\})\s*$")
_FIELDS = ("name", "op", "fn", "dtypes", "devices", "golden", "graph_safe", "min_sm", "description", "layouts",
           "priority")
#: The Python backends a module can ship a row of: each one's probe and the devices it can run on (the default).
BACKENDS = {
    "gluon": ("rapid_llm.kernels.toolchain.gluon_support:available", ("cuda",)),
    "cute": ("rapid_llm.kernels.toolchain.cute_support:available", ("cuda",)),
    "triton": ("rapid_llm.kernels.toolchain.triton_support:available", ("cuda", "cpu")),
}


def read_header(first_line: str, where: str = "module") -> dict[str, Any] | None:
    """The row a module's first line declares, or None when it declares none."""
    match = _HEADER_RE.match(first_line)
    if match is None:
        return None
    fields = row_line_fields(match[1], _FIELDS, where)
    backend = str(fields["name"]).split("/", 1)[0]
    if backend not in BACKENDS:
        raise RegistryError(f"{where}: a Python module ships a {' or '.join(BACKENDS)} row, not {fields['name']!r}")
    return fields


def write_header(text: str, fields: dict[str, Any]) -> str:
    """``text`` with the row line ``fields`` as its first line (a module's own row line replaced)."""
    line = HEADER_PREFIX + json.dumps({k: fields[k] for k in _FIELDS if k in fields}, ensure_ascii=True)
    first, _, rest = text.partition("\n")
    return f"{line}\n{rest}" if _HEADER_RE.match(first) else f"{line}\n{text}"


def module_of(path: Path, ops_dir: Path) -> str:
    """The module name of an op folder's file ``path`` (``ops_dir`` is the package's ``kernels/ops``)."""
    parts = path.relative_to(ops_dir).with_suffix("").parts
    return ".".join(("rapid_llm", "kernels", "ops", *parts))


def row_from_header(fields: dict[str, Any], module: str, target: Any = None) -> KernelSpec:
    """The row a module declares; ``target`` (default: the module's launcher, by reference) for a row registered
    before its module can be imported (promote() into a copy of the package)."""
    backend = fields["name"].split("/", 1)[0]
    probe, devices = BACKENDS[backend]
    return KernelSpec(
        name=fields["name"], op=fields["op"], target=target or f"{module}:{fields['fn']}", available=probe,
        dtypes=tuple(fields.get("dtypes", ("bf16", "fp16", "fp32"))), devices=tuple(fields.get("devices", devices)),
        golden=GoldenRecord.from_json(fields.get("golden") or {}), priority=fields.get("priority"),
        graph_safe=bool(fields.get("graph_safe", True)), min_sm=fields.get("min_sm"),
        description=fields.get("description", f"{module}, launcher {fields['fn']}()"),
        layouts=tuple(fields["layouts"]) if "layouts" in fields else None,
    )


def register_py_rows(root: Path | None = None) -> list[KernelSpec]:
    """Register every row that a module under ``root`` (default: the shipped op folders) declares on its first
    line; only the first line of each module is read."""
    root = platform.OPS_DIR if root is None else root
    out = []
    for path in sorted(root.glob("*/*/*.py")):
        with path.open(errors="replace") as f:
            fields = read_header(f.readline(), str(path))
        if fields is None:
            continue
        try:
            _spec.get_decl(fields["op"])
        except RegistryError:
            warnings.warn(f"{path}: its row {fields['name']} serves op {fields['op']!r}, which no op group "
                          "declares; the row is not registered", RuntimeWarning, stacklevel=2)
            continue
        out.append(_spec.register(row_from_header(fields, module_of(path, root)), replace=True))
    return out
