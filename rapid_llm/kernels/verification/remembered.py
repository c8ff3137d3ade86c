"""Verdicts remembered by source digest: a passing verify of a source is kept across kernel restarts.

A ``%%cuda_jit`` cell re-run in a new process is the same code when its digest
(rapid_llm.kernels.toolchain.jit_row.source_digest) is, so its last passing
verify still holds: the cell's row starts golden-verified with that record
instead of asking for another verify. Only passes are kept; a failure is never
remembered, so a row is never let through on a stale verdict; a verdict holds
only under the declaration it was judged against (declaration_key); and a record
another user could have written (cache_safety.trusted) is not believed.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry.spec import GoldenRecord
from rapid_llm.kernels.toolchain.cache_safety import trusted

__all__ = ["remember_verification", "recall_verification", "declaration_key", "remember_refusal", "recall_refusal"]


def _verification_path(digest: str) -> Path:
    return platform.cache_dir("verified") / f"{digest[:32]}.json"


def declaration_key(op: str) -> str | None:
    """What a verdict of a row of ``op`` was judged against: "library" for the library's own declaration, else
    the digest of the notebook's declaration as written out (None where it cannot be: not remembered then).

    A verdict holds only under the declaration it was judged by: a cell verified against a notebook's shadow
    of a library op (a floor that doubles, say) is not verified for the library's op in the next kernel.
    """
    from rapid_llm.kernels.registry import opsource, spec
    from rapid_llm.kernels.toolchain.jit_row import source_digest

    if spec.library_declares(op) and spec.shadowed_rows(op) is None:
        return "library"
    try:
        return source_digest(opsource.module_source(op, ship=False, local_imports=True))[:32]
    except Exception:  # noqa: BLE001 - a declaration that cannot be written out (a lambda) is not remembered
        return None


def remember_verification(digest: str, golden: GoldenRecord, op: str) -> None:
    """Keep a passing verification of a source (keyed by its digest) of a row of ``op`` across kernel restarts."""
    declaration = declaration_key(op)
    if declaration is None:
        return
    platform.write_atomic(_verification_path(digest),
                          json.dumps({"digest": digest, "op": op, "declaration": declaration, **golden.to_json()}))


def remember_refusal(digest: str, op: str, why: str) -> None:
    """Keep that a check refused this build (in place of any passing verdict of it): a new kernel re-running the
    same cell gets the row refused, not verified, until the source changes."""
    declaration = declaration_key(op)
    platform.write_atomic(_verification_path(digest),
                          json.dumps({"digest": digest, "op": op, "declaration": declaration, "refused": why}))


def recall_refusal(digest: str, op: str) -> str | None:
    """Why a check refused the build with this digest (remember_refusal), or None."""
    data = _read(digest)
    return data.get("refused") if data is not None and data.get("op") == op else None


def _read(digest: str) -> dict | None:
    path = _verification_path(digest)
    if not trusted(path):
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("digest") == digest else None


def recall_verification(digest: str, op: str) -> GoldenRecord | None:
    """The passing verification remembered for a source with this digest, judged against ``op``'s declaration
    as it is now; else None (a refused build is never recalled as verified)."""
    data = _read(digest)
    if data is None or data.get("refused") or data.get("op") != op or data.get("declaration") != declaration_key(op):
        return None
    try:
        return dataclasses.replace(GoldenRecord.from_json(data), verified=True)  # only passes are remembered
    except (ValueError, KeyError, TypeError):
        return None
