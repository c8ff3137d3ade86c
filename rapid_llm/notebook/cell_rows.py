"""Turning a cell's build into a dispatch row: which launcher, and the KernelSpec.

The row's target, the out-first call, is a ``rapid_llm.kernels.toolchain.jit_row.JitRow``.

A row made here is named ``jit/<NAME>`` and starts golden-unverified, so it
cannot win dispatch until it has been checked against its baseline. Its
verification survives a re-run only while the source is unchanged: an
edited kernel must be verified again.
"""
from __future__ import annotations

import os

from types import ModuleType
from typing import Any, Callable

from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.spec import Availability, GoldenRecord, KernelSpec

__all__ = [
    "RowError",
    "DEFAULT_DTYPES",
    "row_name",
    "parse_dtypes",
    "exported_functions",
    "pick_launcher",
    "not_built",
    "check_can_register",
    "register_cell_row",
    "drop_cell_row",
    "native_row",
    "native_row_hint",
]

DEFAULT_DTYPES = ("bf16", "fp16", "fp32")

#: row name -> digest of the cell (and flags) it was last registered from. Rows
#: in here were made by the magic; any other row is never replaced by it.
_digests: dict[str, str] = {}


class RowError(ValueError):
    """A row the cell asked for that cannot be made; the message says why."""


def row_name(name: str) -> str:
    return f"jit/{name}"


def parse_dtypes(text: str | None, default: tuple[str, ...] = DEFAULT_DTYPES) -> tuple[str, ...]:
    """``"bf16,fp16"`` -> ``("bf16", "fp16")``, each checked against the known dtype names."""
    if text is None:
        return tuple(default)
    names = tuple(d.strip() for d in text.replace(" ", ",").split(",") if d.strip())
    unknown = [d for d in names if d not in _spec.DTYPE_NAMES]
    if not names or unknown:
        raise RowError(
            f"--dtypes: unknown dtype {unknown[0]!r}; expected a comma-separated list of "
            f"{', '.join(_spec.DTYPE_NAMES)}" if unknown else "--dtypes is empty"
        )
    return names


def exported_functions(module: ModuleType) -> dict[str, Callable[..., Any]]:
    """The module's public callables, by name (what gets bound into the notebook)."""
    return {n: getattr(module, n) for n in sorted(dir(module))
            if not n.startswith("_") and callable(getattr(module, n))}


def pick_launcher(functions: dict[str, Callable[..., Any]], name: str, fn: str | None = None) -> str:
    """``fn`` if given, else the function called ``name``, else the only one; otherwise say which exist."""
    listed = ", ".join(functions) or "none"
    if fn is not None:
        if fn not in functions:
            raise RowError(f"--fn {fn}: the module exports no function {fn!r} (it exports: {listed})")
        return fn
    if name in functions:
        return name
    if len(functions) == 1:
        return next(iter(functions))
    raise RowError(
        f"which function launches the kernel? The module exports {listed}, none named {name!r}; "
        "pass --fn FUNCTION"
    )


def not_built(reason: str) -> Callable[..., Availability]:
    """The availability probe of a row whose module could not be built (or cannot run) here.

    Its target is a JitRow with ``not_built`` set, which raises with the same reason when called.
    """

    def probe(device: Any = None) -> Availability:
        return Availability(False, reason)

    return probe


def check_can_register(name: str, op: str) -> None:
    """Refuse, before anything is written or built, a row that would clobber another's."""
    row = row_name(name)
    try:
        existing = _spec.get_row(row)
    except _spec.RegistryError:
        return
    if row not in _digests:
        raise RowError(f"row {row} is already registered (not by %%cuda_jit): pick another NAME")
    if existing.op != op:
        raise RowError(
            f"row {row} serves op {existing.op!r}; to move it to {op!r}, first "
            f"rapid_llm.kernels.unregister({row!r}), or pick another NAME"
        )


def native_row(op: str) -> str | None:
    """The op's native row name (the registry finds the shipped rows first), or None for a brand-new op."""
    row = _spec.native_row(op)
    return None if row is None else row.name


def native_row_hint(op: str) -> str:
    return (
        f"op {op!r} has no native row yet, and dispatch needs that floor before it can run {op!r}: "
        f"register one from a plain-torch function, e.g. register(KernelSpec(name='native/{op}', "
        f"op='{op}', backend='native', target=my_{op}, devices=('cpu', 'cuda')))"
    )


def register_cell_row(name: str, op: str, *, target: Callable[..., Any], available: Any,
                      dtypes: tuple[str, ...], graph_safe: bool, digest: str,
                      description: str) -> tuple[KernelSpec, bool]:
    """Register (or replace) ``jit/<name>`` for ``op``; True when an earlier verification was kept."""
    check_can_register(name, op)
    row = row_name(name)
    golden = GoldenRecord(verified=False, baseline=native_row(op))
    kept = False
    try:
        old = _spec.get_row(row)
    except _spec.RegistryError:
        old = None
    if old is not None and old.golden.verified and _digests.get(row) == digest:
        golden, kept = old.golden, True
    else:  # verified in an earlier kernel, source unchanged
        from rapid_llm.kernels.verification.remembered import recall_verification

        recalled = recall_verification(digest, op)
        if recalled is not None and recalled.baseline == golden.baseline:
            golden, kept = recalled, True
    spec = KernelSpec(name=row, op=op, backend="jit", target=target, available=available, dtypes=dtypes,
                      devices=("cuda",), golden=golden, graph_safe=graph_safe, description=description)
    _spec.register(spec, replace=True)
    _digests[row] = digest
    from rapid_llm.kernels.verification.remembered import recall_refusal

    refused = recall_refusal(digest, op)  # a check refused this very build in an earlier kernel
    if refused and not spec.golden.refused:
        spec, kept = _spec.refuse(row, refused), False
    if not kept and not spec.golden.refused:
        _prewarm_verify()
    return spec, kept


def _prewarm_verify() -> None:
    """A row verify has not seen is about to be verified: start its warm child now, while the user reads."""
    import torch

    from rapid_llm.kernels.verification import isolate

    if torch.cuda.is_available() and isolate.WARM and os.environ.get("RAPID_LLM_ISOLATE", "1") != "0":
        isolate.prewarm()


def drop_cell_row(name: str) -> bool:
    """Remove ``jit/<name>`` if the magic registered it; True when a row went."""
    row = row_name(name)
    if row not in _digests:
        return False
    del _digests[row]
    try:
        _spec.unregister(row)
    except _spec.RegistryError:
        return False
    return True
