"""Verdicts remembered by source digest: a passing verify of a source is kept across kernel restarts.

A ``%%cuda_jit`` cell re-run in a new process is the same code when its digest
(rapid_llm.kernels.toolchain.jit_row.source_digest) is, so its last passing
verify still holds: the cell's row starts golden-verified with that record
instead of asking for another verify. Only passes are kept; a failure is never
remembered, so a row is never let through on a stale verdict, and a record
another user could have written (cache_safety.trusted) is not believed.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry.spec import GoldenRecord
from rapid_llm.kernels.toolchain.cache_safety import trusted

__all__ = ["remember_verification", "recall_verification"]


def _verification_path(digest: str) -> Path:
    return platform.cache_dir("verified") / f"{digest[:32]}.json"


def remember_verification(digest: str, golden: GoldenRecord) -> None:
    """Keep a passing verification of a source (keyed by its digest) across kernel restarts."""
    platform.write_atomic(_verification_path(digest), json.dumps({"digest": digest, **golden.to_json()}))


def recall_verification(digest: str) -> GoldenRecord | None:
    """The passing verification remembered for a source with this digest, or None."""
    path = _verification_path(digest)
    if not trusted(path):
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("digest") != digest:
            return None
        return dataclasses.replace(GoldenRecord.from_json(data), verified=True)  # only passes are remembered
    except (OSError, ValueError, KeyError, TypeError):
        return None
